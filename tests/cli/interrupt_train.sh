#!/usr/bin/env bash
# interrupt_train.sh FERRY CONFIG WORK: Ctrl-C (SIGINT) once `ferry train` has logged a step; exits with
# ferry's status, which should be 130 after it finished the step and wrote a checkpoint.
set -uo pipefail
ferry=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
"$ferry" train --config "$config" --set model.n_layer=1 --set train.steps=1000000 --set train.eval_batches=1 \
  --set train.checkpoint_dir="$work/checkpoints" --metrics "$work/metrics.jsonl" &
pid=$!
# Its SIGINT handler is installed before the first step is logged; until then a background job ignores SIGINT.
for _ in $(seq 1 6000); do [ -s "$work/metrics.jsonl" ] && break; sleep 0.01; done
kill -INT "$pid"
wait "$pid"
