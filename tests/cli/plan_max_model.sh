#!/usr/bin/env bash
# `ferry plan --max-model` names the largest model that fits and where the limit lies, and agrees with `ferry plan`
# and `ferry train`: on gpt-tiny at width 64 (batch 2x32, fp32, the host device: seconds), with 16 MiB of host memory
# and a 64 MiB budget the host is the limit, with 1 TiB and 4 MiB the device is. In each case the named model's plain plan fits, one
# layer more is refused on the limit named (exit 3), and the printed `ferry train` command runs 2 steps.
set -uo pipefail
ferry=$1 root=$2 work=$3
shape=(--set device=cpu --set train.batch_size=2 --set model.seq_len=32 --set model.n_embd=64 --set model.n_head=2
       --set train.precision=fp32 --set train.eval_batches=1)

fail() {
  printf '%s\n' "$out"
  echo "plan_max_model.sh: $*"
  exit 1
}

# expect_largest AVAILABLE BUDGET LIMIT VERDICT: --max-model's limit is LIMIT, and one layer more gets VERDICT.
expect_largest() {
  export FERRY_HOST_MEMORY_AVAILABLE=$1
  out=$("$ferry" plan --config "$root/configs/gpt-tiny.yaml" "${shape[@]}" --budget "$2" --max-model 2>&1) || fail "--max-model: exit $?"
  local layers limit train
  layers=$(printf '%s\n' "$out" | sed -n 's/^largest: \([0-9]*\) layers.*/\1/p')
  limit=$(printf '%s\n' "$out" | sed -n 's/^limit: //p')
  train=$(printf '%s\n' "$out" | sed -n 's/^train it: ferry //p')
  [[ -n $layers && $limit == "$3" && -n $train ]] || fail "at $2 with $1: largest '$layers' layers, limit '$limit' (expected '$3')"
  echo "$1 available, budget $2: $layers layers, limit $limit"

  out=$("$ferry" plan --config "$root/configs/gpt-tiny.yaml" "${shape[@]}" --budget "$2" --set model.n_layer="$layers" 2>&1) ||
    fail "ferry plan of the $layers layers --max-model named: exit $?"
  out=$("$ferry" plan --config "$root/configs/gpt-tiny.yaml" "${shape[@]}" --budget "$2" --set model.n_layer=$((layers + 1)) 2>&1)
  local status=$?
  [[ $status == 3 && $(printf '%s\n' "$out" | tail -n 1) == "fits: no: $4"* ]] ||
    fail "ferry plan of $((layers + 1)) layers: exit $status, expected 3 and 'fits: no: $4...'"

  local command
  read -r -a command <<<"$train"
  out=$("$ferry" "${command[@]}" --steps 2 --no-checkpoints --set train.eval_every=0 --metrics "$work/max_model_$3.jsonl" 2>&1) ||
    fail "ferry $train --steps 2: exit $?"
  [[ $out == *"done: 2 steps"* ]] || fail "ferry $train --steps 2 did not train 2 steps"
}

mkdir -p "$work"
expect_largest 16MiB 64MiB "host memory" "host memory: "
expect_largest 1TiB 4MiB "device memory" "device memory: "
echo "the largest model fits, one layer more does not, and it trains"
