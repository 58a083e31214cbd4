#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD/src:$PWD/scripts GEMMLAB_CACHE_DIR=/tmp/gemmlab_cache
timeout 150 python3 scripts/tp_host_profile.py --shape 2048x1024x1024 --calls 200 > $OUT/prof-small.txt 2>&1
timeout 150 python3 scripts/tp_host_profile.py --shape 4096x10240x8192 --calls 50 > $OUT/prof-mid.txt 2>&1
tail -10 $OUT/prof-small.txt; tail -10 $OUT/prof-mid.txt
