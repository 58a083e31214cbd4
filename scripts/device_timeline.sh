#!/bin/bash
# The timeline tests and probe on the GPU machine (one call): tests first, then the phases at 4096^3 and 8192^3.
set -u
export PYTHONPATH=src GEMMLAB_CACHE_DIR=/tmp/gemmlab_cache
python3 -m pytest -q -x tests/test_timeline.py tests/test_wgmma_gpu.py -k "traced or timeline" 2>&1 | tail -5
python3 scripts/timeline_probe.py "$@" 2>&1
