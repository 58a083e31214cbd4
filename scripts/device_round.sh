#!/bin/bash
# Rung 12 on the GPU machine in one call: its GPU tests (TESTS, default the rung's file), ncu's instruction
# mix against cuBLAS at 4096^3, the timeline's phases, then flushed (interleaved) and sustained timings against
# cuBLAS (TESTS_K: a pytest -k expression; TESTS_ONLY=1: the tests alone). Each part's table is printed as it ends; the sustained one last.
#   bash scripts/device_round.sh ["VARIANT ..."]      e.g. "GROUP_M=8 CLUSTER=2,DEFER=1" (each a parameter set)
set -u
export PYTHONPATH=src GEMMLAB_CACHE_DIR=/tmp/gemmlab_cache
VARIANTS=${1:-}
TESTS=${TESTS:-tests/test_wgmma_gpu.py}
[ "$TESTS" != none ] && python3 -m pytest -q -x $TESTS ${TESTS_K:+-k "$TESTS_K"} > "${OUT:-/tmp}/tests.txt" 2>&1
[ "$TESTS" != none ] && tail -4 "${OUT:-/tmp}/tests.txt"
[ -n "${TESTS_ONLY:-}" ] && exit 0
bash scripts/ncu_opcodes.sh 4096 > /dev/null 2>&1
for k in cublas wgmma; do
    grep -A30 sass__inst "${OUT:-/tmp}/opcodes_$k.txt" | tr ';(' '\n\n' | sed 's/^ *//' | grep -E "^(HGMMA|STS|STSM|FFMA|FADD|FMUL|R2UR|UIADD3|LOP3):" | tr '\n' ' '
    echo; grep -E "smsp__inst_executed.sum" "${OUT:-/tmp}/opcodes_$k.txt"
done
ncu --clock-control none -k regex:"wgmma|nvjet" --launch-skip 2 --launch-count 1 --metrics sm__cycles_elapsed.avg,gpu__time_duration.sum \
    python3 scripts/ncu_once.py --kernel wgmma --n 4096 2>&1 | grep -E "sm__cycles|gpu__time"
python3 scripts/timeline_probe.py --shapes 4096 8192 --acts none gelu_tanh --repeat 1 --variants "" $VARIANTS 2>&1 \
    | grep -E "epilogue \(cycles\)|^case|defaults|=" | cut -c1-160
python3 scripts/device_wgmma_check.py --sizes 4096,8192 --no-correctness --no-mma-sync --rounds 10 ${VARIANTS:+--variants "${VARIANTS// /;}"} 2>&1 | tail -8
python3 scripts/power_probe.py --sizes 4096,8192 --seconds 1.0 --reps 3 --no-fused ${VARIANTS:+--variants $VARIANTS} 2>&1 | tail -10
