#!/bin/bash
# Rung 15 (wgmma) beside cuBLAS under ncu, one launch each (GPU machine): the kernel cuBLAS picked (its name, grid,
# block, cluster size, registers and shared memory from ncu's launch statistics) and the counters that
# compare them: memory and L2 traffic, L2 sectors from the SMs and across the fabric between the L2 halves,
# shared-memory wavefronts, instructions issued, cycles and duration.
#   bash scripts/ncu_compare.sh "SIZE ..." ["PARAM=VALUE,... ..."]      e.g. "4096 8192" "CLUSTER=2"
# Each size runs cuBLAS and rung 15's defaults; each parameter set (comma-separated) runs at the first size.
set -u
export PYTHONPATH=src GEMMLAB_CACHE_DIR=/tmp/gemmlab_cache
SIZES=${1:-"4096 8192"}
VARIANTS=${2:-}
M=dram__bytes_read.sum,lts__t_bytes.sum,lts__t_sectors_srcunit_tex.sum,lts__t_sectors_srcunit_ltcfabric.sum
M=$M,smsp__inst_executed.sum,sm__cycles_elapsed.avg,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,gpu__time_duration.sum
run() {  # label, ncu_once arguments
    local label=$1; shift
    echo "== $label"
    ncu --clock-control none -k regex:"wgmma|nvjet|gemm|sm90" --launch-skip 2 --launch-count 1 --section LaunchStats \
        --metrics $M python3 scripts/ncu_once.py "$@" 2>&1 \
        | grep -E "^\s+(dram|lts|smsp|sm__|l1tex|gpu__|Cluster|Grid Size|Block Size|Registers|Shared Memory Config|Dynamic Shared|Static Shared)|^  [a-zA-Z_].*\(" \
        | sed 's/  */ /g' | cut -c1-200
}
for n in $SIZES; do
    run "cublas $n" --kernel cublas --n "$n"
    run "wgmma $n defaults" --kernel wgmma --n "$n"
done
first=${SIZES%% *}
for v in $VARIANTS; do run "wgmma $first $v" --kernel wgmma --n "$first" ${v//,/ }; done
