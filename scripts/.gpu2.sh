set -u
export PYTHONPATH=$(ls -d $PWD/packages/*/src | tr '\n' ':')
export PYTHONUNBUFFERED=1
S=$OUT/summary.txt
s=$(date +%s)
timeout 150 python3 scripts/gpu-ownership.py --json $OUT/ownership.json > /tmp/own.txt 2>&1; echo "ownership rc=$?" >> $S; cat /tmp/own.txt >> $S
timeout 60 python3 scripts/differential.py --json $OUT/differential.json > /tmp/diff.txt 2>&1; echo "diff rc=$? $(tail -n 1 /tmp/diff.txt) t=$(( $(date +%s)-s ))" >> $S
grep -A3 "DISAGREE\|disagree:" /tmp/diff.txt | head -30 >> $S
timeout 120 python3 scripts/misuse --driver real --examples 40 --steps 40 --seed 3 --json $OUT/misuse-real.json > /tmp/mis.txt 2>&1; echo "misuse rc=$? t=$(( $(date +%s)-s ))" >> $S; tail -n 25 /tmp/mis.txt >> $S
timeout 120 python3 -m pytest tests packages/context/tests/test_ownership.py packages/resources/tests/test_ownership.py packages/resources/tests/test_arguments.py packages/graphs/tests/test_ownership.py -p cuguard.testing.plugin --cuguard-driver=real -q -rfE -o cache_dir=/tmp/pc --cuguard-summary=$OUT/contract-gpu.json > /tmp/t.txt 2>&1; echo "tests rc=$? $(tail -n 1 /tmp/t.txt) t=$(( $(date +%s)-s ))" >> $S
grep -E "^(FAILED|ERROR)" /tmp/t.txt | head -20 >> $S
timeout 150 python3 scripts/sweep --driver real --sample 600 --seed 1 --quiet --json $OUT/sweep-real.json > /tmp/sw.txt 2>&1; echo "sweep rc=$? t=$(( $(date +%s)-s ))" >> $S; tail -n 12 /tmp/sw.txt >> $S
cat $S
