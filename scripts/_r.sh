export PYTHONPATH=src GEMMLAB_CACHE_DIR=/tmp/gemmlab_cache
python3 scripts/decode_probe.py --warm --variants $V 2>&1 | tail -1
timeout 200 python3 -m pytest -q -x tests/test_skinny_gpu.py -k "persistent or copy or short" 2>&1 | tail -3
timeout 330 python3 scripts/decode_probe.py --ms 1,8,16 --variants $V 2>&1 | tail -20
