#!/usr/bin/env bash
# full_disk.sh export|plan|metrics FERRY CONFIG WORK: a write that fails as on a full disk (/dev/full, or a
# file size limit: `ulimit -f`, with SIGXFSZ ignored so that the write fails instead of killing) must exit
# 1 naming the file, leave no temporary and keep the user's earlier file. Prints "ok: ..." per check.
set -uo pipefail
mode=$1 ferry=$2 config=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
failed=0
check() {  # check WHAT COMMAND...: passes when COMMAND succeeds
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failed=1; fi
}
limited() {  # limited KIB|unlimited COMMAND...: runs COMMAND with files limited to KIB KiB; prints its output, returns its status
  local kib=$1; shift
  ( trap '' XFSZ; ulimit -f "$kib"; exec "$@" ) > "$work/out.log" 2>&1
  local status=$?
  cat "$work/out.log"
  return $status
}
no_temporaries() { [ -z "$(find "$work" -name '*.tmp*')" ]; }
small=(--set model.n_layer=1 --set train.eval_batches=1 --set train.checkpoint_dir="$work/ck")

case $mode in
export)
  "$ferry" train --config "$config" --steps 1 "${small[@]}" > /dev/null 2>&1 || { echo "training failed"; exit 1; }
  # config.json on a full disk: the first error the old code swallowed (it checked before the flush); the
  # folder holds a file already, so --overwrite
  mkdir "$work/hf" && ln -s /dev/full "$work/hf/config.json"
  limited unlimited "$ferry" export --checkpoint "$work/ck" --out "$work/hf" --overwrite
  check "config.json to /dev/full exits 1" [ $? -eq 1 ]
  check "and names it" grep -qF -- "export: cannot write '$work/hf/config.json' (a link to '/dev/full'): writing failed: No space left on device" "$work/out.log"
  check "and writes no model.safetensors beside it" [ ! -e "$work/hf/model.safetensors" ]
  # model.safetensors past the limit: no temporary left, no folder made
  limited 64 "$ferry" export --checkpoint "$work/ck" --out "$work/hf2"
  check "model.safetensors past the limit exits 1" [ $? -eq 1 ]
  check "and names it" grep -qF -- "export: cannot write '$work/hf2/model.safetensors': writing its temporary failed: File too large" "$work/out.log"
  check "and leaves no folder" [ ! -e "$work/hf2" ]
  ;;
plan)
  plan=("$ferry" plan --config "$config" --budget 2GiB --set offload.cost_model=cost_models/h100-assumed.json)
  "${plan[@]}" --json "$work/plan.json" > /dev/null && cp "$work/plan.json" "$work/before.json"
  limited unlimited "${plan[@]}" --json /dev/full
  check "--json /dev/full exits 1" [ $? -eq 1 ]
  check "and names it" grep -qF -- "--json: cannot write '/dev/full': writing failed: No space left on device" "$work/out.log"
  limited 1 "${plan[@]}" --json "$work/plan.json"
  check "--json past the limit exits 1" [ $? -eq 1 ]
  check "and keeps the earlier plan.json whole" cmp -s "$work/plan.json" "$work/before.json"
  ;;
metrics)
  limited unlimited "$ferry" train --config "$config" --steps 2 "${small[@]}" --metrics /dev/full
  check "--metrics /dev/full exits 1" [ $? -eq 1 ]
  check "and names it" grep -qF -- "--metrics: writing '/dev/full' failed: No space left on device" "$work/out.log"
  limited 4 "$ferry" train --config "$config" --steps 100 "${small[@]}" --metrics "$work/m.jsonl"
  check "--metrics past the limit exits 1" [ $? -eq 1 ]
  check "and says the file keeps its complete lines" grep -qF -- "m.jsonl' failed: File too large; the file keeps its complete lines" "$work/out.log"
  check "which it does (it ends with a newline)" [ "$(tail -c 1 "$work/m.jsonl" | od -An -c | tr -d ' ')" = '\n' ]
  ;;
*) echo "usage: full_disk.sh export|plan|metrics FERRY CONFIG WORK"; exit 2 ;;
esac
check "no temporary is left behind" no_temporaries
[ "$failed" -eq 0 ] && echo "every write failed cleanly"
exit "$failed"
