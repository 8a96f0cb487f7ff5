#!/usr/bin/env bash
# scripts/gpu/probe.sh (run THERE): the GPU training tests, the resident step's MFU, then one `ferry train` per
# policy on GPT-2 1.5B at 16 GiB with every output line time-stamped (where a slow or stuck run spends its time).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SCRIPT=probe
source "$ROOT/scripts/gpu/env.sh"
cd "$ROOT"
trap 'write_summary' EXIT
unpack_bundle || exit 1
ready_binaries || exit 1
GPU=$(gpu_tag)
stamped() { "$@" 2>&1 | while IFS= read -r l; do printf '%(%T)T %s\n' -1 "$l"; done; return "${PIPESTATUS[0]}"; }
export -f stamped
COST=--set=offload.cost_model=cost_models/h100-assumed.json
if [[ -z ${PROBE_TRAIN_ONLY:-} ]]; then
step "CudaTraining.*" 120 "$BIN/test_engine" --gtest_filter='CudaTraining.*' --gtest_brief=1
step "ferry-bench step: GPT-2 124M resident, 16x1024 bf16" 100 "$BIN/ferry-bench" step --device cuda --config configs/gpt2-124m.yaml \
  --batch 16 --seq 1024 --steps 10 --warmup 3 --set train.precision=bf16 "$COST" --json "$OUT/step-gpt2-124m-$GPU.json" --markdown "$OUT/step-gpt2-124m-$GPU.md"
fi
for policy in ${PROBE_POLICIES:-zero-offload greedy}; do
  step "ferry train GPT-2 1.5B $policy ${PROBE_OVERLAP:-backward} 16 GiB bf16 batch 4" "${PROBE_SECONDS:-120}" stamped "$BIN/ferry" train \
    --config configs/gpt2-1.5b.yaml --steps "${PROBE_STEPS:-6}" --set device=cuda --set offload.policy="$policy" \
    --set offload.overlap="${PROBE_OVERLAP:-backward}" --set train.batch_size=4 --set train.precision=bf16 --set train.eval_batches=1 \
    --set train.log_every=1 "$COST" --metrics "$OUT/train-1.5b-$policy.jsonl" --save-cost-model "$OUT/cost-model-$GPU.json" --no-checkpoints
done
