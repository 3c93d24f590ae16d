#!/usr/bin/env bash
# Issue 16 on the GPU machine, from the source tree (nothing to install): a correctness smoke of the
# compiled fast path on the real driver, then benchmarks/overhead.py --quick with the pure-Python and
# compiled variants side by side (one process), then a run without cuguard-fastpath on the path.
#
# Needs the extension built for that machine's Python in FASTPATH_BUILD (default .fastpath-build/,
# e.g. with: gcc -O2 -shared -fPIC -I<python include> packages/fastpath/src/cuguard/fastpath/_native.c
# -o .fastpath-build/_native<EXT_SUFFIX>; no CUDA headers needed). Writes six files under $OUT:
#   fastpath-smoke-gpu.json / .txt        packages/fastpath/tests/scenario.py on the real driver
#   overhead-gpu-fastpath-quick.json/.txt python and compiled variants, ratios to raw in one run
#   overhead-gpu-pure-quick.json / .txt   the pure-Python install (no cuguard-fastpath importable)
# Exit status: 0 when the three steps succeeded.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/out}
BUILD=${FASTPATH_BUILD:-$ROOT/.fastpath-build}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
cd "$ROOT" || exit 2
P=$ROOT/packages
LAYERS=$P/errors/src:$P/context/src:$P/resources/src:$P/graphs/src:$P/testing/src
SUFFIX=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
if [ ! -f "$BUILD/_native$SUFFIX" ]; then
    echo "no $BUILD/_native$SUFFIX for $("$PY" -V)" | tee "$OUT/fastpath-smoke-gpu.txt"
    exit 2
fi
cp "$BUILD/_native$SUFFIX" "$P/fastpath/src/cuguard/fastpath/"
rc=0
PYTHONPATH=$LAYERS:$P/fastpath/src timeout 60 "$PY" packages/fastpath/tests/scenario.py \
    --out "$OUT/fastpath-smoke-gpu.json" > "$OUT/fastpath-smoke-gpu.txt" 2>&1 || rc=1
PYTHONPATH=$LAYERS:$P/fastpath/src timeout 200 "$PY" benchmarks/overhead.py --quick \
    --out "$OUT/overhead-gpu-fastpath-quick.json" > "$OUT/overhead-gpu-fastpath-quick.txt" 2>&1 || rc=1
PYTHONPATH=$LAYERS timeout 150 "$PY" benchmarks/overhead.py --quick \
    --out "$OUT/overhead-gpu-pure-quick.json" > "$OUT/overhead-gpu-pure-quick.txt" 2>&1 || rc=1
tail -n 20 "$OUT/overhead-gpu-fastpath-quick.txt"
grep -E '"(status|failures)"' "$OUT/fastpath-smoke-gpu.json" 2>/dev/null
exit $rc
