#!/usr/bin/env bash
# scripts/gpu/queue.sh (run THERE, one device call of at most 8 minutes): the next `todo` rows of
# bench/gpu-queue.md that fit the call, in order, each under `timeout`. Three files come back in $OUT:
# queue.md (the summary), queue.log, results.tar.gz (what the rows wrote, laid out like the repository, and
# queue-status.tsv); scripts/gpu/collect.sh unpacks them here and marks the rows.
#
#   run(carry=["gpu_bundle", "bench/baselines/wheels-gpu", "bench/baselines/wheels-gemini"],
#       command="bash scripts/gpu/queue.sh", timeout_s=540)   # wheels: bench/baselines/fetch.sh, here
#   FERRY_GPU_DRY_RUN=1 FERRY_GPU_BIN=build bash scripts/gpu/queue.sh   # here: check the list, print the plan
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SCRIPT=queue
export FERRY_CALL_BUDGET_S=${FERRY_CALL_BUDGET_S:-450}
source "$ROOT/scripts/gpu/env.sh"
source "$ROOT/scripts/gpu/queue_items.sh"
cd "$ROOT"
QUEUE=${FERRY_GPU_QUEUE:-$ROOT/bench/gpu-queue.md}
RES=$(mktemp -d)
export RES
trap 'tar -C "$RES" -czf "$OUT/results.tar.gz" . ; write_summary "$RES/queue-status.tsv"' EXIT

# The `todo` rows as "item<TAB>expected seconds<TAB>command", in the list's order.
todo_rows() {
  awk -F'|' '/^\| *[a-z0-9][a-z0-9.-]* *\|/ && NF >= 8 {
      for (i = 2; i <= 7; i++) { gsub(/^ +| +$/, "", $i) }
      if ($7 != "todo") next
      gsub(/`/, "", $5)
      printf "%s\t%s\t%s\n", $2, $6, $5 }' "$QUEUE"
}

# Whether a row's command can run: its first word is an item function (exported: rows run in `bash -c`), a
# binary of $BIN, or python3 with a script of the tree. Every `todo` row is checked before anything runs, so a typo fails the call in a second.
runnable() {
  local first rest
  read -r first rest <<<"$1"
  case $first in
    '$BIN/'*) [[ -x $BIN/${first#\$BIN/} ]] ;;
    python3) [[ -f $ROOT/${rest%% *} ]] ;;
    *) bash -c 'declare -F "$1"' _ "$first" >/dev/null ;;  # a new shell, as the row runs: exported functions only
  esac
}

mapfile -t ROWS_TODO < <(todo_rows)
((${#ROWS_TODO[@]} > 0)) || { log "no todo rows in $QUEUE"; exit 0; }
if [[ -n ${FERRY_GPU_BIN:-} ]]; then
  BIN=$(realpath "$FERRY_GPU_BIN")  # binaries built here (the dry run): nothing to unpack
else
  unpack_bundle || exit 1
  ready_binaries || { log "no runnable binaries: stopping"; exit 1; }
fi
GPU=$(gpu_tag)
export BIN GPU
bad=0
for row in "${ROWS_TODO[@]}"; do
  IFS=$'\t' read -r item expected command <<<"$row"
  [[ $expected =~ ^[0-9]+$ ]] || { log "$item: expected seconds '$expected' is not a number"; bad=1; }
  runnable "$command" || { log "$item: '$command' names no item function, binary of $BIN or script"; bad=1; }
done
((bad == 0)) || exit 2
log "GPU: $GPU; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"

planned=0  # the dry run's clock: the expected seconds of the rows it would have run
left() { if [[ $DRY == 1 ]]; then echo $((FERRY_CALL_BUDGET_S - planned)); else remaining; fi; }
for row in "${ROWS_TODO[@]}"; do
  IFS=$'\t' read -r item expected command <<<"$row"
  limit=$((expected * 3 / 2))
  ((limit > 240)) && limit=240
  if ((expected > $(left) - 15)); then
    ROWS+=("| $item | left for the next call: needs ${expected} s, $(left) s left | |")
    continue
  fi
  if [[ $DRY == 1 ]]; then
    ROWS+=("| $item | would run (timeout ${limit}s): \`$command\` | |")
    planned=$((planned + expected))
    continue
  fi
  t0=$(date +%s)
  rc=0
  step "$item" "$limit" bash -c "$command" || rc=$?
  printf '%s\t%s\t%s\t%s\t%s\n' "$item" "$rc" "$(($(date +%s) - t0))" "$GPU" "$(date -u +%Y-%m-%d)" >>"$RES/queue-status.tsv"
done
