#!/usr/bin/env bash
# The format check: the lines a change adds or edits in C++ and CUDA sources must be as clang-format formats
# them with the committed .clang-format. Only changed lines count: the tree is never reformatted whole.
#   scripts/check_format.sh [--fix] [BASE]
# Run inside a checkout (the one of the current folder). The change: the working tree, uncommitted edits
# included, against BASE (default: where HEAD left origin/main when origin/main exists and is not HEAD, else
# HEAD~1). A clone that lacks BASE (a shallow clone of one commit) has nothing to compare: the check passes,
# saying so. --fix formats those lines in place instead of failing.
# Exit status: 0 formatted, 1 lines to format, 77 no clang-format (ctest counts the test as skipped).
set -euo pipefail
fix=0
if [[ ${1:-} == --fix ]]; then fix=1 && shift; fi
cd "$(git rev-parse --show-toplevel)"

clang_format=${CLANG_FORMAT:-}
for candidate in clang-format clang-format-{19..14}; do
  [[ -z $clang_format ]] && command -v "$candidate" >/dev/null && clang_format=$candidate
done
if [[ -z $clang_format ]]; then
  echo "format: no clang-format on PATH: install Debian's (apt-get install clang-format) or set CLANG_FORMAT" >&2
  exit 77
fi

base=${1:-}
if [[ -z $base ]]; then
  base=HEAD~1
  if git rev-parse -q --verify origin/main >/dev/null && [[ $(git rev-parse origin/main) != $(git rev-parse HEAD) ]]; then
    base=$(git merge-base origin/main HEAD || echo origin/main)
  fi
fi
if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
  echo "format: $base is not in this clone (a shallow one?): no change to check"
  exit 0
fi

# Each changed file with its added or edited line ranges (--lines=FIRST:LAST), from a diff without context.
declare -A ranges=()  # empty when the change touches no C++ (set -u needs it assigned)
file=""
while IFS= read -r line; do
  if [[ $line == "+++ b/"* ]]; then
    file=${line#+++ b/}
  elif [[ $line =~ ^@@\ -[0-9,]+\ \+([0-9]+)(,([0-9]+))?\ @@ ]]; then
    first=${BASH_REMATCH[1]} count=${BASH_REMATCH[3]:-1}
    ((count > 0)) && ranges[$file]+=" --lines=$first:$((first + count - 1))"
  fi
done < <(git diff -U0 --no-color --no-ext-diff --diff-filter=AMR "$base" -- '*.cpp' '*.h' '*.cu' '*.cuh')

failed=0
for file in "${!ranges[@]}"; do
  # shellcheck disable=SC2086  # the ranges are separate arguments
  if ((fix)); then
    "$clang_format" --style=file -i ${ranges[$file]} "$file"
  elif ! "$clang_format" --style=file --dry-run --Werror ${ranges[$file]} "$file"; then
    failed=$((failed + 1))
  fi
done

if ((failed > 0)); then
  echo "format: $failed of ${#ranges[@]} files changed against $base hold lines clang-format would change; run scripts/check_format.sh --fix $base" >&2
  exit 1
fi
echo "format: the lines changed against $base in ${#ranges[@]} files are formatted$( ((fix)) && echo " (fixed in place)")"
