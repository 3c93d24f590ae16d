#!/usr/bin/env bash
# The compiled build on the GPU machine, from the source tree (nothing to install): a correctness
# scenario of the compiled calls on the real driver, then benchmarks/overhead.py --quick with the
# pure-Python and compiled variants and cuda.core side by side (one process), then a run of the
# pure-Python build alone: a copy of the layers' sources without their compiled modules, with
# CUGUARD_PURE_PYTHON=1 (nothing compiled is loaded).
#
# Needs the compiled modules built in place for that machine's Python (with Cython, setuptools and
# hatchling installed for that Python: `python hatch_build.py` in packages/errors, then in packages/context,
# packages/resources and packages/graphs; no CUDA headers needed). Writes six files under $OUT:
#   compiled-scenario-gpu.json / .txt     packages/resources/tests/compiled_scenario.py on the real driver
#   overhead-gpu-compiled-quick.json/.txt python, compiled and cuda.core variants, ratios to raw in one run
#   overhead-gpu-pure-quick.json / .txt   the pure-Python build (CUGUARD_PURE_PYTHON=1)
# Exit status: 0 when the three steps succeeded.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
cd "$ROOT" || exit 2
P=$ROOT/packages
LAYERS=$P/errors/src:$P/context/src:$P/resources/src:$P/graphs/src:$P/testing/src
SUFFIX=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
if [ ! -f "$P/resources/src/cuguard/resources/_native$SUFFIX" ]; then
    echo "no compiled extension _native$SUFFIX for $("$PY" -V)" | tee "$OUT/compiled-scenario-gpu.txt"
    exit 2
fi
rc=0
PYTHONPATH=$LAYERS timeout 90 "$PY" packages/resources/tests/compiled_scenario.py \
    --out "$OUT/compiled-scenario-gpu.json" > "$OUT/compiled-scenario-gpu.txt" 2>&1 || rc=1
PYTHONPATH=$LAYERS timeout 240 "$PY" benchmarks/overhead.py --quick \
    --out "$OUT/overhead-gpu-compiled-quick.json" > "$OUT/overhead-gpu-compiled-quick.txt" 2>&1 || rc=1
PURE=$(mktemp -d "${TMPDIR:-/tmp}/cuguard-pure.XXXXXX")
trap 'rm -rf "$PURE"' EXIT
for layer in errors context resources graphs testing; do
    mkdir -p "$PURE/$layer" && cp -r "$P/$layer/src" "$PURE/$layer/"
done
find "$PURE" \( -name '*.so' -o -name '*.pyd' \) -delete
PURE_LAYERS=$PURE/errors/src:$PURE/context/src:$PURE/resources/src:$PURE/graphs/src:$PURE/testing/src
PYTHONPATH=$PURE_LAYERS CUGUARD_PURE_PYTHON=1 timeout 200 "$PY" benchmarks/overhead.py --quick \
    --out "$OUT/overhead-gpu-pure-quick.json" > "$OUT/overhead-gpu-pure-quick.txt" 2>&1 || rc=1
tail -n 22 "$OUT/overhead-gpu-compiled-quick.txt"
grep -E '"(status|failures)"' "$OUT/compiled-scenario-gpu.json" 2>/dev/null
exit $rc
