export PYTHONPATH=src GEMMLAB_CACHE_DIR=/tmp/gemmlab_cache
python3 -m pytest -q tests/test_skinny_gpu.py -k "persistent" 2>&1 | tail -2
for t in memcheck racecheck synccheck; do compute-sanitizer --tool $t python3 scripts/sanitize_skinny.py 2>&1 | tail -2; done
timeout 300 python3 -m pytest -q -x tests/test_wgmma_gpu.py -k "test_shapes_against_float64 or test_every_tiling or test_k_zero or test_stream_k_tiles or test_192 or test_residual_from_registers or test_transposed_b_is_read" 2>&1 | tail -2 &
wait
python3 scripts/decode_probe.py --fp32 --ms 1,16,32 --nk 4096x4096,8192x8192,8192x28672 2>&1 | tail -12
