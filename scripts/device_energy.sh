#!/bin/bash
# Energy per call and the memory traffic behind it (GPU machine, one call): the sustained power probe over
# rung 12's defaults, its variants and cuBLAS, then ncu's DRAM / L2 counters for each at one size.
#   bash scripts/device_energy.sh SIZE "VARIANT ..."      e.g. 8192 "GROUP_M=16 GROUP_M=4"
set -u
export PYTHONPATH=src GEMMLAB_CACHE_DIR=/tmp/gemmlab_cache
SIZE=$1; shift
VARIANTS=${1:-}
python3 scripts/power_probe.py --sizes "$SIZE" --seconds 1.5 --no-fused --variants $VARIANTS 2>&1 | tail -8
M=dram__bytes_read.sum,lts__t_bytes.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sectors_srcunit_tex.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg
M2=lts__t_sectors_srcunit_ltcfabric.sum
run_ncu() {  # label, ncu_once arguments
    local label=$1; shift
    echo "== $label"
    ncu --clock-control none -k regex:"wgmma|nvjet|gemm" --launch-skip 2 --launch-count 1 --metrics $M python3 scripts/ncu_once.py "$@" 2>&1 \
        | grep -E "^\s+(dram|lts|smsp|sm__)" | awk '{print "   ", $1, $(NF-1), $NF}'
    ncu --clock-control none -k regex:"wgmma|nvjet|gemm" --launch-skip 2 --launch-count 1 --metrics $M2 python3 scripts/ncu_once.py "$@" 2>&1 \
        | grep -E "^\s+lts|ERR|rror" | head -3 | awk '{print "   ", $0}'
}
run_ncu cublas --kernel cublas --n "$SIZE"
run_ncu wgmma --kernel wgmma --n "$SIZE" BM=128
for v in $VARIANTS; do run_ncu "wgmma $v" --kernel wgmma --n "$SIZE" ${v//,/ }; done
