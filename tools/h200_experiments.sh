#!/usr/bin/env bash
# The developer sweeps that decide the open levers of issues 10 and 15, on one H200, from
# source (PYTHONPATH=$PWD), everything under $OUT. A device call is limited to 10 minutes, so
# each phase is one call:
#
#   OUT=... tools/h200_experiments.sh step           # the decode step's schedules, the attention
#   OUT=... tools/h200_experiments.sh gemm-named     # FP32 promotion interval, Qwen3-8B shapes
#   OUT=... tools/h200_experiments.sh gemm-unnamed   # the same on eight shapes no entry names
#   OUT=... tools/h200_experiments.sh gemm-pingpong  # two math warpgroups, all twelve shapes
#   tools/h200_experiments.sh flags                  # parse every command line, run nothing
#
# step: tools/decode_schedule_sweep.py (split-K for GEMMs whose decode grid leaves SMs idle,
#       shorter attention segments, in the CUDA Graph decode step, each against the
#       decode-equals-prefill contract; ~7 engines of the synthetic 8B, estimate 4-5 min),
#       then tools/attention_decode_sweep.py (the op alone, all arms, ~1 min).
# gemm-*: tools/promotion_interval_sweep.py (hand promotion in a flattened loop at intervals
#       256 and 512, decode splits 2 and 4, against the shipped launch and torch._scaled_mm;
#       estimate 3-5 min each, most of it compiling). Its cells are appended to
#       promotion_interval.cells.jsonl as they finish, so a run cut off keeps them.
# gemm-pingpong: tools/pingpong_gemm_sweep.py (Gluon, FP32 promotion on two out-of-phase
#       math warpgroups, plain and persistent grids); first one M on the Qwen3-8B shapes
#       under a short limit (a barrier bug hangs, it must not eat the call), then all twelve
#       shapes at M = 128..8192 (estimate 5-7 min; the limits, 75 + 480 s, keep the call
#       inside its 10 minutes, and a cut-off sweep keeps its cells). Seven files come back,
#       within the eight a call returns.
#
# Nothing here is a result dependency, and none of it changes det_suite: a winner moves into
# det_suite with a full evidence run (tools/h200_evidence.sh, tools/h200_model_runs.sh).
# Each step runs under `timeout` (SIGINT first, so a sweep can still write what it has); its
# output is in $OUT/<step>.log and its exit status and seconds in $OUT/steps.tsv. Exit status:
# 0 when every step exited 0, else 1; 2 for a usage error. PYTHON: the interpreter (python3).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}
phase=${1:-}

case "$phase" in
  step|gemm-named|gemm-unnamed|gemm-pingpong|flags) ;;
  *) echo "usage: OUT=DIR $0 step|gemm-named|gemm-unnamed|gemm-pingpong, or $0 flags" >&2
     exit 2 ;;
esac

# The steps' command lines: name, limit in seconds, tool, its arguments after OUT_DIR.
STEPS_step=("decode_schedule 420 decode_schedule_sweep"
            "attention_sweep 150 attention_decode_sweep")
STEPS_gemm_named=("promotion_named 560 promotion_interval_sweep --set named")
STEPS_gemm_unnamed=("promotion_unnamed 560 promotion_interval_sweep --set unnamed")
STEPS_gemm_pingpong=("pingpong_smoke 75 pingpong_gemm_sweep --set named --ms 512"
                     "pingpong 480 pingpong_gemm_sweep --set all")

if [ "$phase" = flags ]; then
  # Every tool imports and offers every option its step passes (a renamed flag fails here,
  # on a CPU, not in a device call).
  status=0
  for line in "${STEPS_step[@]}" "${STEPS_gemm_named[@]}" "${STEPS_gemm_unnamed[@]}" \
              "${STEPS_gemm_pingpong[@]}"; do
    read -r name _limit tool args <<<"$line"
    if ! help=$("$PYTHON" "tools/$tool.py" --help 2>/dev/null); then
      echo "flags: $tool --help failed" >&2
      status=1
      continue
    fi
    missing=0
    for word in $args; do
      if [[ $word == --* ]] && ! grep -q -- "$word" <<<"$help"; then
        echo "flags: $tool has no $word" >&2
        missing=1
      fi
    done
    if [ "$missing" -eq 0 ]; then
      echo "ok: $name: tools/$tool.py OUT/$name $args"
    else
      status=1
    fi
  done
  exit $status
fi

: "${OUT:?set OUT to the folder the results go to}"
mkdir -p "$OUT"
failed=0

run_step() {  # NAME LIMIT_SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  local started=$SECONDS
  echo "== $name (limit ${limit}s): $*"
  timeout --signal=INT --kill-after=20 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - started))" >>"$OUT/steps.tsv"
  tail -n 5 "$OUT/$name.log"
  [ "$rc" -eq 0 ] || failed=1
}

steps_var="STEPS_${phase//-/_}[@]"
for line in "${!steps_var}"; do
  read -r name limit tool args <<<"$line"
  # shellcheck disable=SC2086 # args: the step's options, split on purpose
  run_step "$name" "$limit" "$PYTHON" "tools/$tool.py" "$OUT/$name" $args
done
exit $failed
