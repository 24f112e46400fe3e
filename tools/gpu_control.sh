#!/usr/bin/env bash
# Issue 39 on one SM90 GPU (H100 or H200), under 8 minutes: the control arms and the
# model-level positive control, from source (PYTHONPATH=$PWD), everything under $OUT.
#
#   tools/gpu_control.sh OUT
#
# 1. pytest (JUnit in OUT/pytest.xml): the fast-stock ops against SDPA and the stock linear
#    (kernels compiled for this GPU), the fast-stock engine eager vs CUDA Graph, and the
#    m-dependent arm flagged by cache-hit on the tiny model on the GPU (eager and graph).
# 2. benchmarks/control_arms.py on synthetic:qwen3-8b: fast-stock, det and the old stock arm
#    in one process, interleaved A B C C B A, prefix 128 / 2048 / 8192 x batch 1 / 4:
#    prefill, decode step, end to end, ratios to fast-stock, batch-1 step over the floor
#    (OUT/control_arms.json); one sample per arm and round, two measured per cell.
# 3. cache-hit on synthetic:qwen3-8b, m-dependent arm only, CUDA Graph engine: it must be
#    flagged (OUT/cache_hit_m_dependent/cache_hit.json), with whatever time is left.
# Each step under `timeout`; OUT/steps.tsv has each step's exit status and wall time.
# Exit 0 when every step exited 0, else 1; 2 for a usage error.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${1:-${OUT:-}}
if [ -z "$OUT" ]; then
    echo "usage: tools/gpu_control.sh OUT" >&2
    exit 2
fi
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
START=$(date +%s)
BUDGET=${BUDGET:-475}      # seconds for the whole script
STATUS=0

step() {  # step NAME LIMIT_S COMMAND...
    local name=$1 limit=$2 t0 rc
    shift 2
    t0=$(date +%s)
    echo "== $name (limit ${limit} s)"
    timeout --signal=INT --kill-after=15 "$limit" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" >> "$OUT/steps.tsv"
    tail -n 15 "$OUT/$name.log"
    [ "$rc" = 0 ] || STATUS=1
}

printf 'step\texit\twall_s\n' > "$OUT/steps.tsv"
nvidia-smi --query-gpu=name,driver_version,power.limit,temperature.gpu --format=csv \
    > "$OUT/gpu.csv" 2>&1 || true

step pytest 120 "$PY" -m pytest -q -p no:cacheprovider --junitxml="$OUT/pytest.xml" \
    tests/unit/engine/test_fast_stock.py tests/model/test_fast_stock_engine.py \
    tests/model/test_cache_hit_m_dependent.py -m "not slow"

step control_arms 230 "$PY" benchmarks/control_arms.py "$OUT/control_arms.json" \
    --model "synthetic:qwen3-8b?seed=0" --prefixes 128,2048,8192 --batches 1,4 --samples 1

LEFT=$(( BUDGET - ($(date +%s) - START) ))
if [ "$LEFT" -gt 90 ]; then
    step cache_hit_m_dependent "$LEFT" "$PY" -m det_suite cache-hit \
        --model "synthetic:qwen3-8b?seed=0" --modes m-dependent --engines graph \
        --prefixes 128,1024 --batches 1,4 --repetitions 1 --out "$OUT/cache_hit_m_dependent"
else
    printf 'cache_hit_m_dependent\tnot run (%s s left)\t0\n' "$LEFT" >> "$OUT/steps.tsv"
fi
echo "gpu_control: $(( $(date +%s) - START )) s; steps in $OUT/steps.tsv"
exit $STATUS
