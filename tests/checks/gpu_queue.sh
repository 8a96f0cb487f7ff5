#!/usr/bin/env bash
# tests/checks/gpu_queue.sh BUILD_DIR: the GPU queue here, as far as no GPU is needed. The committed list's
# `todo` rows all name something runnable (the dry run); a misspelt row stops a call before anything runs;
# collect.sh puts a call's results where they belong, marks the rows that ran and leaves out stray files.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(realpath "$1")
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "gpu_queue: FAILED: $*" >&2; exit 1; }
dry() { FERRY_GPU_DRY_RUN=1 FERRY_GPU_BIN=$BUILD OUT=$scratch/out bash "$ROOT/scripts/gpu/queue.sh" "$@"; }

# 1. The committed list.
dry 2>"$scratch/err" || fail "the dry run of bench/gpu-queue.md: $(cat "$scratch/err")"
grep -q "would run" "$scratch/out/queue.md" || fail "the dry run would run no row: $(cat "$scratch/out/queue.md")"

# The committed list with every row `todo` again, whatever calls have marked since.
all_todo() { sed -E '/^\| item \|/!s/^(\| [a-z0-9][a-z0-9.-]* \|.*\| )[^|]+( \|)$/\1todo\2/' "$ROOT/bench/gpu-queue.md"; }

# 2. A row whose command names nothing runnable: exit 2, the row named, nothing run. So is a row naming a
# function the rows' `bash -c` cannot see (queue.sh's own todo_rows, not exported; an item function missing
# from the export once cost a call two rows).
all_todo | sed 's/`default_path`/`defualt_path`/; s/`llama_step`/`todo_rows`/' >"$scratch/typo.md"
rc=0
FERRY_GPU_QUEUE=$scratch/typo.md dry 2>"$scratch/err" || rc=$?
((rc == 2)) || fail "a misspelt row: exit $rc, expected 2"
grep -q "default-path: 'defualt_path' names no item function" "$scratch/err" || fail "the misspelt row is not named: $(cat "$scratch/err")"
grep -q "llama-8b-step: 'todo_rows' names no item function" "$scratch/err" || fail "an unexported function passed: $(cat "$scratch/err")"
((rc == 2)) && all_todo >"$scratch/all.md" && FERRY_GPU_QUEUE=$scratch/all.md dry 2>"$scratch/err" ||
  fail "every row of the list, todo again: $(cat "$scratch/err")"

