#!/usr/bin/env bash
# `ferry plan` ends with one verdict over the device budget and the host memory, and nothing before it claims
# another (issue 29: GPT-2 1.5B at 16 GiB printed "fits: yes", then "fits: no: host memory" on a 23 GiB machine).
# Here gpt-tiny planned for configs/cost_models/h100-assumed.json's GPU, in seconds: at 32 MiB it fits the budget;
# with 1 MiB of host memory available it does not fit the host (exit 3: its device tier
# keeps no host copy, and what is left, staging, takes about 3 MiB), with 1 TiB it fits (exit 0); at 1 MiB the
# budget is short (exit 3). CUDA_VISIBLE_DEVICES= : the plan is the cost model file's GPU on any machine.
set -uo pipefail
ferry=$1 root=$2
plan=(env CUDA_VISIBLE_DEVICES= "$ferry" plan --config "$root/configs/gpt-tiny.yaml" --set offload.cost_model=cost_models/h100-assumed.json)

# expect_verdict AVAILABLE BUDGET STATUS VERDICT: the last line starts with VERDICT, the only line starting "fits:".
expect_verdict() {
  local out status
  out=$(FERRY_HOST_MEMORY_AVAILABLE=$1 "${plan[@]}" --budget "$2" 2>&1)
  status=$?
  local verdicts last
  verdicts=$(printf '%s\n' "$out" | grep -c '^fits:')
  last=$(printf '%s\n' "$out" | tail -n 1)
  if [[ $status != "$3" || $verdicts != 1 || $last != "$4"* ]]; then
    printf '%s\n' "$out"
    echo "plan_verdict.sh: at $2 with $1 available: exit $status (expected $3), $verdicts verdict line(s) (expected 1), last line '$last' (expected '$4...')"
    exit 1
  fi
  echo "$1 available, budget $2: $last"
}
expect_verdict 1MiB 32MiB 3 "fits: no: host memory: this run needs "
expect_verdict 1TiB 32MiB 0 "fits: yes (device memory: peak "
expect_verdict 1TiB 1MiB 3 "fits: no: device memory: offload.gpu_budget: 1.0 MiB is below"
echo "one verdict, last"
