#!/usr/bin/env bash
# expect.sh STATUS REGEX -- COMMAND...: runs COMMAND, prints its output, and passes only when it exits with
# STATUS and its stdout+stderr match REGEX (grep -E over the whole output as one text, so .* spans lines).
set -uo pipefail
if [ $# -lt 4 ] || [ "$3" != "--" ]; then
  echo "usage: expect.sh STATUS REGEX -- COMMAND..." >&2
  exit 2
fi
expected_status=$1 regex=$2
shift 3

output=$("$@" 2>&1)
status=$?
printf '%s\n' "$output"

failed=0
if [ "$status" -ne "$expected_status" ]; then
  echo "expect.sh: exit status $status, expected $expected_status: $*" >&2
  failed=1
fi
if ! printf '%s' "$output" | grep -Ezq -- "$regex"; then
  echo "expect.sh: the output does not match '$regex': $*" >&2
  failed=1
fi
exit "$failed"
