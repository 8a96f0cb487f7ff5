#!/usr/bin/env bash
# bench_step_units.sh FERRY_BENCH CONFIG OUT_JSON: `ferry-bench step --json` must give every timed step in
# step_ms_all in the same unit as ms_per_step_median, which is their median.
set -euo pipefail
bench=$1 config=$2 json=$3
"$bench" step --config "$config" --batch 1 --seq 16 --steps 3 --warmup 0 --threads 1 --json "$json" >/dev/null
awk '
  /"ms_per_step_median"/ { gsub(/[^0-9.eE+-]/, "", $2); median = $2 + 0 }
  /"step_ms_all"/ { inside = 1; next }
  inside && /\]/ { inside = 0 }
  inside { gsub(/[ ,]/, ""); all[n++] = $0 + 0 }
  END {
    if (n != 3) { print "step_ms_all has " n " values, expected 3"; exit 1 }
    for (i = 0; i < n; i++) if (all[i] == median) { print "step_ms_all holds the median " median " ms"; exit 0 }
    printf "ms_per_step_median %s is none of step_ms_all:", median; for (i = 0; i < n; i++) printf " %s", all[i]; print ""
    exit 1
  }' "$json"
