#!/usr/bin/env bash
# The include check: fails when a file of one part includes a part that is not below it. The layer order is the
# table below, one line a part: the parts it builds on directly; a part may include those, what they build on,
# and so on down, and the foundation, which every part may use. Tests are not checked (a test may use any part).
#   scripts/check_layers.sh [ROOT]    ROOT: the source tree to check (default: this checkout)
set -euo pipefail

# part           builds on (directly)
LAYERS='
foundation     :
memory         :
kernels        : memory
kernels/cpu    : kernels
kernels/cuda   : kernels
models         : memory
cpu_optim      : kernels
dataset        :
formats        : models
offload        : models
engine/device  : kernels/cpu kernels/cuda cpu_optim
engine/ops     : engine/device models offload
engine         : engine/ops dataset formats
cli            : engine
bench          : cli
'

root=${1:-"$(cd "$(dirname "$0")/.." && pwd)"}
cd "$root"

declare -A direct below
parts=()
while IFS=: read -r part builds_on; do
  part=${part// /}
  [[ -z $part ]] && continue
  parts+=("$part")
  read -r -a names <<<"$builds_on"
  direct[$part]="foundation ${names[*]:-}"
done <<<"$LAYERS"

# What each part may include: the closure of `direct`, computed until nothing is added.
for p in "${parts[@]}"; do below[$p]=" $p ${direct[$p]} "; done
changed=1
while ((changed)); do
  changed=0
  for p in "${parts[@]}"; do
    for d in ${below[$p]}; do
      [[ -n ${below[$d]:-} ]] || continue
      for dd in ${below[$d]}; do
        if [[ ${below[$p]} != *" $dd "* ]]; then below[$p]+="$dd "; changed=1; fi
      done
    done
  done
done

# The part a path belongs to: the longest part name that is a folder prefix of it ("" when none).
part_of() {
  local path=$1 best=""
  for p in "${parts[@]}"; do
    if [[ $path == "$p"/* && ${#p} -gt ${#best} ]]; then best=$p; fi
  done
  echo "$best"
}

if [[ $(git rev-parse --show-toplevel 2>/dev/null) == "$PWD" ]]; then  # a checkout: its files, not build outputs
  files=$(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.h' '*.cu' '*.cuh')
else
  files=$(find . -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sed 's|^\./||')
fi

failures=0 checked=0
for file in $files; do
  [[ $file == tests/* || $file == build*/* ]] && continue
  [[ -f $file ]] || continue
  from=$(part_of "$file")
  if [[ -z $from ]]; then
    echo "layers: $file is in no part of the layer table: add its folder to scripts/check_layers.sh" >&2
    failures=$((failures + 1))
    continue
  fi
  checked=$((checked + 1))
  while IFS=: read -r line included; do
    to=$(part_of "$included")
    [[ -z $to || ${below[$from]} == *" $to "* ]] && continue
    echo "layers: $file:$line includes \"$included\" of $to, which is not below $from; $from may include only${below[$from]}(the table in scripts/check_layers.sh)" >&2
    failures=$((failures + 1))
  done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" | sed -E 's/^([0-9]+):[^"]*"([^"]+)".*/\1:\2/')
done

if ((failures > 0)); then
  echo "layers: $failures upward or unplaced includes in $checked files: move the code to the part that may use both, or what it needs down" >&2
  exit 1
fi
echo "layers: $checked files, no include points up"
