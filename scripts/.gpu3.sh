set -u
export PYTHONPATH=$(ls -d $PWD/packages/*/src | tr '\n' ':')
export PYTHONUNBUFFERED=1
S=$OUT/summary.txt
s=$(date +%s)
timeout 60 python3 scripts/differential.py --json $OUT/differential.json > /tmp/diff.txt 2>&1; echo "diff rc=$? $(tail -n 1 /tmp/diff.txt) t=$(( $(date +%s)-s ))" >> $S
grep -A3 "DISAGREE" /tmp/diff.txt | head -20 >> $S
timeout 150 python3 -m pytest tests -p cuguard.testing.plugin --cuguard-driver=real -q -rfE -o cache_dir=/tmp/pc --cuguard-summary=$OUT/contract-tests.json > /tmp/t.txt 2>&1; echo "tests/ rc=$? $(tail -n 1 /tmp/t.txt) t=$(( $(date +%s)-s ))" >> $S
grep -E "^(FAILED|ERROR)" /tmp/t.txt | head -10 >> $S
timeout 60 python3 -m pytest packages/resources/tests/test_arguments.py packages/resources/tests/test_ownership.py -p cuguard.testing.plugin --cuguard-driver=real -q -o cache_dir=/tmp/pc > /tmp/r.txt 2>&1; echo "resources args+ownership rc=$? $(tail -n 1 /tmp/r.txt) t=$(( $(date +%s)-s ))" >> $S
grep -E "^(FAILED|ERROR)" /tmp/r.txt | head -10 >> $S
timeout 60 python3 -m pytest packages/graphs/tests/test_ownership.py -p cuguard.testing.plugin --cuguard-driver=real -q -o cache_dir=/tmp/pc > /tmp/g.txt 2>&1; echo "graphs ownership rc=$? $(tail -n 1 /tmp/g.txt) t=$(( $(date +%s)-s ))" >> $S
grep -E "^(FAILED|ERROR)" /tmp/g.txt | head -10 >> $S
timeout 100 python3 scripts/misuse --driver real --examples 60 --steps 40 --seed 5 --json $OUT/misuse-real.json > /tmp/mis.txt 2>&1; echo "misuse rc=$? t=$(( $(date +%s)-s ))" >> $S; grep -A12 "^examples" /tmp/mis.txt >> $S
cat $S
