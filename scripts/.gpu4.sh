set -u
export PYTHONPATH=$(ls -d $PWD/packages/*/src | tr '\n' ':')
export PYTHONUNBUFFERED=1
S=$OUT/summary.txt
s=$(date +%s)
timeout 150 python3 scripts/gpu-sticky.py --json $OUT/sticky.json > /tmp/st.txt 2>&1; echo "sticky rc=$? t=$(( $(date +%s)-s ))" >> $S; cat /tmp/st.txt >> $S
timeout 60 python3 scripts/differential.py --json $OUT/differential.json > /tmp/diff.txt 2>&1; echo "diff rc=$? $(tail -n 1 /tmp/diff.txt) t=$(( $(date +%s)-s ))" >> $S
timeout 90 python3 -m pytest tests -p cuguard.testing.plugin --cuguard-driver=real -q -o cache_dir=/tmp/pc > /tmp/t.txt 2>&1; echo "tests/ rc=$? $(tail -n 1 /tmp/t.txt) t=$(( $(date +%s)-s ))" >> $S
grep -E "^(FAILED|ERROR)" /tmp/t.txt | head -10 >> $S
timeout 90 python3 -m pytest packages/resources/tests -p cuguard.testing.plugin --cuguard-driver=real -q -o cache_dir=/tmp/pc --deselect packages/resources/tests/test_process.py::test_exit_with_live_resources_is_clean_100_times > /tmp/r.txt 2>&1; echo "resources rc=$? $(tail -n 1 /tmp/r.txt) t=$(( $(date +%s)-s ))" >> $S
grep -E "^(FAILED|ERROR)" /tmp/r.txt | head -10 >> $S
timeout 60 python3 scripts/misuse --driver real --examples 30 --steps 40 --seed 9 > /tmp/mis.txt 2>&1; echo "misuse rc=$? t=$(( $(date +%s)-s ))" >> $S; grep -A4 "^examples" /tmp/mis.txt >> $S
cat $S
