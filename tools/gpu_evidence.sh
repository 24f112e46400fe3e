#!/usr/bin/env bash
# The one GPU command behind docs/evidence/h200-*. Runs from source, on the tree as sent,
# nothing deselected, every table entry, the table's own pipeline depths as shipped (plus the
# 2- and 3-stage A/B arms), and archives everything under $OUT as one file per phase (the
# device tool returns few files). A device call is limited to 10 minutes, so the work is
# split into phases; run them in order, each in its own call:
#
#   OUT=... DET_SUITE_REVISION=<commit> tools/h200_evidence.sh matrix    # bench, invariance matrix, lint
#   OUT=... DET_SUITE_REVISION=<commit> tools/h200_evidence.sh tests     # GPU pytest, bench without PDL
#   OUT=... DET_SUITE_REVISION=<commit> tools/h200_evidence.sh mutants   # GPU-only mutants must be killed
#
# The benchmark gates are the speed the kernel must not fall below and the accuracy it must
# keep: since FP32 promotion (issue 10) the speed gates are the promotion-on baseline measured
# on the H200 with a margin for run-to-run noise (promotion every 256, evidence
# h200-2026-12-03-d: geomean 1.105, worst cell 1.53, decode 1.42x the weight-bytes floor),
# not the parity target; BENCH_MAX_* override them. --max-error-ratio 1.10: det-suite's error against
# fp64 within 1.10x cuBLAS default's in every cell.
#
# DET_SUITE_REVISION names the commit the sender's tree is at (det_suite/provenance.py): a
# copied tree's own .git, if any, may be stale. Every results file also records the sha256
# of every source file, which is what tests/unit/test_evidence.py checks against HEAD.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
PHASE=${1:?usage: tools/h200_evidence.sh matrix|tests|mutants}
# The GPU pytest includes the GSM8K unit tests, which need `datasets`: the image lacks it, so
# carry it as wheels in .whl/ (tools/carried_wheels.sh); without them those files are not run.
source tools/carried_wheels.sh
install_carried_wheels || exit 2
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
)" --pytest-args "-x -q -p no:cacheprovider -p det_suite.pytest_plugin tests/unit/test_fp8_linear.py tests/unit/test_fp8_quantize.py tests/unit/test_bi_attention_split.py" \
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
