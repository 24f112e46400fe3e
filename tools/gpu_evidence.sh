#!/usr/bin/env bash
# The kernel-level GPU evidence run: from source, on the tree as sent, nothing deselected,
# every table entry, the table's pipeline depths as shipped plus the 2- and 3-stage A/B arms.
# Three phases, each fitting a short job, each archived under $OUT as <phase>.tgz:
#
#   OUT=... DET_SUITE_REVISION=<commit> tools/gpu_evidence.sh matrix    # bench, invariance matrix, lint
#   OUT=... DET_SUITE_REVISION=<commit> tools/gpu_evidence.sh tests     # GPU pytest, bench without PDL
#   OUT=... DET_SUITE_REVISION=<commit> tools/gpu_evidence.sh mutants   # GPU-only mutants must be killed
#
# Then unpack the three archives into one folder and turn it into the family's evidence:
#   python -m det_suite.reports.evidence_summary pack RUN_DIR docs/evidence/sm90 sm90 <run name>
# which also rewrites README.md's Measured block (add a line to docs/evidence/HISTORY.md).
#
# Benchmark gates: the speed the kernel must not fall below (the FP32-promotion baseline with a
# margin for run-to-run noise; BENCH_MAX_* override) and the accuracy it must keep (error
# against fp64 within 1.10x cuBLAS default's in every cell). DET_SUITE_REVISION names the
# sender's commit (a copied tree's .git may be stale); every results file also records the
# sha256 of every source file. WHEELS=DIR installs wheels from DIR first (GSM8K unit tests need
# `datasets`; without it those files are reported not run).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
PHASE=${1:?usage: tools/gpu_evidence.sh matrix|tests|mutants}
if [ -n "${WHEELS:-}" ]; then
    "$PY" -m pip install -q --no-index --no-deps --target /tmp/site "$WHEELS"/*.whl || exit 2
    export PYTHONPATH=$PWD:/tmp/site
fi
DIR="$OUT/$PHASE"
mkdir -p "$DIR"
status=0
case "$PHASE" in
matrix)
    $PY -m det_suite gpu-suite --out "$DIR" --steps bench,invariance,lint --require gpu,sm90 \
        --step-timeout invariance=420 \
        --bench-args "--gate-mode graph --max-geomean ${BENCH_MAX_GEOMEAN:-1.20} --max-cell ${BENCH_MAX_CELL:-1.75} --max-floor-ratio ${BENCH_MAX_FLOOR:-1.6} --max-error-ratio 1.10" \
        --invariance-args "--providers det_suite det_suite:s2 det_suite:s3 control torch_scaled_mm" \
        > "$DIR/gpu_suite.log" 2>&1 || status=$?
    ;;
tests)
    # --dist loadfile: a module's full-matrix fixture is computed once, on one worker.
    $PY -m det_suite gpu-suite --out "$DIR" --steps pytest --require gpu,sm90 \
        --step-timeout pytest=420 --pytest-args "-n ${PYTEST_WORKERS:-4} --dist loadfile -p no:cacheprovider" \
        > "$DIR/gpu_suite.log" 2>&1 || status=$?
    # The benchmark with programmatic dependent launch switched off in the shipped table, so
    # a reviewer can see what PDL contributes.
    $PY - "$DIR/sm90_no_pdl.json" <<'PYEOF'
import json, sys
from importlib import resources
table = json.loads(resources.files("det_suite.policy").joinpath("tables", "sm90.json").read_text())
for entry in (table["default"], *table["entries"]):
    for tile in entry["m_tiles"]:
        tile.pop("use_pdl", None)
json.dump(table, open(sys.argv[1], "w"), indent=1)
PYEOF
    $PY -m det_suite bench gemm --shapes qwen3-8b --mode graph --policy-file "$DIR/sm90_no_pdl.json" \
        --json "$DIR/bench_no_pdl.json" --markdown "$DIR/bench_no_pdl.md" \
        > "$DIR/bench_no_pdl.log" 2>&1 || status=$?
    ;;
mutants)
    # Mutants the CPU cannot see (tools/mutations.toml: needs_gpu): each must be killed by
    # the GPU tests that exist for it.
    # --include-untracked: a copied tree may carry a stale .git whose index lacks new files.
    $PY tools/mutate.py --include-gpu --include-untracked --python "$PY" \
        --only "$(PYTHONPATH=$PWD $PY - <<'PYEOF'
import tomllib
data = tomllib.load(open("tools/mutations.toml", "rb"))
print(",".join(m["name"] for m in data["mutation"] if m.get("needs_gpu")))
PYEOF
)" --pytest-args "-x -q -p no:cacheprovider -p det_suite.pytest_plugin tests/unit/ops/test_fp8_linear.py tests/unit/ops/test_fp8_quantize.py tests/unit/ops/test_bi_attention_split.py" \
        --timeout 240 --out "$DIR" > "$DIR/mutate.log" 2>&1 || status=$?
    ;;
*)
    echo "unknown phase $PHASE (matrix, tests or mutants)" >&2
    exit 2
    ;;
esac
echo "phase $PHASE exit $status" >> "$DIR/phase.log"
tar czf "$OUT/$PHASE.tgz" -C "$OUT" "$PHASE" && rm -rf "$DIR"
exit $status
