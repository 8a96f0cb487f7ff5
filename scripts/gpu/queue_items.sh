# scripts/gpu/queue_items.sh: the GPU queue's items that are more than one command (bench/gpu-queue.md names
# them in its command column). Sourced by queue.sh THERE, after env.sh: BIN, GPU, RES, LOG and step() are set.
# Each writes its results under $RES as the repository lays them out (bench/results/..., configs/...).

# gtests BINARY [ARGS...]: a test binary with gtest JSON into $RES/gtest/, its failures into the log.
gtests() {
  local binary=$1; shift
  mkdir -p "$RES/gtest"
  "$BIN/$binary" "$@" --gtest_brief=1 --gtest_output=json:"$RES/gtest/$binary.json"
}

# The default path of issue 29: no flag but the steps, from a fresh folder; must say "device: cuda (" and finish.
default_path() {
  local out rc=0
  out=$(cd "$(mktemp -d)" && "$BIN/ferry" train --config "$ROOT/configs/gpt2-124m.yaml" --steps 3 2>&1) || rc=$?
  printf '%s\n' "$out"
  mkdir -p "$RES/bench/results"
  { echo "# ferry train with no other flag on $GPU ($(date -u +%Y-%m-%d))"; echo
    echo "Command: \`ferry train --config configs/gpt2-124m.yaml --steps 3\` (exit $rc)"; echo; echo '```'
    printf '%s\n' "$out" | tail -40; echo '```'; } >"$RES/bench/results/default-path-$GPU.md"
  ((rc == 0)) && grep -q "^device: cuda (" <<<"$out" && grep -q "done: 3 steps" <<<"$out"
}

# Ferry's GPU step (with its op breakdown) and PyTorch's compiled step, same shape and call (issue 31).
step_vs_torch() {
  local r=$RES/bench/results
  mkdir -p "$r"
  "$BIN/ferry-bench" step --device cuda --config configs/gpt2-124m.yaml --batch 16 --seq 1024 --steps 10 --warmup 3 \
    --set train.precision=bf16 --json "$r/step-gpt2-124m-$GPU.json" --markdown "$r/step-gpt2-124m-$GPU.md" || return
  python3 bench/baselines/torch_step.py --batch 16 --seq 1024 --steps 20 --warmup 5 --json "$r/step-gpt2-124m-$GPU-torch.jsonl"
}

# The links, CPU AdamW and op times `ferry train` measures at start-up on this GPU, saved for planning elsewhere.
cost_model() {
  local r=$RES/bench/results
  mkdir -p "$r" "$RES/configs/cost_models"
  "$BIN/ferry-bench" pcie --reps 9 --json "$r/pcie-$GPU.json" --markdown "$r/pcie-$GPU.md" || return
  (cd "$(mktemp -d)" && "$BIN/ferry" train --config "$ROOT/configs/gpt2-124m.yaml" --steps 1 --set device=cuda \
    --save-cost-model "$RES/configs/cost_models/$GPU-measured.json")
}

# offload_row POLICY: GPT-2 1.5B at 16 GiB, bf16, batch 4, overlap backward and pipelined, measured vs predicted.
offload_row() {
  local r=$RES/bench/results
  mkdir -p "$r"
  "$BIN/ferry-bench" offload --config configs/gpt2-1.5b.yaml --steps 5 --policy "$1" --overlap backward --overlap pipelined \
    --set device=cuda --set offload.gpu_budget=16GiB --set train.precision=bf16 --set train.batch_size=4 \
    --json "$r/offload-gpt2-1.5b-$1-$GPU.json" --markdown "$r/offload-gpt2-1.5b-$1-$GPU.md"
}

# max_model_ferry LAYERS: GPT-7B's width at this depth, 3 steps at 16 GiB (bench/report.py --max-model reads it).
max_model_ferry() {
  local r=$RES/bench/results
  mkdir -p "$r"
  printf '#!/bin/sh\nexec %s "$@"\n' "$BIN/ferry" >/tmp/ferry-queue
  chmod +x /tmp/ferry-queue
  python3 bench/baselines/ferry_run.py --policy greedy --overlap backward --ferry /tmp/ferry-queue --model gpt-7b \
    --n-layer "$1" --batch 1 --budget 16GiB --steps 3 --warmup 1 --json "$r/max-model-$GPU.jsonl"
}

# compute-sanitizer's three tools on one small op test (bf16 GPT-2, every op) through Ferry's own kernels
# (FERRY_ATTENTION=flash: cuDNN's SDPA kernels are flagged by racecheck and initcheck, README's GPU notes).
sanitize() {
  command -v compute-sanitizer >/dev/null || { echo "no compute-sanitizer on this machine"; return 1; }
  mkdir -p "$RES/gtest"
  local tool rc=0
  for tool in memcheck racecheck initcheck; do
    FERRY_ATTENTION=flash compute-sanitizer --tool "$tool" --error-exitcode 9 --log-file "$RES/gtest/sanitizer-$tool.log" \
      "$BIN/test_device" --gtest_filter='Models/CudaOps.*/gpt2_bf16' --gtest_brief=1 || rc=$?
  done
  return $rc
}

export -f sanitize gtests default_path step_vs_torch cost_model offload_row max_model_ferry
