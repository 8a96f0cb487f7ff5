#!/usr/bin/env bash
# scripts/gpu/baselines.sh (run THERE, with bench/baselines/wheels-gpu/ carried, and wheels-gemini/ for Gemini):
# installs the carried wheels into $BASELINE_SITE, then runs the baselines on one model at one budget
# (BASELINE_MODEL, BASELINE_BATCH, BASELINE_BUDGET, BASELINE_STEPS, BASELINE_SYSTEMS; BASELINE_CHECKPOINTING=0
# turns activation checkpointing off), each result a line of $OUT/compare-runs.jsonl. The GPU queue's rows
# (scripts/gpu/queue_items.sh: compare_row) are the usual way; this script is for a call of its own.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SCRIPT=baselines
source "$ROOT/scripts/gpu/env.sh"
cd "$ROOT"
trap 'write_summary "$OUT/compare-runs.jsonl"' EXIT
use_baseline_python
install() {
  local wheels=("$ROOT"/bench/baselines/wheels-gpu/*.*)  # files: wheels-gpu/zenflow/ is zenflow_row's
  [[ -d $ROOT/bench/baselines/wheels-gemini ]] && wheels+=("$ROOT"/bench/baselines/wheels-gemini/*)
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target "$BASELINE_SITE" "${wheels[@]}" &&
    python3 -c 'import deepspeed; print("deepspeed", deepspeed.__version__)'
}
step "install the baselines (pip, offline)" 150 install
model=${BASELINE_MODEL:-gpt2-1.5b} batch=${BASELINE_BATCH:-4} budget=${BASELINE_BUDGET:-16GiB}
common=(--model "$model" --batch "$batch" --budget "$budget" --steps "${BASELINE_STEPS:-8}" --warmup 3 --json "$OUT/compare-runs.jsonl")
if [[ ${BASELINE_CHECKPOINTING:-1} == 1 ]]; then common+=(--activation-checkpointing); else common+=(--no-activation-checkpointing); fi
# deepspeed-zero-offload, deepspeed-zero3-ratio-<R> (e.g. 0.7), deepspeed-zenflow, gemini-auto, gemini-static
for system in ${BASELINE_SYSTEMS:-deepspeed-zero-offload}; do
  case $system in
    deepspeed-zero-offload) args=(bench/baselines/zero_offload.py) ;;
    deepspeed-zero3-ratio-*) args=(bench/baselines/zero_offload.py --stage 3 --ratio "${system#deepspeed-zero3-ratio-}") ;;
    deepspeed-zenflow) args=(bench/baselines/zero_offload.py --zenflow) ;;
    gemini-*) args=(bench/baselines/gemini.py --placement "${system#gemini-}") ;;
    *) log "unknown system $system"; continue ;;
  esac
  step "$system $model batch $batch at $budget" 220 python3 "${args[@]}" "${common[@]}"
done
