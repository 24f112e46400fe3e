#!/usr/bin/env bash
# The model-level runs on one SM90 GPU (H100 or H200) for `synthetic:qwen3-8b?seed=0` in det
# mode, from source (PYTHONPATH=$PWD), everything under $OUT, one archive per phase. The
# phases are split so each fits a short CI job (each under 10 minutes on an H100/H200):
#
#   OUT=... DET_SUITE_REVISION=<commit> tools/gpu_model_runs.sh gsm8k   # fixture check, record, second boot, 2 vs 3 stages
#   OUT=... DET_SUITE_REVISION=<commit> tools/gpu_model_runs.sh perf    # e2e A/B, cache-hit, invariance, decode profile, report
#   OUT=... DET_SUITE_REVISION=<commit> tools/gpu_model_runs.sh models  # cache-hit on qwen3-4b (tied), 14b, 32b
#   OUT=... tools/gpu_model_runs.sh report gsm8k.tgz perf.tgz           # one report over phases (CPU is enough)
#   OUT=... tools/gpu_model_runs.sh flags                              # parse every command line, run nothing
#
# gsm8k: `det-suite gsm8k check` of the committed fixture for this model and stack
#        (COMMITTED_FIXTURE overrides, empty skips), a fresh `gsm8k record` (rows 32-159, 512
#        new tokens, batch 32, CUDA Graph decode, the offline synthetic data set), its check in a
#        second process, and the same work pinned to 2 and 3 pipeline stages, compared.
# perf:  `bench e2e` (A B B A boots, thermal gate), `cache-hit` (det and the control arms),
#        `invariance --full` on the Qwen3-8B shapes, benchmarks/profile_decode.py with and
#        without PDL, then `det-suite report` over the phase folders.
# models: `cache-hit` on the published Qwen3 shapes no issue names.
# Each step runs under `timeout` (SIGINT first, so e2e keeps finished boots); steps and wall
# times land in <phase>/steps.tsv and steps.json (the report reads them); a preflight fails a
# phase before any model is built (gsm8k needs `datasets`, perf needs NVML).
# WHEELS=DIR installs the wheels in DIR into /tmp/site first, for a machine without the
# extras' packages and without network.
#
# SMOKE=1 rehearses the same steps on a CPU: the tiny model, CPU-sized presets, eager
# engines, no speed gates (the e2e gates are GPU-only), limits x4 (LIMIT_SCALE). KEEP=1
# leaves the phase folders beside their archives. PYTHON: the interpreter (default python3).
# Exit status: 0 when every step exited 0, else 1 (each step's own exit status is in
# steps.tsv); 2 for a usage error.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
PHASE=${1:-}
shift || true
if [ -z "${OUT:-}" ]; then
    echo "usage: OUT=DIR tools/gpu_model_runs.sh gsm8k|perf|models|report [RESULTS...]|all|flags" >&2
    exit 2
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SMOKE=${SMOKE:-0}
DS=("$PY" -m det_suite)
if [ -n "${WHEELS:-}" ] && [[ "$PHASE" =~ ^(gsm8k|perf|all)$ ]]; then
    "$PY" -m pip install -q --no-index --no-deps --target /tmp/site "$WHEELS"/*.whl || exit 2
    export PYTHONPATH=$PWD:/tmp/site
fi

if [ "$SMOKE" = 1 ]; then
    LIMIT_SCALE=${LIMIT_SCALE:-4}     # the interpreter on a shared CPU, not an H200
    MODEL=${MODEL:-synthetic:tiny?seed=0}
    RECORD_ARGS=(--preset small --engine eager --device cpu)
    E2E_ARGS=(--preset small --device cpu)
    CACHE_HIT_ARGS=(--preset small --modes det,stock --engines eager --device cpu)
    INVARIANCE_ARGS=(--quick --device cpu --providers det_suite det_suite:s2 det_suite:s3 control)
    OTHER_MODELS=("tiny-tied det,stock 60")
    OTHER_CACHE_HIT_ARGS=(--preset small --engines eager --device cpu)
else
    LIMIT_SCALE=${LIMIT_SCALE:-1}
    MODEL=${MODEL:-synthetic:qwen3-8b?seed=0}
    RECORD_ARGS=(--preset full --engine graph)
    # --gate-timeout: a sample waits at most 60 s for the GPU to cool (then it is taken and
    # flagged), so the gate alone cannot use up the call.
    E2E_ARGS=(--max-ratio 1.05 --max-decode-floor-ratio 1.5 --gate-timeout "${E2E_GATE_TIMEOUT:-60}"
              --boot-timeout 150)
    CACHE_HIT_ARGS=(--modes det,stock --engines graph)
    INVARIANCE_ARGS=(--full --shapes qwen3-8b
                     --providers det_suite det_suite:s2 det_suite:s3 control torch_scaled_mm)
    # preset, modes, limit in seconds (the three add up to 500 s, inside a call's 600)
    OTHER_MODELS=("qwen3-4b det,stock 110" "qwen3-14b det,stock 160" "qwen3-32b det 230")
    OTHER_CACHE_HIT_ARGS=(--engines graph)
fi

# The committed fixture of this model on this stack (COMMITTED_FIXTURE overrides; empty: none).
if [ "$SMOKE" = 1 ]; then
    COMMITTED=${COMMITTED_FIXTURE-$(compgen -G "fixtures/gsm8k/synthetic-tiny-seed0/embedded-det__*.json" | head -n 1)}
else
    COMMITTED=${COMMITTED_FIXTURE-$(compgen -G "fixtures/gsm8k/synthetic-qwen3-8b-seed0/embedded-det__sm90__*.json" | head -n 1)}
fi
G=$OUT/gsm8k
P=$OUT/perf
M=$OUT/models
other_cache_hit() {    # other_cache_hit PRESET MODES: the command line for one other model
    OTHER=(cache-hit --model "synthetic:$1?seed=0" --modes "$2" "${OTHER_CACHE_HIT_ARGS[@]}"
           --out "$M/cache_hit_$1")
}
RECORD=(gsm8k record --model "$MODEL" --mode det "${RECORD_ARGS[@]}" --fixtures "$G/fixtures")
recheck() { RECHECK=(gsm8k check --fixture "$1" --out "$G/recheck"); }
recheck "$G/fixtures/FIXTURE.json"      # the recorded file's name is known after the record
COMPARE=(compare "$G/stages2/run.json" "$G/stages3/run.json" --json "$G/compare_s2_s3/compare.json")
E2E=(bench e2e --model "$MODEL" --out "$P/e2e" "${E2E_ARGS[@]}")
CACHE_HIT=(cache-hit --model "$MODEL" "${CACHE_HIT_ARGS[@]}" --out "$P/cache_hit")
INVARIANCE=(invariance "${INVARIANCE_ARGS[@]}" --out "$P/invariance")
REPORT_OPTIONS=(--out "$OUT/report" --title "det-suite model runs: $MODEL")

failed=()
if [[ "$PHASE" =~ ^(gsm8k|perf|all)$ ]] && [ -z "${DET_SUITE_REVISION:-}" ]; then
    echo "note: DET_SUITE_REVISION is not set: results name the revision git sees here" >&2
fi

step() {    # step DIR NAME LIMIT_S COMMAND...: run, time, log, record the exit status
    local dir=$1 name=$2 limit=$(($3 * LIMIT_SCALE)) rc t0 t1 wall
    shift 3
    echo "== $name (limit ${limit} s): $*" | tee -a "$dir/phase.log"
    t0=$(date +%s.%N)
    timeout --signal=INT --kill-after=30 "$limit" "$@" > "$dir/$name.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$wall" "$limit" >> "$dir/steps.tsv"
    echo "== $name: exit $rc in $wall s$([ "$rc" = 124 ] && echo ' (TIMED OUT)')" \
        | tee -a "$dir/phase.log"
    [ "$rc" = 0 ] || failed+=("$name")
    return "$rc"
}

steps_json() {    # steps_json DIR PHASE: the step table as a result the report reads
    "$PY" - "$1/steps.tsv" "$1/steps.json" "$2" "$MODEL" <<'PYEOF'
import sys
from det_suite.reports.environment import environment
from det_suite.reports.files import write_json_atomic
from det_suite.reports.repro.kinds import step_lines
tsv, out, phase, model = sys.argv[1:]
rows = [line.rstrip("\n").split("\t") for line in open(tsv) if line.strip()]
steps = [{"step": n, "exit_code": int(rc), "wall_s": float(w), "limit_s": int(lim),
          "timed_out": rc == "124"} for n, rc, w, lim in rows]
write_json_atomic(out, {
    "kind": "h200-model-runs", "phase": phase, "model": model,
    "ok": all(s["exit_code"] == 0 for s in steps),
    "headline": step_lines(steps),
    "ran": f"phase {phase} of tools/gpu_model_runs.sh on {model}",
    "steps": steps, "environment": environment()})
PYEOF
}

finish() {    # finish DIR PHASE: archive the phase (the device tool returns few files)
    echo "phase $2: failed steps: ${failed[*]:-none}" >> "$1/phase.log"
    if [ "${KEEP:-0}" != 1 ]; then
        tar czf "$OUT/$2.tgz" -C "$OUT" "$2" && rm -rf "${1:?}"
    fi
}

preflight_gsm8k() {    # the data set loads through `datasets` before any model is built
    "$PY" - <<'PYEOF'
from det_suite.gsm8k import data
from det_suite.reports.environment import package_versions
source = data.parse_source("synthetic", config="main", split="test")
rows = data.select(data.load_split(source, progress=False), range(32, 160), source=source.spec)
versions = package_versions()
print(f"{len(rows)} rows of {source.spec} through datasets {versions['datasets']}")
PYEOF
}

preflight_perf() {    # the e2e thermal gate needs NVML wherever there is a GPU
    "$PY" - <<'PYEOF'
import torch
from det_suite.reports.environment import gpu_details, package_versions
gpu = gpu_details(0)
print({k: gpu.get(k) for k in ("name", "driver", "power_limit_w", "nvml", "nvml_reason")})
print({k: v for k, v in package_versions().items() if k in ("torch", "triton", "nvidia-ml-py")})
raise SystemExit(0 if not torch.cuda.is_available() or gpu.get("nvml") else
                 "NVML unavailable: bench e2e refuses to run its thermal gate without it")
PYEOF
}

export PY
export -f preflight_gsm8k preflight_perf     # steps run them in a child shell, under timeout

phase_gsm8k() {
    mkdir -p "$G"
    : > "$G/steps.tsv"
    step "$G" preflight 30 bash -c preflight_gsm8k || { steps_json "$G" gsm8k; return; }
    # The fixture committed for this model and stack, recorded by an earlier revision: an
    # exact check proves a change of the engine or kernels kept every output bit.
    if [ -n "$COMMITTED" ] && [ -f "$COMMITTED" ]; then
        step "$G" committed 80 "${DS[@]}" gsm8k check --fixture "$COMMITTED" --out "$G/committed"
    else
        echo "== no committed fixture for $MODEL on this stack: committed check not run" \
            | tee -a "$G/phase.log"
    fi
    step "$G" record 150 "${DS[@]}" "${RECORD[@]}"
    local fixture
    fixture=$(find "$G/fixtures" -name '*.json' -type f 2>/dev/null | head -n 1)
    if [ -z "$fixture" ]; then
        echo "== no fixture was recorded: the checks cannot run" | tee -a "$G/phase.log"
        failed+=(no-fixture)
    else
        recheck "$fixture"
        step "$G" recheck 80 "${DS[@]}" "${RECHECK[@]}"
        step "$G" stages2 100 "${DS[@]}" gsm8k check --fixture "$fixture" --stages 2 \
            --out "$G/stages2"
        step "$G" stages3 100 "${DS[@]}" gsm8k check --fixture "$fixture" --stages 3 \
            --out "$G/stages3"
        mkdir -p "$G/compare_s2_s3"
        step "$G" compare_s2_s3 20 "${DS[@]}" "${COMPARE[@]}"
    fi
    steps_json "$G" gsm8k
}

phase_perf() {
    mkdir -p "$P"
    : > "$P/steps.tsv"
    step "$P" preflight 30 bash -c preflight_perf || { steps_json "$P" perf; return; }
    # e2e first: the coolest GPU of the call, so the thermal gate waits least.
    step "$P" e2e 230 "${DS[@]}" "${E2E[@]}"
    step "$P" cache_hit 100 "${DS[@]}" "${CACHE_HIT[@]}"
    step "$P" invariance 90 "${DS[@]}" "${INVARIANCE[@]}"
    # Where the batch-1 decode step goes: graph replay vs host work, replay by kernel.
    if [ "$SMOKE" != 1 ]; then
        step "$P" profile_decode 45 "$PY" benchmarks/profile_decode.py "$P/profile_decode" \
            --model "$MODEL"
        # The same with the ops launched plainly: CUPTI then times each kernel on its own.
        step "$P" profile_decode_no_pdl 45 "$PY" benchmarks/profile_decode.py \
            "$P/profile_decode_no_pdl" --model "$MODEL" --no-pdl
    fi
    steps_json "$P" perf
}

phase_models() {
    mkdir -p "$M"
    : > "$M/steps.tsv"
    local line preset modes limit
    for line in "${OTHER_MODELS[@]}"; do
        read -r preset modes limit <<<"$line"
        other_cache_hit "$preset" "$modes"
        step "$M" "cache_hit_$preset" "$limit" "${DS[@]}" "${OTHER[@]}"
    done
    steps_json "$M" models
}

report_over() {    # report_over DIR NAME RESULTS...: det-suite report, timed like a step
    local dir=$1 name=$2
    shift 2
    step "$dir" "$name" 30 "${DS[@]}" report "$@" "${REPORT_OPTIONS[@]}"
}

phase_report() {
    local inputs=() item folder
    mkdir -p "$OUT/report_inputs"
    : > "$OUT/report_inputs/steps.tsv"
    for item in "$@"; do
        if [[ "$item" == *.tgz ]]; then
            tar xzf "$item" -C "$OUT/report_inputs" || { echo "cannot extract $item" >&2; exit 2; }
            folder=$(tar tzf "$item" | head -n 1)
            inputs+=("$OUT/report_inputs/${folder%%/*}")
        else
            inputs+=("$item")
        fi
    done
    if [ ${#inputs[@]} = 0 ]; then
        for folder in "$G" "$P"; do [ -d "$folder" ] && inputs+=("$folder"); done
    fi
    [ ${#inputs[@]} -gt 0 ] || { echo "report: no results given and none in $OUT" >&2; exit 2; }
    report_over "$OUT/report_inputs" report "${inputs[@]}"
}

flags() {    # parse every command line with det-suite's own parser; run nothing
    "$PY" - "$@" <<'PYEOF'
import sys
from det_suite.cli import build_parser
parser, bad = build_parser(), 0
for argv in sys.argv[1:]:
    args = argv.split("\x1f")
    try:
        parser.parse_args(args)
        print("ok:", " ".join(args))
    except SystemExit:
        bad += 1
        print("REFUSED:", " ".join(args), file=sys.stderr)
sys.exit(1 if bad else 0)
PYEOF
}

joined() { local IFS=$'\x1f'; echo "$*"; }

case "$PHASE" in
gsm8k)
    phase_gsm8k
    finish "$G" gsm8k
    ;;
perf)
    phase_perf
    # Every phase folder this $OUT holds (gsm8k too, where both ran in one place).
    inputs=()
    for folder in "$G" "$P"; do [ -d "$folder" ] && inputs+=("$folder"); done
    report_over "$P" report "${inputs[@]}"
    finish "$P" perf
    ;;
models)
    phase_models
    REPORT_OPTIONS=(--out "$M/report" --title "det-suite cache-hit on other Qwen3 shapes")
    report_over "$M" report "$M"
    finish "$M" models
    ;;
report)
    phase_report "$@"
    ;;
all)
    phase_gsm8k
    phase_perf
    report_over "$P" report "$G" "$P"
    finish "$G" gsm8k
    finish "$P" perf
    ;;
flags)
    other_lines=()
    for line in "${OTHER_MODELS[@]}"; do
        read -r preset modes _ <<<"$line"
        other_cache_hit "$preset" "$modes"
        other_lines+=("$(joined "${OTHER[@]}")")
    done
    flags "$(joined "${RECORD[@]}")" "$(joined "${RECHECK[@]}")" "$(joined "${COMPARE[@]}")" \
          "$(joined "${E2E[@]}")" "$(joined "${CACHE_HIT[@]}")" "$(joined "${INVARIANCE[@]}")" \
          "$(joined report "$OUT/gsm8k" "$OUT/perf" "${REPORT_OPTIONS[@]}")" \
          "${other_lines[@]}"
    exit $?
    ;;
*)
    echo "unknown phase '$PHASE' (gsm8k, perf, models, report, all or flags)" >&2
    exit 2
    ;;
esac
if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED steps: ${failed[*]}" >&2
    exit 1
fi
exit 0
