#!/usr/bin/env bash
# scripts/gpu/measure.sh (run THERE, the second call; standalone, under 9 minutes, every step under
# `timeout`): unpack gpu_bundle/ as contact.sh does, then measure: `ferry-bench pcie`; `ferry-bench step` of
# GPT-2 124M resident, batch 16 x 1024, bf16, on the CUDA device (MFU); greedy and zero-offload, overlap backward
# and pipelined, on GPT-2 1.5B at a 16 GiB budget, measured vs predicted (`ferry-bench offload`). Results as bench/results/*-<gpu>.json and
# .md into $OUT (8 files at most come back: 6 results, measure.md, measure.log).
#
#   run(carry=["gpu_bundle"], command="bash scripts/gpu/measure.sh")
#   FERRY_GPU_DRY_RUN=1 OUT=/tmp/measure bash scripts/gpu/measure.sh   # here: up to the first GPU step
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SCRIPT=measure
source "$ROOT/scripts/gpu/env.sh"
cd "$ROOT"
trap 'write_summary "$OUT"/*.md.tmp' EXIT

if unpack_bundle; then ROWS+=("| unpack gpu_bundle into $PREFIX, LD_LIBRARY_PATH | ok | |")
else ROWS+=("| unpack gpu_bundle | failed: see measure.log | |"); exit 1; fi
ready_binaries || { log "no runnable binaries: stopping"; exit 1; }
GPU=$(gpu_tag)
log "GPU: $GPU; $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
COST=--set=offload.cost_model=cost_models/h100-assumed.json

# The commands, as they will be run (the dry run prints them and checks that each parses: --help of each).
PCIE=("$BIN/ferry-bench" pcie --reps 9 --json "$OUT/pcie-$GPU.json" --markdown "$OUT/pcie-$GPU.md")
STEP=("$BIN/ferry-bench" step --device cuda --config configs/gpt2-124m.yaml --batch 16 --seq 1024 --steps 10 --warmup 3
  --set train.precision=bf16 "$COST" --json "$OUT/step-gpt2-124m-$GPU.json" --markdown "$OUT/step-gpt2-124m-$GPU.md")
OFFLOAD=("$BIN/ferry-bench" offload --config configs/gpt2-1.5b.yaml --steps 5 --policy greedy --policy zero-offload
  --overlap backward --overlap pipelined --set device=cuda --set offload.gpu_budget=16GiB
  --set train.precision=bf16 --set train.batch_size=4 "$COST" --json "$OUT/offload-gpt2-1.5b-$GPU.json" --markdown "$OUT/offload-gpt2-1.5b-$GPU.md")
log "pcie:    ${PCIE[*]}"
log "step:    ${STEP[*]}"
log "offload: ${OFFLOAD[*]}"

if [[ $DRY == 1 ]]; then
  step "ferry-bench step --help" 10 "$BIN/ferry-bench" step --help
  step "ferry-bench offload --help" 10 "$BIN/ferry-bench" offload --help
  step "ferry-bench pcie (expected to refuse: no GPU)" 20 "${PCIE[@]}"
  step "the step's plan (ferry plan, GPT-2 124M 16x1024 bf16 resident)" 60 "$BIN/ferry" plan --config configs/gpt2-124m.yaml \
    --set train.batch_size=16 --set train.precision=bf16 --set offload.policy=resident "$COST" --budget 80GiB
  step "the offload plan (ferry plan, GPT-2 1.5B bf16 at 16 GiB)" 60 "$BIN/ferry" plan --config configs/gpt2-1.5b.yaml \
    --set train.batch_size=4 --set train.precision=bf16 "$COST" --budget 16GiB
  log "dry run: stopping before the GPU steps"
  exit 0
fi

step "ferry-bench pcie" 90 "${PCIE[@]}"
step "ferry-bench step: GPT-2 124M resident, 16x1024 bf16" 150 "${STEP[@]}"
step "ferry-bench offload: GPT-2 1.5B, every policy, 16 GiB, bf16" 330 "${OFFLOAD[@]}"
for f in "$OUT"/*-"$GPU".md; do cp "$f" "$f.tmp"; done  # into the summary; removed below
trap - EXIT
write_summary "$OUT"/*.md.tmp
rm -f "$OUT"/*.md.tmp
