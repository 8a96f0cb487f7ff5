#!/usr/bin/env bash
# output_streams.sh FERRY CONFIG WORK: stdout and stderr that cannot be written (/dev/full, closed, a pipe whose
# reader left) never stop training: it exits 0 with checkpoints bitwise those of a run with both streams working,
# and says what was lost on the other stream. A command run for its output (plan, eval, sample, config,
# --help, --version) exits 74 when stdout could not take it, naming the cause; 141, quietly, when its reader
# left (`| head -c1`). Nothing aborts. Prints "ok: ..." per check.
set -uo pipefail
ferry=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
failed=0
check() {  # check WHAT COMMAND...: passes when COMMAND succeeds
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failed=1; fi
}
tiny=(--config "$config" --set model.n_layer=1 --set train.eval_batches=1 --set train.batch_size=1 --set model.seq_len=16)
train=("$ferry" train "${tiny[@]}" --steps 3 --set train.checkpoint_every=1)
same_checkpoint() {  # same_checkpoint DIR: DIR's last checkpoint holds the reference run's weights and optimizer state
  cmp -s "$work/ref/step-00000003/model.safetensors" "$1/step-00000003/model.safetensors" &&
    cmp -s "$work/ref/step-00000003/optimizer.safetensors" "$1/step-00000003/optimizer.safetensors"
}

"${train[@]}" --set train.checkpoint_dir="$work/ref" > "$work/ref.out" 2> "$work/ref.err" || { cat "$work/ref.err"; exit 1; }

# Training: each stream full or closed, and both sent down a pipe whose reader leaves after one byte.
"${train[@]}" --set train.checkpoint_dir="$work/err_full" > "$work/err_full.out" 2> /dev/full
check "train 2>/dev/full exits 0" [ $? -eq 0 ]
check "with the reference run's checkpoint" same_checkpoint "$work/err_full"
check "its summary on stdout" grep -q "^done: 3 steps" "$work/err_full.out"
check "and a line on stdout about stderr" grep -qF "ferry: warning: some output to stderr could not be written (No space left on device); the files this command writes do not depend on it" "$work/err_full.out"

"${train[@]}" --set train.checkpoint_dir="$work/out_full" > /dev/full 2> "$work/out_full.err"
check "train >/dev/full exits 0" [ $? -eq 0 ]
check "with the reference run's checkpoint" same_checkpoint "$work/out_full"
check "and a line on stderr about stdout" grep -qF "ferry: warning: some output to stdout could not be written (No space left on device)" "$work/out_full.err"

"${train[@]}" --set train.checkpoint_dir="$work/err_closed" > "$work/err_closed.out" 2>&-
check "train 2>&- exits 0" [ $? -eq 0 ]
check "with the reference run's checkpoint" same_checkpoint "$work/err_closed"
check "and a line on stdout about stderr" grep -qF "ferry: warning: some output to stderr could not be written (Bad file descriptor)" "$work/err_closed.out"

# A file opened while stderr is closed takes its descriptor (2) unless ferry holds it: here the metrics file,
# which then received the status lines.
"${train[@]}" --no-checkpoints --metrics "$work/err_closed.jsonl" > /dev/null 2>&-
check "train --metrics FILE 2>&- exits 0" [ $? -eq 0 ]
check "and FILE holds only its JSON lines" [ "$(grep -vc '^{' "$work/err_closed.jsonl")" -eq 0 ]

"${train[@]}" --set train.checkpoint_dir="$work/out_closed" >&- 2> "$work/out_closed.err"
check "train >&- exits 0" [ $? -eq 0 ]
check "with the reference run's checkpoint" same_checkpoint "$work/out_closed"

"${train[@]}" --set train.checkpoint_dir="$work/both_closed" >&- 2>&-
check "train >&- 2>&- exits 0" [ $? -eq 0 ]
check "with the reference run's checkpoint" same_checkpoint "$work/both_closed"

"${train[@]}" --set train.checkpoint_dir="$work/piped" 2>&1 | head -c1 > "$work/piped.out"
check "train 2>&1 | head -c1 exits 0" [ "${PIPESTATUS[0]}" -eq 0 ]
check "with the reference run's checkpoint" same_checkpoint "$work/piped"

# Commands run for their output: 74 and the cause when stdout cannot take it, whatever their output's size.
output_commands=(
  "config|$ferry config"
  "--help|$ferry --help"
  "--version|$ferry --version"
  "plan|$ferry plan ${tiny[*]}"
  "eval|$ferry eval ${tiny[*]} --checkpoint $work/ref"
  "sample|$ferry sample --checkpoint $work/ref --tokens 3"
)
for entry in "${output_commands[@]}"; do
  name=${entry%%|*}
  read -ra command <<< "${entry#*|}"
  "${command[@]}" > /dev/full 2> "$work/full.err"
  check "$name >/dev/full exits 74" [ $? -eq 74 ]
  check "naming the cause" grep -qE "^ferry: error: the output could not be written to stdout( \(No space left on device\))?; free space where it goes, or send it elsewhere|^ferry: error: the output could not be written to stdout; send it somewhere that takes it" "$work/full.err"
  cat "$work/full.err" >> "$work/all.err"
  "${command[@]}" >&- 2> "$work/closed.err"
  check "$name >&- exits 74" [ $? -eq 74 ]
  check "naming the cause" grep -qE "could not be written to stdout( \(Bad file descriptor\); stdout is closed: send it to a file, or to /dev/null to discard it|; send it somewhere that takes it)" "$work/closed.err"
  cat "$work/closed.err" >> "$work/all.err"
  "${command[@]}" > "$work/result.out" 2> /dev/full
  status=$?
  check "$name 2>/dev/full exits 0 with its output" [ $status -eq 0 ] && [ -s "$work/result.out" ]
done

# A reader that leaves (`| head -c1`) ends sample at once, quietly, with the status of a SIGPIPE death.
start=$(date +%s)
# (timeout: a sample that went on would take days)
timeout 60 "$ferry" sample --checkpoint "$work/ref" --tokens 1000000000 --prompt "The " 2> "$work/sample_pipe.err" | head -c1 > "$work/sample_pipe.out"
check "sample | head -c1 exits 141" [ "${PIPESTATUS[0]}" -eq 141 ]
check "at once" [ $(($(date +%s) - start)) -lt 30 ]
check "quietly" [ ! -s "$work/sample_pipe.err" ]
check "after the first byte" [ "$(cat "$work/sample_pipe.out")" = "T" ]

check "nothing aborted" bash -c "! grep -rl 'terminate called' '$work'"
[ "$failed" -eq 0 ] && echo "lost output never stopped training; commands run for their output failed with 74"
exit "$failed"
