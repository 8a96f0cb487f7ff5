#!/usr/bin/env bash
# scripts/gpu/collect.sh DIR (run HERE, after a queue call): unpacks DIR/results.tar.gz (what scripts/gpu/queue.sh
# brought back) into the tree, only under bench/results/ and configs/cost_models/, keeps the call's summary as
# bench/results/gpu-queue-<date>-<gpu>.md, and marks each row that ran in bench/gpu-queue.md: `done <date> <gpu>`
# or `failed <date> <gpu> (exit N)`. Prints what changed; commit it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:?usage: scripts/gpu/collect.sh DIR, the files_at of the queue call (results.tar.gz, queue.md)}
[[ -f $dir/results.tar.gz ]] || { echo "collect: no results.tar.gz in $dir" >&2; exit 1; }
INTO=${FERRY_GPU_COLLECT_INTO:-$ROOT}  # the tree the results go into (a scratch tree in tests/checks/gpu_queue.sh)
QUEUE=${FERRY_GPU_QUEUE:-$INTO/bench/gpu-queue.md}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xzf "$dir/results.tar.gz"

# Results: only where results belong; anything else the call wrote is named and left out.
while IFS= read -r -d '' f; do
  rel=${f#"$work"/}
  case $rel in
    bench/results/* | configs/cost_models/*) mkdir -p "$INTO/$(dirname "$rel")" && cp "$f" "$INTO/$rel" && echo "collect: $rel" ;;
    queue-status.tsv | gtest/*) ;;
    *) echo "collect: left out $rel (not under bench/results/ or configs/cost_models/)" ;;
  esac
done < <(find "$work" -type f -print0)

[[ -f $work/queue-status.tsv ]] || { echo "collect: no row ran (no queue-status.tsv)"; exit 0; }
read -r _ _ _ gpu day <"$work/queue-status.tsv"
# The call's name: gpu-queue-<day>-<gpu>, then -2, -3 for a day's later calls (a second call must not replace the first's).
name=gpu-queue-$day-$gpu
for ((k = 2; ; ++k)); do
  [[ -e $INTO/bench/results/$name.md || -e $INTO/bench/results/$name-gtest.tar.gz ]] || break
  name=gpu-queue-$day-$gpu-$k
done
if [[ -f $dir/queue.md ]]; then
  mkdir -p "$INTO/bench/results" && cp "$dir/queue.md" "$INTO/bench/results/$name.md"
  echo "collect: bench/results/$name.md"
fi
if [[ -d $work/gtest ]]; then
  mkdir -p "$INTO/bench/results" && tar -C "$work" -czf "$INTO/bench/results/$name-gtest.tar.gz" gtest
  echo "collect: bench/results/$name-gtest.tar.gz (gtest JSON, sanitizer logs)"
fi

# Statuses: the row whose first cell is the item gets its last cell replaced.
python3 - "$QUEUE" "$work/queue-status.tsv" <<'PY'
import sys
queue, status = sys.argv[1], sys.argv[2]
marks = {}
for line in open(status):
    item, rc, seconds, gpu, day = line.rstrip("\n").split("\t")
    marks[item] = f"done {day} {gpu} ({seconds} s)" if rc == "0" else f"failed {day} {gpu} (exit {rc})"
out = []
for line in open(queue):
    cells = line.rstrip("\n").split("|")
    if len(cells) >= 8 and cells[1].strip() in marks:
        cells[-2] = f" {marks.pop(cells[1].strip())} "
        line = "|".join(cells) + "\n"
    out.append(line)
open(queue, "w").writelines(out)
for item, mark in marks.items():
    print(f"collect: {item} ran but is not a row of {queue}")
PY
echo "collect: statuses marked in ${QUEUE#"$INTO"/}"
