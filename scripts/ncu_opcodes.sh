#!/bin/bash
# Executed SASS instructions by opcode, rung 15 (wgmma) against cuBLAS, one launch each (GPU machine, under ncu):
#   bash scripts/ncu_opcodes.sh SIZE [PARAM=VALUE ...]
set -u
export PYTHONPATH=src GEMMLAB_CACHE_DIR=/tmp/gemmlab_cache
SIZE=$1; shift
for k in cublas wgmma; do
  echo "== $k $SIZE $*"
  ncu --clock-control none -k regex:"wgmma|nvjet|gemm" --launch-skip 2 --launch-count 1 \
      --metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum --print-metric-instances details \
      python3 scripts/ncu_once.py --kernel $k --n "$SIZE" $( [ $k = wgmma ] && echo "$@" ) > "${OUT:-/tmp}/opcodes_$k.txt" 2>&1
  grep -E "sass__inst|smsp__inst" "${OUT:-/tmp}/opcodes_$k.txt" | tr ';' '\n' | sed 's/^ *//' | head -80
done
