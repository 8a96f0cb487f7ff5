#!/usr/bin/env bash
# scripts/gpu/max_model.sh (run THERE): does each system train GPT-7B's width at these depths within the GPU
# budget? One short run (3 steps) per system and depth, each a line of $OUT/max-model.jsonl ("trained": true or
# the reason), for bench/report.py --max-model. A 7B-class run takes minutes to start (weights initialised on the
# CPU), so a call tries a few depths: MAX_MODEL_LAYERS (default "32 40"), MAX_MODEL_SYSTEMS (default
# "ferry-greedy deepspeed-zero-offload"), MAX_MODEL_BUDGET (default 16GiB), MAX_MODEL_SECONDS per run (240).
# Carry gpu_bundle (Ferry) and bench/baselines/wheels-gpu (DeepSpeed; Gemini is not carried: docs/benchmarks.md).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SCRIPT=max_model
source "$ROOT/scripts/gpu/env.sh"
cd "$ROOT"
trap 'write_summary "$OUT/max-model.jsonl"' EXIT
use_baseline_python
systems=${MAX_MODEL_SYSTEMS:-ferry-greedy deepspeed-zero-offload} budget=${MAX_MODEL_BUDGET:-16GiB}
python_libs=${LD_LIBRARY_PATH:-}
if [[ $systems == *ferry* ]]; then
  unpack_bundle && ready_binaries || exit 1
  # Ferry with the bundle's libraries; Python without them (a system libpython found first loses its site-packages).
  ferry_with_libs=$(with_libs "$BIN/ferry") || exit 1
  export LD_LIBRARY_PATH=$python_libs
fi
install() {
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target "$BASELINE_SITE" \
    "$ROOT"/bench/baselines/wheels-gpu/*.* && python3 -c 'import deepspeed'
}
if [[ $systems == *deepspeed* ]]; then
  step "install the baselines (pip, offline)" 150 install
fi
for layers in ${MAX_MODEL_LAYERS:-32 40}; do
  for system in $systems; do
    common=(--model gpt-7b --n-layer "$layers" --batch 1 --budget "$budget" --steps 3 --warmup 1 --json "$OUT/max-model.jsonl")
    case $system in
      ferry-*) cmd=(python3 bench/baselines/ferry_run.py --policy "${system#ferry-}" --overlap backward --ferry "$ferry_with_libs" "${common[@]}") ;;
      deepspeed-zero-offload) cmd=(python3 bench/baselines/zero_offload.py --activation-checkpointing "${common[@]}") ;;
      gemini-*) cmd=(python3 bench/baselines/gemini.py --placement "${system#gemini-}" --activation-checkpointing "${common[@]}") ;;
      *) log "unknown system $system"; continue ;;
    esac
    step "$system: GPT-7B width, $layers layers, $budget" "${MAX_MODEL_SECONDS:-240}" "${cmd[@]}" ||
      echo "{\"system\": \"$system\", \"model\": \"gpt-7b\", \"n_layer\": $layers, \"params\": 0, \"trained\": false, \"error\": \"no result line: the run failed or ran out of time (max_model.log)\"}" >>"$OUT/max-model.jsonl"
  done
done
