# scripts/gpu/env.sh: sourced by contact.sh and measure.sh on the GPU machine (each call starts bare): a log
# and summary in $OUT, steps under `timeout` within the call's deadline, the bundle's .debs unpacked into a
# prefix (never /), LD_LIBRARY_PATH, and binaries that run (the bundle's, else rebuilt there).
# Expects ROOT (the repository) and SCRIPT (the caller's name); honours FERRY_GPU_DRY_RUN=1.

BUNDLE=${FERRY_BUNDLE:-$ROOT/gpu_bundle}
OUT=${OUT:-$ROOT/gpu_out}
PREFIX=${FERRY_PREFIX:-/tmp/ferry-prefix}
DRY=${FERRY_GPU_DRY_RUN:-0}
DEADLINE=$(($(date +%s) + ${FERRY_CALL_BUDGET_S:-510}))  # under the 9 minutes a call may take, transfers aside
mkdir -p "$OUT"
LOG=$OUT/$SCRIPT.log
SUMMARY=$OUT/$SCRIPT.md
ROWS=()
: >"$LOG"

# The library path the machine gave this call, before unpack_bundle puts the bundle's and the CUDA toolkit's
# folders first: Python runs with it (python3 below), Ferry's binaries with the bundle's (with_libs).
export MACHINE_LD_LIBRARY_PATH=${MACHINE_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}}

log() { printf '%s\n' "$*" | tee -a "$LOG" >&2; }
remaining() { echo $((DEADLINE - $(date +%s))); }

# step NAME SECONDS COMMAND...: runs COMMAND under `timeout` (at most what is left of the call, less 15 s
# for the summary), its output into the log; one summary row per step. Returns COMMAND's status.
step() {
  local name=$1 limit=$2; shift 2
  local left=$(($(remaining) - 15))
  ((limit > left)) && limit=$left
  if ((limit <= 0)); then
    ROWS+=("| $name | skipped: the call's time is spent | |")
    log "== $name: skipped (no time left)"
    return 124
  fi
  log "== $name (timeout ${limit}s): $*"
  local t0=$(date +%s) rc=0
  # bash -c: a step may be one of the exported functions below, which `timeout` alone cannot run.
  timeout --kill-after=5 "$limit" bash -c '"$@"' _ "$@" >>"$LOG" 2>&1 || rc=$?
  local verdict=ok
  ((rc == 124 || rc == 137)) && verdict="timed out after ${limit}s" || { ((rc != 0)) && verdict="failed (exit $rc)"; }
  ROWS+=("| $name | $verdict | $(($(date +%s) - t0)) s |")
  log "== $name: $verdict"
  return $rc
}

