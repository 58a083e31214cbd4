#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD/src:$PWD/scripts GEMMLAB_CACHE_DIR=/tmp/gemmlab_cache
S=8192x28672x8192,16384x8192x8192,4096x10240x8192,8192x8192x8192,2048x8192x8192
mkdir -p $OUT/bench $OUT/tests
OUT=$OUT/bench timeout 290 python3 scripts/device_distributed_check.py --gpus 2,4 --chunks 1 --budget-ms 300 --no-link --no-tests --shapes $S --timeouts 100,100,140 > $OUT/bench.txt 2>&1
tail -22 $OUT/bench.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_distributed_gpu.py > $OUT/tests/tests.log 2>&1; tail -5 $OUT/tests/tests.log
