#!/usr/bin/env bash
# interrupt_train.sh FERRY CONFIG WORK: Ctrl-C (SIGINT) once `ferry train` has logged a step; exits with
# ferry's status, which should be 130 after it finished the step and wrote a checkpoint.
set -uo pipefail
ferry=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
"$ferry" train --config "$config" --set model.n_layer=1 --set train.steps=1000000 --set train.eval_batches=1 \
  --set train.checkpoint_dir="$work/checkpoints" --metrics "$work/metrics.jsonl" &
pid=$!
# Once a training step is logged (a line with "loss"; the first line, step 0's, has only val_loss), the
# run is training: Ctrl-C finishes the step and checkpoints. (During start-up it would exit at once.)
for _ in $(seq 1 6000); do grep -qs '"loss":' "$work/metrics.jsonl" && break; sleep 0.01; done
kill -INT "$pid"
wait "$pid"