# One row per gtest JSON in $1: tests, passed, failed, skipped (and the first skip's reason).
gtest_table() {
  ls "$1"/*.json >/dev/null 2>&1 || return 0
  python3 - "$1" "$LOG" <<'PY'
import glob, json, os, sys
print("| tests | total | passed | failed | skipped | first failure, or a skip reason from the log |\n|---|---|---|---|---|---|")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    cases = [c for s in json.load(open(path)).get("testsuites", []) for c in s.get("testsuite", [])]
    failed = [c for c in cases if c.get("failures")]
    skipped = [c for c in cases if c.get("result") == "SKIPPED"]
    reason = next((f["failure"].splitlines()[0] for c in failed for f in c["failures"]), "")
    if not reason and skipped:  # gtest's JSON keeps no skip message: the log's first one
        reason = next((l.strip() for l in open(sys.argv[2], errors="replace") if "no CUDA device:" in l), "skipped")
    print(f"| {os.path.basename(path)[:-5]} | {len(cases)} | {len(cases) - len(failed) - len(skipped)} | {len(failed)} | {len(skipped)} | {reason[:120]} |")
PY
  echo
}

write_summary() {
  {
    echo "# $SCRIPT on $(hostname) ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
    echo
    [[ $DRY == 1 ]] && echo "Dry run (FERRY_GPU_DRY_RUN=1): stopped where a GPU is needed." && echo
    echo "| step | result | time |"
    echo "|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
    echo
    [[ -n ${RESULTS:-} ]] && gtest_table "$RESULTS"
    for f in "$@"; do [[ -f $f ]] && { echo "## $(basename "$f")"; echo; echo '```'; tail -c 6000 "$f"; echo '```'; echo; }; done
  } >"$SUMMARY"
}

# The CUDA libraries Ferry may load (cuBLASLt linked, cuDNN opened at run time): the toolkit's, the
# system's, and PyTorch's wheels' (site-packages/nvidia/*/lib).
cuda_library_dirs() {
  local dirs=() d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do [[ -d $d ]] && dirs+=("$d"); done
  local site
  for site in $(python3 -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
    for d in "$site"/nvidia/*/lib; do [[ -d $d ]] && dirs+=("$d"); done
  done
  (IFS=:; echo "${dirs[*]}")
}

# Unpacks the runtime .debs into $PREFIX (dpkg -x, or ar + tar where dpkg is missing) and puts them first
# on LD_LIBRARY_PATH, then the CUDA libraries' folders.
unpack_bundle() {
  [[ -d $BUNDLE/debs ]] || { log "no bundle at $BUNDLE: run scripts/gpu/pack.sh here and carry gpu_bundle"; return 1; }
  mkdir -p "$PREFIX"
  local deb
  for deb in "$BUNDLE"/debs/*.deb; do
    if command -v dpkg >/dev/null; then dpkg -x "$deb" "$PREFIX"
    else (t=$(mktemp -d) && cd "$t" && ar x "$deb" && tar -xf data.tar.* -C "$PREFIX" && rm -rf "$t"); fi
  done
  [[ -d $BUNDLE/bin ]] || tar -C "$BUNDLE" -xJf "$BUNDLE/bin.tar.xz"  # pack.sh compresses the binaries
  mkdir -p "$PREFIX/data" && tar -C "$PREFIX/data" -xzf "$BUNDLE/data.tar.gz"
  if [[ -f $BUNDLE/cudnn_frontend_include.tar.gz ]]; then
    mkdir -p "$PREFIX/cudnn-frontend" && tar -C "$PREFIX/cudnn-frontend" -xzf "$BUNDLE/cudnn_frontend_include.tar.gz"
  fi
  export LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu:$PREFIX/lib/x86_64-linux-gnu:$(cuda_library_dirs)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  log "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  # The test binaries read tests/data and configs at the checkout's path they were built in: point it here.
  local compiled
  compiled=$(cat "$BUNDLE/source_dir")
  if [[ $compiled != "$ROOT" && ! -e $compiled ]]; then
    mkdir -p "$(dirname "$compiled")" && ln -s "$ROOT" "$compiled" && log "linked $compiled -> $ROOT"
  fi
}

# BIN: the bundle's binaries if each loads and answers, else (with cmake, ninja, a C++ compiler and nvcc
# there, not in a dry run) a rebuild in /tmp/ferry-build on every core against the unpacked -dev .debs.
smoke_test() {
  local dir=$1 t
  for t in ferry ferry-bench test_device test_engine test_kernels_cuda; do
    if ldd "$dir/$t" | grep "not found" >/dev/null; then log "$dir/$t: $(ldd "$dir/$t" | grep 'not found' | tr '\n' ' ')"; return 1; fi
  done
  # cuBLASLt is opened at run time, so ldd does not show it: --version names the file it opened (or why none).
  log "$("$dir/ferry" --version 2>&1 | tr '\n' ' ')"
  "$dir/ferry" --help >/dev/null && "$dir/ferry-bench" --help >/dev/null && "$dir/test_device" --gtest_list_tests >/dev/null
}

rebuild() {
  for tool in cmake ninja c++ nvcc; do command -v $tool >/dev/null || { log "no $tool here: cannot rebuild"; return 1; }; done
  local deb
  for deb in "$BUNDLE"/dev-debs/*.deb; do dpkg -x "$deb" "$PREFIX"; done
  export CPATH="$PREFIX/usr/include:$PREFIX/cudnn-frontend/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}"
  cmake -S "$ROOT" -B /tmp/ferry-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRY_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DCUDNN_FRONTEND_INCLUDE_DIR="$PREFIX/cudnn-frontend/include" &&
    ninja -C /tmp/ferry-build -j"$(nproc)" ferry ferry-bench test_device test_engine test_kernels_cuda &&
    mkdir -p /tmp/ferry-build/bin &&
    for t in ferry ferry-bench test_device test_engine test_kernels_cuda; do
      cp "$(find /tmp/ferry-build -type f -name $t -perm -u+x | head -1)" /tmp/ferry-build/bin/
    done
}

ready_binaries() {
  BIN=$BUNDLE/bin
  if step "smoke test of the bundle's binaries (ldd, --help)" 30 smoke_test "$BIN"; then return 0; fi
  if [[ $DRY == 1 ]]; then log "dry run: no rebuild"; return 1; fi
  step "rebuild there (cmake + ninja -j$(nproc))" 300 rebuild || return 1
  BIN=/tmp/ferry-build/bin
  step "smoke test of the rebuilt binaries" 30 smoke_test "$BIN"
}

# A tag for result files: the GPU's model in lower case ("h100", "h200"), else "nogpu".
gpu_tag() {
  local name
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  [[ -z $name ]] && { echo nogpu; return; }
  echo "$name" | grep -oiE 'H100|H200|A100|L40S|[A-Z][0-9]{2,4}' | head -1 | tr 'A-Z' 'a-z'
}

# Where the baselines are installed (no index there; scripts/gpu/queue_items.sh, baselines.sh, max_model.sh), and the environment their Python runs in:
# that site on the path, unbuffered output (progress lines reach the log of a run killed at its limit), and
# Colossal-AI's kernel build for sm_90 on the machine's 16 cores.
BASELINE_SITE=/tmp/site
# Python (torch, DeepSpeed, Colossal-AI) with the machine's library path, not the bundle's: that one puts the
# toolkit's cuDNN first (9.14 on the 2026-11-28 H200), and torch, built against its own wheel's (9.19), refuses
# to start cuDNN with it (torch.backends.cudnn.version() raises). A Python script that starts one of our
# binaries is given its with_libs wrapper.
python3() { LD_LIBRARY_PATH=$MACHINE_LD_LIBRARY_PATH command python3 "$@"; }

# with_libs BINARY: prints the path of a wrapper that runs BINARY with the bundle's library path (the one this
# shell has after unpack_bundle), for a Python script to start.
with_libs() {
  local dir=${TMPDIR:-/tmp}/ferry-with-libs
  mkdir -p "$dir" || return
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "${LD_LIBRARY_PATH-}" "$1" >"$dir/${1##*/}" &&
    chmod +x "$dir/${1##*/}" && echo "$dir/${1##*/}"
}

use_baseline_python() { export PYTHONPATH=$BASELINE_SITE PYTHONUNBUFFERED=1 MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0; }

export ROOT BUNDLE OUT PREFIX LOG DRY BASELINE_SITE
export -f log cuda_library_dirs smoke_test rebuild python3 with_libs
