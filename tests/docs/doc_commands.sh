#!/usr/bin/env bash
# doc_commands.sh SOURCE_DIR BUILD_DIR: runs every ```sh block of README.md and docs/*.md, in order, in a fresh copy
# of the repository's tracked files (the build folder linked in as ./build), and fails when a command fails or
# changes a tracked file (a doc command must never overwrite a committed result).
#
# Blocks: ```sh runs; ```sh gpu (needs a GPU) and ```sh long (minutes long) are skipped, and listed. In README's
# fresh-machine block, the set-up and build steps (scripts/setup.sh, cmake, ctest) are what CI itself runs
# (.ci/run, checked below); the rest of each line runs here, its `ferry train` for FERRY_DOC_TRAIN_STEPS steps
# when that is set (ctest's docs.commands: the full default experiment is DefaultExperiment's own test).
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: doc_commands.sh SOURCE_DIR BUILD_DIR" >&2
  exit 2
fi
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
block_timeout=${FERRY_DOC_BLOCK_TIMEOUT:-600}

if ! git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "doc_commands: $src is not a git checkout; nothing to compare the docs' effects against (skipped)"
  exit 0
fi

# The pages in reading order: the front page, then docs/ as README links them, then any page it does not link.
pages=(README.md)
while IFS= read -r page; do
  [ -f "$src/$page" ] && [[ " ${pages[*]} " != *" $page "* ]] && pages+=("$page")
done < <(grep -oE '\(docs/[A-Za-z0-9_.-]+\.md' "$src/README.md" | sed 's/^(//')
for page in "$src"/docs/*.md; do
  [ -e "$page" ] || continue
  page=${page#"$src"/}
  [[ " ${pages[*]} " != *" $page "* ]] && pages+=("$page")
done

work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-docs.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree=$work/tree
mkdir -p "$tree" "$work/home" "$work/cache"
# The tracked files as they are now (edits not yet committed included), as a repository of their own.
git -C "$src" ls-files -z | tar -C "$src" --null -T - -cf - | tar -C "$tree" -xf -
git -C "$tree" init -q && git -C "$tree" add -A && git -C "$tree" -c user.name=docs -c user.email=docs@localhost commit -qm docs
ln -s "$build" "$tree/build"

# The README's test command must be what CI runs.
test_command=$(grep -m1 -E '^scripts/setup.sh .*ctest ' "$src/README.md" || true)
if [ -z "$test_command" ] || ! grep -qF -- "$test_command" "$src/.ci/run"; then
  echo "doc_commands: README's test command is not the one .ci/run runs: '$test_command'" >&2
  exit 1
fi

# blocks PAGE: each runnable block as "LINE<TAB>KIND<TAB>TEXT" with the block's newlines as \x1f.
blocks() {
  awk -v OFS='\t' '
    /^```/ {
      if (in_block) { print start, kind, text; in_block = 0; next }
      info = substr($0, 4); sub(/[ \t]+$/, "", info)
      if (info == "sh" || info == "sh gpu" || info == "sh long") {
        in_block = 1; start = NR + 1; text = ""; kind = (info == "sh") ? "run" : substr(info, 4)
      }
      next
    }
    in_block { text = (text == "" ? $0 : text "\x1f" $0) }' "$1"
}

# In a fresh-machine line, the steps CI runs itself: setup, configure, build, ctest.
runnable_part() {
  local line=$1 rest=""
  local IFS=$'\n'
  for step in $(printf '%s\n' "$line" | sed 's/ && /\n/g'); do
    case "$step" in
      scripts/setup.sh*|"cmake "*|"ctest "*) ;;
      "./build/ferry train "*) rest=${rest:+$rest && }$step${FERRY_DOC_TRAIN_STEPS:+ --steps $FERRY_DOC_TRAIN_STEPS} ;;
      *) rest=${rest:+$rest && }$step ;;
    esac
  done
  printf '%s' "$rest"
}

ran=0 failed=0
skipped=()
for page in "${pages[@]}"; do
  while IFS=$'\t' read -r line kind text; do
    script=$(printf '%s' "$text" | tr '\037' '\n')
    if [ "$kind" != run ]; then
      skipped+=("$page:$line ($kind): $(printf '%s' "$script" | head -1)")
      continue
    fi
    if [ "$page" = README.md ] && printf '%s' "$script" | grep -q '^scripts/setup.sh'; then
      script=$(while IFS= read -r l; do runnable_part "$l"; echo; done <<< "$script")
    fi
    printf '\n=== %s:%s\n%s\n' "$page" "$line" "$script"
    start=$(date +%s)
    (cd "$tree" && HOME=$work/home XDG_CACHE_HOME=$work/cache timeout "$block_timeout" bash -e -o pipefail -c "$script") \
      > "$work/out" 2>&1
    status=$?
    tail -n 15 "$work/out"
    echo "--- exit $status in $(( $(date +%s) - start )) s"
    ran=$((ran + 1))
    if [ $status -ne 0 ]; then
      echo "doc_commands: FAILED: $page:$line exits with $status" >&2
      failed=$((failed + 1))
    fi
  done < <(blocks "$src/$page")
done

changed=$(git -C "$tree" status --porcelain --untracked-files=no)
if [ -n "$changed" ]; then
  printf 'doc_commands: the commands changed tracked files (a doc command must write to a scratch path):\n%s\n' "$changed" >&2
  failed=$((failed + 1))
fi
echo
echo "doc_commands: ${#pages[@]} pages, $ran blocks run, ${#skipped[@]} skipped:"
printf '  %s\n' "${skipped[@]+"${skipped[@]}"}"
[ $failed -eq 0 ] || { echo "doc_commands: $failed failures" >&2; exit 1; }
echo "doc_commands: every command ran"
