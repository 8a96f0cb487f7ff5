#!/usr/bin/env bash
# run_folders.sh FERRY CONFIG WORK: runs of a config without train.checkpoint_dir, in WORK (issue 29). Two runs
# get runs/<experiment>/1 and /2, say so at the start, and end with the next commands, which run as printed;
# `--resume` alone goes on in the newest run, and after its final step says "nothing to train" once; sample,
# eval and export take a run folder or the experiment's folder; sample streams; a failed start leaves no folder.
set -euo pipefail
ferry=$1 config=$2 work=$3
experiment=runs/$(basename "$config" .yaml)
rm -rf "$work" && mkdir -p "$work/fresh" && cd "$work"
fail() {
  echo "run_folders.sh: $1"
  shift
  for f in "$@"; do cat "$f"; done
  exit 1
}
tiny=(--config "$config" --set model.n_layer=1 --set train.eval_batches=1)

"$ferry" train "${tiny[@]}" --steps 2 > first.log 2>&1 || fail "the first run failed" first.log
"$ferry" train "${tiny[@]}" --steps 2 > second.log 2>&1 || fail "the second run of the same config failed" second.log
grep -q "^run folder: $experiment/1 (checkpoints, metrics.jsonl)" first.log || fail "the first run's folder is not $experiment/1" first.log
grep -q "^run folder: $experiment/2 " second.log || fail "the second run's folder is not $experiment/2" second.log
[ -f "$experiment/2/step-00000002/state.json" ] && [ "$(wc -l < "$experiment/2/metrics.jsonl")" = 3 ] ||
  fail "$experiment/2 lacks its checkpoint or its metrics" second.log
grep -q "^saved: $experiment/2/step-00000002 | metrics: $experiment/2/metrics.jsonl$" second.log || fail "no saved: line" second.log

# The next commands, as printed, run.
sed -n '/^next:$/,$p' second.log | sed -n 's/^  //p' > next.sh
[ "$(grep -c . next.sh)" = 3 ] || fail "expected sample, eval and export among the next commands" second.log
sed -i 's/ sample .*/& --tokens 5/' next.sh  # (the default 200 tokens take a minute on a slow machine)
bash -e next.sh > next.log 2>&1 || fail "the printed next commands failed" next.sh next.log
grep -q "^val loss .* | weights: $experiment/2/step-00000002 (step 2)" next.log || fail "eval did not read run 2" next.sh next.log
[ -f "$experiment/2/hf/config.json" ] || fail "export wrote no $experiment/2/hf" next.sh next.log

# --resume alone: the newest run (3, cut short here by removing its last checkpoint), in its own folder.
resumable=("${tiny[@]}" --steps 3 --set train.checkpoint_every=1)
"$ferry" train "${resumable[@]}" > third.log 2>&1 || fail "the third run failed" third.log
rm -r "$experiment/3/step-00000003"
"$ferry" train "${resumable[@]}" --resume > resumed.log 2>&1 || fail "--resume failed" resumed.log
grep -q "resumed from $experiment/3/step-00000002 at step 2" resumed.log || fail "--resume did not take run 3's newest" resumed.log
grep -q "^run folder: $experiment/3 (continued; " resumed.log || fail "the resumed run did not go on in run 3" resumed.log
[ -f "$experiment/3/step-00000003/state.json" ] && [ ! -e "$experiment/4" ] || fail "the resumed run wrote elsewhere" resumed.log
"$ferry" train "${resumable[@]}" --resume > complete.log 2>&1 || fail "--resume after the final step failed" complete.log
[ "$(grep -c "nothing to train" complete.log)" = 1 ] || fail "'nothing to train' is not said once" complete.log

# sample, eval and export take the experiment's folder (its newest run's newest checkpoint) and a run folder.
"$ferry" eval "${tiny[@]}" --checkpoint "$experiment" > eval.log 2>&1 || fail "eval of $experiment failed" eval.log
grep -q "weights: $experiment/3/step-00000003 (step 3)" eval.log || fail "eval of $experiment did not read run 3" eval.log
"$ferry" export --checkpoint "$experiment/1" --out hf1 > export.log 2>&1 || fail "export of run 1 failed" export.log
grep -q "^exported $experiment/1/step-00000002 (step 2" export.log || fail "export of run 1" export.log
"$ferry" sample --checkpoint "$experiment" --tokens 3 --prompt "The " > sample.log 2>&1 || fail "sample of $experiment failed" sample.log
# Streamed: the first bytes arrive while the model is still generating (a billion tokens would take days).
timeout 60 bash -c "'$ferry' sample --checkpoint $experiment/1 --tokens 1000000000 --prompt 'The ' | head -c 40 > streamed.txt" ||
  fail "sample did not stream its tokens" streamed.txt
[ "$(head -c 4 streamed.txt)" = "The " ] && [ "$(wc -c < streamed.txt)" = 40 ] || fail "the streamed text" streamed.txt

# A run that fails at start-up leaves no folder: not a run folder, not a train.checkpoint_dir, nor their parents.
cd fresh
! "$ferry" train "${tiny[@]}" --steps 1 --set offload.gpu_budget=1KiB > ../budget.log 2>&1 || fail "an impossible budget trained" ../budget.log
grep -q "offload.gpu_budget: .* is below the" ../budget.log || fail "the budget was not refused" ../budget.log
! "$ferry" train "${tiny[@]}" --steps 1 --set offload.gpu_budget=1KiB --set train.checkpoint_dir=ck/a > ../dir.log 2>&1 || fail "trained" ../dir.log
! "$ferry" train "${tiny[@]}" --resume > ../nothing.log 2>&1 || fail "--resume without a run trained" ../nothing.log
grep -q -- "--resume: no run of .* to continue: '$experiment' holds no run folder" ../nothing.log || fail "--resume without a run" ../nothing.log
[ -z "$(ls -A)" ] || fail "a failed start left $(ls -A | tr '\n' ' ')behind" ../budget.log
echo "run folders: a folder per run, the next commands run as printed, --resume goes on in the newest"
