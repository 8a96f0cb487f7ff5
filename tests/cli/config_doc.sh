#!/usr/bin/env bash
# config_doc.sh FERRY DOC: passes when DOC (docs/config.md) is what `ferry config --markdown` prints, that is
# when the committed reference matches the config table in engine/config_schema.cpp; otherwise shows the
# difference and the command that regenerates the file.
set -uo pipefail
ferry=$1 doc=$2
generated=$("$ferry" config --markdown) || { echo "config_doc.sh: '$ferry config --markdown' failed" >&2; exit 1; }
if diff -u "$doc" <(printf '%s\n' "$generated"); then
  echo "docs/config.md is current"
  exit 0
fi
echo "config_doc.sh: docs/config.md is stale (the table in engine/config_schema.cpp changed); regenerate it from the" \
     "repository root with: build/ferry config --markdown > docs/config.md" >&2
exit 1
