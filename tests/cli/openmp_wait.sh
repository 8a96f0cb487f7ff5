#!/usr/bin/env bash
# ferry and ferry-bench run with OpenMP's idle threads asleep unless the user chose a wait policy: started without
# OMP_WAIT_POLICY, the process executes itself again with PASSIVE (libgomp then spins 0 times before sleeping,
# where its default spins 300000); a policy the user set is kept, with no second start. libgomp's
# OMP_DISPLAY_ENV=verbose prints its settings as each process starts: the last GOMP_SPINCOUNT is what ran.
set -uo pipefail
# spin_counts PROGRAM ENV...: the GOMP_SPINCOUNT of each start of PROGRAM --version, one a line.
spin_counts() {
  local program=$1
  shift
  env "$@" OMP_DISPLAY_ENV=verbose "$program" --version 2>&1 | sed -n "s/^ *GOMP_SPINCOUNT = '\([0-9]*\)'/\1/p"
}
for program in "$@"; do
  unset_counts=$(spin_counts "$program" -u OMP_WAIT_POLICY | tr '\n' ' ')
  active_counts=$(spin_counts "$program" OMP_WAIT_POLICY=ACTIVE | tr '\n' ' ')
  if [[ $unset_counts != "300000 0 " || $active_counts != "30000000000 " ]]; then
    echo "openmp_wait.sh: $(basename "$program"): spin counts '$unset_counts' without OMP_WAIT_POLICY (expected '300000 0 ': a second start, passive), '$active_counts' with ACTIVE (expected one start, '30000000000 ')"
    exit 1
  fi
done
echo "idle OpenMP threads sleep unless the user says otherwise"
