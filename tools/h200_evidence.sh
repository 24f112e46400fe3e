#!/usr/bin/env bash
# The one GPU command behind docs/evidence/h200-*: benchmark, full invariance matrix and GPU
# pytest through `det-suite gpu-suite`, then an optional exploratory sweep, all into $OUT
# (archived as one file, since the device tool returns few files). Runs from source.
# Usage: OUT=/some/dir tools/h200_evidence.sh [sweep arguments for tools/sweep_fp8_configs.py]
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
mkdir -p "$OUT/suite"
# The four full-matrix pytest tests repeat the invariance step's matrix; run it once.
GPU_MATRIX=tests/unit/test_invariance_gpu.py
$PY -m det_suite gpu-suite --out "$OUT/suite" --steps bench,invariance,pytest \
    --require gpu,sm90 --step-timeout invariance=330 --step-timeout pytest=200 \
    --bench-args "--gate-mode graph --max-geomean 1.10 --max-cell 1.30 --max-floor-ratio 1.3" \
    --invariance-args "--providers det_suite:s2 det_suite:s3 control torch_scaled_mm" \
    --pytest-args "-n 4 -p no:cacheprovider \
        --deselect $GPU_MATRIX::test_full_matrix_counts_meet_the_seeds_evidence \
        --deselect $GPU_MATRIX::test_full_matrix_det_suite_is_bit_exact \
        --deselect $GPU_MATRIX::test_torch_scaled_mm_is_measured_on_the_full_matrix \
        --deselect $GPU_MATRIX::test_graph_replay_matches_eager_for_det_suite" \
    > "$OUT/suite.log" 2>&1
echo "gpu-suite exit $?" >> "$OUT/suite.log"
# The same benchmark with programmatic dependent launch switched off in the shipped table,
# so the closing note can say what PDL contributes.
$PY - "$OUT/suite/sm90_no_pdl.json" <<'PYEOF'
import json, sys
from importlib import resources
table = json.loads(resources.files("det_suite.policy").joinpath("tables", "sm90.json").read_text())
for entry in (table["default"], *table["entries"]):
    for tile in entry["m_tiles"]:
        tile.pop("use_pdl", None)
json.dump(table, open(sys.argv[1], "w"), indent=1)
PYEOF
$PY -m det_suite bench gemm --shapes qwen3-8b --mode graph --policy-file "$OUT/suite/sm90_no_pdl.json" \
    --json "$OUT/suite/bench_no_pdl.json" --markdown "$OUT/suite/bench_no_pdl.md" \
    > "$OUT/suite/bench_no_pdl.log" 2>&1
echo "bench without PDL exit $?" >> "$OUT/suite.log"
if [ $# -gt 0 ]; then
    timeout 120 $PY tools/sweep_fp8_configs.py "$OUT/suite/sweep.jsonl" "$@" \
        > "$OUT/suite/sweep.log" 2>&1
fi
tar czf "$OUT/suite.tgz" -C "$OUT" suite && rm -rf "$OUT/suite"
