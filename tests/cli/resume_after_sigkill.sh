#!/usr/bin/env bash
# A run killed with SIGKILL mid-training and resumed from its last checkpoint logs, for every step, the
# same loss as an uninterrupted run (bitwise: the JSON numbers are compared as text), each step once.
set -euo pipefail
ferry=$1 config=$2 work=$3
shift 3  # the rest: more --set options (a policy, an overlap mode)
rm -rf "$work" && mkdir -p "$work"
common=(--config "$config" --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.seq_len=32
        --set train.batch_size=4 --set train.steps=200 --set train.eval_batches=1 --set train.checkpoint_every=5 "$@")
# "step loss" of each training step's line (the first line, step 0's, holds only the validation loss)
losses() { grep '"loss":' "$1" | sed -E 's/.*"loss":([^,]*),.*"step":([0-9]+).*/\2 \1/'; }

"$ferry" train "${common[@]}" --set train.checkpoint_dir="$work/a" --metrics "$work/a.jsonl" > "$work/a.log" 2>&1
"$ferry" train "${common[@]}" --set train.checkpoint_dir="$work/b" --metrics "$work/b.jsonl" > "$work/b.log" 2>&1 &
pid=$!
# killed once step 12 is logged: after the checkpoint of step 10, with steps logged after it that the
# resumed run trains, and logs, again
for _ in $(seq 1 2000); do [ -d "$work/b/step-00000010" ] && [ "$(wc -l < "$work/b.jsonl")" -ge 13 ] && break; sleep 0.01; done
kill -9 "$pid" 2> /dev/null || true
wait "$pid" 2> /dev/null || true
killed_at=$(wc -l < "$work/b.jsonl")
echo "killed after $killed_at logged steps"
"$ferry" train "${common[@]}" --set train.checkpoint_dir="$work/b" --metrics "$work/b.jsonl" --resume "$work/b" >> "$work/b.log" 2>&1

[ "$killed_at" -lt 200 ] || { echo "the run finished before it could be killed: nothing was tested"; exit 1; }
losses "$work/a.jsonl" | sort -n > "$work/a.losses"
# every step b logged has a's loss
bad=$(losses "$work/b.jsonl" | sort -n | join - "$work/a.losses" | awk '$2 != $3' | head -5)
[ -z "$bad" ] || { echo "losses differ (step, resumed, uninterrupted):"; echo "$bad"; exit 1; }
[ "$(losses "$work/b.jsonl" | awk '{print $1}' | sort -nu | wc -l)" -eq 200 ] || { echo "the resumed run did not reach step 200"; exit 1; }
# and once: the steps logged after the last checkpoint before the kill were cut from the file on resuming
twice=$(losses "$work/b.jsonl" | awk '{print $1}' | sort -n | uniq -d | head -5 | tr '\n' ' ')
[ -z "$twice" ] || { echo "steps logged twice: $twice"; exit 1; }
[ "$(losses "$work/b.jsonl" | awk '{print $1}' | tr '\n' ' ')" = "$(seq 1 200 | tr '\n' ' ')" ] || { echo "steps out of order"; exit 1; }
echo "resumed run matches the uninterrupted one at every step"
