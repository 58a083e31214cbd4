#!/bin/bash
export PYTHONPATH=$PWD/src:$PWD/scripts GEMMLAB_CACHE_DIR=/tmp/gemmlab_cache
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
timeout 260 python3 scripts/split_probe.py --groups fp32 > $OUT/fp32.txt 2>&1; tail -12 $OUT/fp32.txt
timeout 260 python3 scripts/decode_probe.py --ms 8,16 --nk 8192x28672,11008x4096 --variants gemv:WARPS=8 gemv:NT=2,WARPS=8,UNROLL=1 gemv:NT=2,WARPS=4,UNROLL=1 gemv:SPLIT=2,WARPS=8 gemv:SPLIT=2,WARPS=4 gemv:UNROLL=1,WARPS=8 > $OUT/decode.txt 2>&1; tail -14 $OUT/decode.txt
