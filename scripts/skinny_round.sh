#!/bin/bash
# Rung 13 on the GPU machine in one call: compile its instantiations in parallel, its GPU tests, then the
# decoding probe against torch (bf16, then strict fp32) with parameter sets beside the heuristic's.
#   bash scripts/skinny_round.sh ["VARIANT ..."]      e.g. "COPY=0 UNROLL=4,STAGES=6" (each a parameter set)
# MS: the rows of A to time (default 1,8,16,32); TESTS=none skips the tests; FP32=0 skips the fp32 probe.
set -u
export PYTHONPATH=src GEMMLAB_CACHE_DIR=${GEMMLAB_CACHE_DIR:-/tmp/gemmlab_cache}
VARIANTS=${1:-}
python3 scripts/decode_probe.py --warm ${VARIANTS:+--variants $VARIANTS} 2>&1 | tail -2
if [ "${TESTS:-}" != none ]; then
    python3 -m pytest -q -x tests/test_skinny_gpu.py > "${OUT:-/tmp}/skinny_tests.txt" 2>&1
    tail -4 "${OUT:-/tmp}/skinny_tests.txt"
fi
python3 scripts/decode_probe.py --ms "${MS:-1,8,16,32}" ${VARIANTS:+--variants $VARIANTS} 2>&1 | tee "${OUT:-/tmp}/decode_bf16.txt" | tail -30
[ "${FP32:-1}" = 1 ] && python3 scripts/decode_probe.py --fp32 --ms 1,16,32 --variants COPY=0 2>&1 | tee "${OUT:-/tmp}/decode_fp32.txt" | tail -18