# 2b. Python runs with the machine's library path, our binaries (through with_libs) with the bundle's.
got=$(LD_LIBRARY_PATH=/machine/lib TMPDIR=$scratch bash -c 'ROOT=$1 SCRIPT=check OUT=$2 FERRY_GPU_DRY_RUN=1; source "$1/scripts/gpu/env.sh"
  LD_LIBRARY_PATH=/bundle/lib; w=$(with_libs /usr/bin/env)
  bash -c '"'"'python3 -c "import os; print(os.environ[\"LD_LIBRARY_PATH\"])"'"'"'; "$w" | grep "^LD_LIBRARY_PATH="' _ "$ROOT" "$scratch/out")
[[ $got == $'/machine/lib\nLD_LIBRARY_PATH=/bundle/lib' ]] || fail "library paths: python3 and with_libs gave '$got'"

# 3. collect.sh on what a call brings back: one row done, one failed, a result, a stray file.
mkdir -p "$scratch/call/res/bench/results" "$scratch/call/res/gtest" "$scratch/tree/bench" "$scratch/back"
all_todo >"$scratch/tree/bench/gpu-queue.md"
echo '{"ms": 1}' >"$scratch/call/res/bench/results/step-gpt2-124m-h100.json"
echo stray >"$scratch/call/res/elsewhere.txt"
echo '{}' >"$scratch/call/res/gtest/test_device.json"
printf 'gpu-tests-kernels\t0\t61\th100\t2026-11-27\ndefault-path\t1\t30\th100\t2026-11-27\n' >"$scratch/call/res/queue-status.tsv"
tar -C "$scratch/call/res" -czf "$scratch/back/results.tar.gz" .
echo "# queue" >"$scratch/back/queue.md"
FERRY_GPU_COLLECT_INTO=$scratch/tree bash "$ROOT/scripts/gpu/collect.sh" "$scratch/back" >"$scratch/collect.out"
cmp -s "$scratch/tree/bench/results/step-gpt2-124m-h100.json" "$scratch/call/res/bench/results/step-gpt2-124m-h100.json" || fail "the result was not collected"
[[ ! -e $scratch/tree/elsewhere.txt ]] && grep -q "left out elsewhere.txt" "$scratch/collect.out" || fail "the stray file was not left out"
[[ -f $scratch/tree/bench/results/gpu-queue-2026-11-27-h100.md ]] || fail "the call's summary was not kept"
echo "# queue, the day's second call" >"$scratch/back/queue.md"
FERRY_GPU_COLLECT_INTO=$scratch/tree bash "$ROOT/scripts/gpu/collect.sh" "$scratch/back" >/dev/null
grep -q "second call" "$scratch/tree/bench/results/gpu-queue-2026-11-27-h100-2.md" &&
  [[ -f $scratch/tree/bench/results/gpu-queue-2026-11-27-h100-2-gtest.tar.gz ]] &&
  grep -q "^# queue$" "$scratch/tree/bench/results/gpu-queue-2026-11-27-h100.md" || fail "a second call's summary replaced the first's"
grep -q '^| gpu-tests-kernels |.*| done 2026-11-27 h100 (61 s) |$' "$scratch/tree/bench/gpu-queue.md" || fail "gpu-tests-kernels not marked done"
grep -q '^| default-path |.*| failed 2026-11-27 h100 (exit 1) |$' "$scratch/tree/bench/gpu-queue.md" || fail "default-path not marked failed"
grep -q '^| gpu-tests-device |.*| todo |$' "$scratch/tree/bench/gpu-queue.md" || fail "a row that did not run changed"
# A done row is no longer in the queue.
FERRY_GPU_QUEUE=$scratch/tree/bench/gpu-queue.md dry
grep -q "gpu-tests-kernels" "$scratch/out/queue.md" && fail "a done row is queued again"
# 4. ferry_line runs Ferry once a machine per shape, policy and overlap, and copies the line into the later rows
# that share them (marked with the row that ran it); a run that did not train is not kept; bench/report.py reads a
# copied line once. A stand-in for ferry_run.py (which needs torch) in a scratch tree records each run; it fails to
# train at batch 2.
tree=$scratch/lines && mkdir -p "$tree/bench/baselines" "$tree/scripts" && cp -r "$ROOT/scripts/gpu" "$tree/scripts/"
cat >"$tree/bench/baselines/ferry_run.py" <<'PY'
import json, sys
out = sys.argv[sys.argv.index("--json") + 1]
trained = sys.argv[sys.argv.index("--batch") + 1] != "2"
open(out, "a").write(json.dumps({"system": "ferry-greedy", "model": "m", "trained": trained, "args": sys.argv[1:]}) + "\n")
open(sys.argv[0] + ".runs", "a").write("run\n")
PY
(cd "$tree" && ROOT=$tree SCRIPT=check OUT=$scratch/out FERRY_GPU_DRY_RUN=1 TMPDIR=$scratch bash -c '
  source scripts/gpu/env.sh && source scripts/gpu/queue_items.sh && BIN=$1 && export FERRY_LINES=$2
  ROW_SHAPE=(--model m --batch 4) && ferry_line a greedy pipelined /init a.jsonl && ferry_line b greedy pipelined /init b.jsonl &&
    ferry_line c greedy backward /init c.jsonl && ROW_SHAPE=(--model m --batch 8) && ferry_line d greedy pipelined /init d.jsonl &&
    ROW_SHAPE=(--model m --batch 2) && ferry_line e greedy pipelined /init e.jsonl && ferry_line f greedy pipelined /init f.jsonl' \
  _ "$BUILD" "$scratch/ferry-lines") || fail "ferry_line failed"
[[ $(wc -l <"$tree/bench/baselines/ferry_run.py.runs") == 5 ]] ||
  fail "ferry_line: $(wc -l <"$tree/bench/baselines/ferry_run.py.runs") runs for 3 configurations and one that failed twice"
grep -q '"ran_for_row": "f"' "$tree/f.jsonl" || fail "row f copied a run that did not train"
cmp -s "$tree/a.jsonl" "$tree/b.jsonl" && grep -q '"ran_for_row": "a"' "$tree/b.jsonl" || fail "row b did not get row a's line"
grep -q '"ran_for_row": "c"' "$tree/c.jsonl" && grep -q '"ran_for_row": "d"' "$tree/d.jsonl" || fail "rows c and d ran their own"
n=$(cd "$ROOT/bench" && python3 -c 'import sys, report; print(len(report.read(sys.argv[1:])))' "$tree"/[abcd].jsonl)
((n == 3)) || fail "report.py read $n lines of 3 runs"

# 5. ferry_init exports a model's starting weights once a machine: a second row finds them (a sharded export has
# no model.safetensors; looking for one re-exported GPT-2 1.5B for every row on 2026-11-28).
(ROOT=$ROOT SCRIPT=check OUT=$scratch/out FERRY_GPU_DRY_RUN=1 TMPDIR=$scratch FERRY_INIT_DIR=$scratch/init bash -c '
  source "$ROOT/scripts/gpu/env.sh" && source "$ROOT/scripts/gpu/queue_items.sh" && BIN=$1
  first=$(ferry_init gpt-tiny 2>/dev/null) && touch "$first/kept" && second=$(ferry_init gpt-tiny 2>/dev/null) &&
    [[ $first == "$second" && -f $second/kept && -f $second/config.json ]]' _ "$BUILD") ||
  fail "ferry_init exported the starting weights again, or not at all"

# 6. bench/ncu_summary.py on a report laid out as ncu's --csv --page details: ncu's own lines first, durations in
# two units, a thousands separator, a stall metric; one row per kernel with medians, a missing metric left blank.
cat >"$scratch/ncu.csv" <<'CSV'
==PROF== Connected to process 1 (ferry-bench)
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","ferry-bench","h","void ferry::kernels::cuda::(anonymous namespace)::ln_forward_kernel<8, ferry::Bf16>(ferry::kernels::cuda::RowMap, ...)","1","7","(96, 1, 1)","(16384, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","usecond","50.00"
"0","1","ferry-bench","h","void ferry::kernels::cuda::(anonymous namespace)::ln_forward_kernel<8, ferry::Bf16>(ferry::kernels::cuda::RowMap, ...)","1","7","(96, 1, 1)","(16384, 1, 1)","0","9.0","GPU Speed Of Light Throughput","DRAM Throughput","%","20.5"
"0","1","ferry-bench","h","void ferry::kernels::cuda::(anonymous namespace)::ln_forward_kernel<8, ferry::Bf16>(ferry::kernels::cuda::RowMap, ...)","1","7","(96, 1, 1)","(16384, 1, 1)","0","9.0","Command line profiler metrics","smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio","","3.5"
"1","1","ferry-bench","h","void ferry::kernels::cuda::(anonymous namespace)::ln_forward_kernel<8, ferry::Bf16>(ferry::kernels::cuda::RowMap, ...)","1","7","(96, 1, 1)","(16384, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","nsecond","70,000"
"1","1","ferry-bench","h","void ferry::kernels::cuda::(anonymous namespace)::ln_forward_kernel<8, ferry::Bf16>(ferry::kernels::cuda::RowMap, ...)","1","7","(96, 1, 1)","(16384, 1, 1)","0","9.0","GPU Speed Of Light Throughput","DRAM Throughput","%","30.5"
"2","1","ferry-bench","h","void ferry::kernels::cuda::(anonymous namespace)::ce_backward_kernel<8, ferry::Bf16>(ferry::kernels::cuda::RowMap, ...)","1","7","(256, 1, 1)","(16384, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","msecond","1.25"
CSV
python3 "$ROOT/bench/ncu_summary.py" "$scratch/ncu.csv" >"$scratch/ncu.md" || fail "ncu_summary.py failed: $(cat "$scratch/ncu.md")"
grep -qF '| ln_forward_kernel<8, Bf16> | 2 | 60.0 | 25.5 |  |  |  |  |  | long_scoreboard 3.5 |' "$scratch/ncu.md" &&
  grep -q '^| ce_backward_kernel<8, Bf16> | 1 | 1250.0 |' "$scratch/ncu.md" || fail "ncu_summary.py: $(cat "$scratch/ncu.md")"

echo "gpu_queue: ok"
