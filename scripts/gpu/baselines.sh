#!/usr/bin/env bash
# scripts/gpu/baselines.sh (run THERE, with bench/baselines/wheels-gpu/ carried): installs DeepSpeed and
# Colossal-AI from the carried wheels (install_baselines, scripts/gpu/env.sh), then runs the baselines on one model
# at one budget (BASELINE_MODEL, BASELINE_BATCH, BASELINE_BUDGET, BASELINE_SYSTEMS), each result a line of
# $OUT/compare-runs.jsonl.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SCRIPT=baselines
source "$ROOT/scripts/gpu/env.sh"
cd "$ROOT"
trap 'write_summary "$OUT/compare-runs.jsonl"' EXIT
use_baseline_python
step "install the baselines (pip, offline)" 150 install_baselines
model=${BASELINE_MODEL:-gpt2-1.5b} batch=${BASELINE_BATCH:-4} budget=${BASELINE_BUDGET:-16GiB}
common=(--model "$model" --batch "$batch" --budget "$budget" --steps "${BASELINE_STEPS:-8}" --warmup 3 --json "$OUT/compare-runs.jsonl")
[[ -n ${BASELINE_CHECKPOINTING:-1} ]] && common+=(--activation-checkpointing)
for system in ${BASELINE_SYSTEMS:-deepspeed-zero-offload gemini-static}; do
  case $system in
    deepspeed-zero-offload) step "$system $model batch $batch at $budget" 220 python3 bench/baselines/zero_offload.py "${common[@]}" ;;
    gemini-*) step "$system $model batch $batch at $budget" 180 python3 bench/baselines/gemini.py --placement "${system#gemini-}" "${common[@]}" ;;
  esac
done
