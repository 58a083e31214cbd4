export PYTHONPATH=src GEMMLAB_CACHE_DIR=/tmp/gemmlab_cache
python3 scripts/decode_probe.py --warm --variants SCHED=0 > /dev/null 2>&1
timeout 260 python3 -m pytest -q tests/test_skinny_gpu.py > $OUT/t.txt 2>&1; tail -2 $OUT/t.txt; grep -E "^E .*(Error|elements|repeatable)" $OUT/t.txt | head -5
for t in memcheck racecheck synccheck; do timeout 100 compute-sanitizer --tool $t python3 scripts/sanitize_skinny.py 2>&1 | tail -1; done
NK=4096x4096,8192x8192,14336x4096,11008x4096,13824x5120,5504x2048,8192x28672
timeout 200 python3 scripts/decode_probe.py --ms 1,8,16 --nk $NK --variants SCHED=0 > $OUT/p.txt 2>&1; tail -23 $OUT/p.txt
timeout 100 python3 scripts/decode_probe.py --fp32 --ms 1,16 --nk 8192x8192,14336x4096,11008x4096 --variants SCHED=0 > $OUT/f.txt 2>&1; tail -8 $OUT/f.txt
