set -u
export PYTHONPATH=src GEMMLAB_CACHE_DIR=/tmp/gemmlab_cache
M=dram__bytes_read.sum,lts__t_bytes.sum,lts__t_sectors_srcunit_tex.sum,lts__t_sectors_srcunit_ltcfabric.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,gpu__time_duration.sum
run() { local label=$1; shift; echo "== $label"
  ncu --clock-control none -k regex:"wgmma|nvjet|gemm|sm90" --launch-skip 2 --launch-count 1 --section LaunchStats --metrics $M python3 scripts/ncu_once.py "$@" 2>&1 \
   | grep -E "^\s+(dram|lts|smsp|sm__|l1tex|gpu__|Cluster|Grid Size|Block Size|Registers|Shared Memory Config|Dynamic Shared|Static Shared)|^  [a-zA-Z_].*\(" | sed 's/  */ /g' | cut -c1-200; }
for n in 4096 8192; do
 run "cublas $n" --kernel cublas --n $n
 run "wgmma $n default" --kernel wgmma --n $n
done
run "wgmma 4096 CLUSTER=2" --kernel wgmma --n 4096 CLUSTER=2
