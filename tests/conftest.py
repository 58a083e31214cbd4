import os

import numpy as np
import pytest

from gemmlab.runtime import device


def pytest_collection_modifyitems(config, items):
    if device.gpu_available():
        return
    skip = pytest.mark.skip(reason=f"no GPU: {device.gpu_unavailable_reason()}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _private_kernel_cache(tmp_path_factory):
    """Tests compile into their own cache unless one is given, so they never depend on a user's cache."""
    if "GEMMLAB_CACHE_DIR" not in os.environ:
        os.environ["GEMMLAB_CACHE_DIR"] = str(tmp_path_factory.mktemp("gemmlab-cache"))
    yield


@pytest.fixture
def rng():
    return np.random.default_rng()
