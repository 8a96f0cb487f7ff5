#!/usr/bin/env bash
# The comparison: Ferry (each policy) and every baseline on each model at one GPU memory budget, then the
# largest GPT each system trains at the budget (layers grown at GPT-7B's width until a run fails), then
# the report (bench/results/compare-<gpu>.{json,md,png}). Run on the GPU machine after
# bench/baselines/install.sh and a CUDA build of Ferry.
#
#   bench/compare.sh --budget 16GiB --models gpt2-1.5b,gpt-3b,gpt-7b,bert-large [--steps 20] [--batch 8]
#                    [--systems ferry-greedy,...] [--no-max-model]
set -euo pipefail
cd "$(dirname "$0")/.."
budget=16GiB models=gpt2-1.5b,gpt-3b,gpt-7b,bert-large steps=20 batch=8 max_model=1
systems=ferry-greedy,ferry-zero-offload,ferry-chunk-lru,deepspeed-zero-offload,gemini-static,gemini-auto
while [ $# -gt 0 ]; do
  case $1 in
    --budget) budget=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --systems) systems=$2; shift 2 ;;
    --no-max-model) max_model=0; shift ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) echo "compare.sh: unknown option $1 (see --help)"; exit 2 ;;
  esac
done
gpu=$(python3 -c 'import torch; print(torch.cuda.get_device_name(0).split()[-1].lower() if torch.cuda.is_available() else "none")')
[ "$gpu" != none ] || { echo "compare.sh: no CUDA device; the comparison runs on the GPU machine"; exit 1; }
work=$(mktemp -d) runs=$work/runs.jsonl search=$work/max_model.jsonl
echo "compare.sh: budget $budget, models $models, $steps steps, batch $batch; results in bench/results/compare-$gpu.*"

run() {  # run SYSTEM MODEL [more runner args]: one run, its result line appended to $2's file
  local system=$1 model=$2 out=$3; shift 3
  local common=(--model "$model" --batch "$batch" --budget "$budget" --json "$out" "$@")
  case $system in
    ferry-*) python3 bench/baselines/ferry_run.py --policy "${system#ferry-}" "${common[@]}" ;;
    deepspeed-zero-offload) python3 bench/baselines/zero_offload.py "${common[@]}" ;;
    gemini-static|gemini-auto) python3 bench/baselines/gemini.py --placement "${system#gemini-}" "${common[@]}" ;;
    *) echo "compare.sh: unknown system $system"; return 1 ;;
  esac
}

for model in ${models//,/ }; do
  for system in ${systems//,/ }; do
    echo "== $system on $model"
    run "$system" "$model" "$runs" --steps "$steps" || echo "   (failed; recorded)"
  done
done

if [ "$max_model" = 1 ]; then
  # Largest GPT at the budget: double the layers until a short run fails, then bisect.
  for system in ${systems//,/ }; do
    trains() {  # trains LAYERS: does a short run of that depth train?
      local one; one=$(mktemp)
      run "$system" gpt-7b "$one" --n-layer "$1" --steps 3 --warmup 1 > /dev/null 2>&1 || true
      cat "$one" >> "$search"
      python3 -c 'import json,sys; l=[json.loads(x) for x in open(sys.argv[1]) if x.strip()]; sys.exit(0 if l and l[-1]["trained"] else 1)' "$one"
    }
    lo=0 hi=4
    while trains "$hi"; do lo=$hi; hi=$((hi * 2)); [ "$hi" -le 256 ] || break; done
    while [ $((hi - lo)) -gt 1 ]; do mid=$(((lo + hi) / 2)); if trains "$mid"; then lo=$mid; else hi=$mid; fi; done
    echo "== $system: largest trained at $budget: $lo layers at GPT-7B's width"
  done
fi

python3 bench/report.py --runs "$runs" --max-model "$search" --budget "$budget" --out "bench/results/compare-$gpu" \
  --command "bench/compare.sh --budget $budget --models $models --steps $steps --batch $batch"
