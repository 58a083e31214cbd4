"""The shape suite's measurement on the GPU, kept short: two small shapes of one group (long_k, quick: 256 x 256 x
65536 and 64 x 64 x 131072) in bfloat16, a small budget; every record verified and timed, the summary finite."""

import math

import pytest

from gemmlab.bench import suite

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def test_two_shapes_verify_time_and_summarize():
    tf32 = torch.backends.cuda.matmul.allow_tf32
    seen = []
    res = suite.measure(["bfloat16"], ["long_k"], quick=True, budget_ms=10.0, on_shape=seen.append)
    assert torch.backends.cuda.matmul.allow_tf32 == tf32  # restored
    assert [p.shape for p in seen] == [(256, 256, 65536), (64, 64, 131072)]
    assert len(res.records) == 4 and all(r.ok for r in res.records), [(r.label, r.status, r.note)
                                                                       for r in res.records]
    mine = [r for r in res.records if r.kernel == suite.GEMMLAB]
    assert len(mine) == 2 and all(r.rel_error < suite.TOLERANCE["bfloat16"] for r in mine)
    s = suite.summarize(res)["bfloat16"]
    assert s.count == 2 and s.failures == ()
    assert math.isfinite(s.geomean) and s.geomean > 0 and math.isfinite(s.worst) and s.worst > 0
