#!/usr/bin/env bash
# `ferry eval --checkpoint` gives the validation loss the training run printed at its end (the same weights,
# evaluated on the device the same way), and the loss of the initial weights without one.
set -euo pipefail
ferry=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
common=(--config "$config" --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.seq_len=32
        --set train.batch_size=4 --set train.eval_batches=2)
"$ferry" train "${common[@]}" --steps 5 --set train.checkpoint_dir="$work/ckpt" > "$work/train.log" 2>&1
trained=$(sed -nE 's/.*\| val loss ([0-9.]+) \(from ([0-9.]+),.*/\1 \2/p' "$work/train.log")
[ -n "$trained" ] || { echo "no validation loss in the training log"; cat "$work/train.log"; exit 1; }
read -r final start <<< "$trained"
"$ferry" eval "${common[@]}" --checkpoint "$work/ckpt" > "$work/eval.log" 2>&1
"$ferry" eval "${common[@]}" > "$work/eval0.log" 2>&1
evaluated=$(sed -nE 's/^val loss ([0-9.]+) \(perplexity.*/\1/p' "$work/eval.log")
initial=$(sed -nE 's/^val loss ([0-9.]+) \(perplexity.*/\1/p' "$work/eval0.log")
[ "$evaluated" = "$final" ] || { echo "eval of the checkpoint: $evaluated; training ended at $final"; exit 1; }
[ "$initial" = "$start" ] || { echo "eval of the initial weights: $initial; training started at $start"; exit 1; }
echo "eval matches training: $final after 5 steps, $start before"
