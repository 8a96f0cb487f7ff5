#!/usr/bin/env bash
# run_fuzz.sh [SECONDS] [BUILD_DIR]: CI's bounded fuzzing. Builds the libFuzzer targets with clang (ASan +
# UBSan, FERRY_FUZZ=ON) in BUILD_DIR (default build-fuzz) and runs each for SECONDS (default 20) from the
# committed corpus in tests/fuzz/corpus/ (copied: libFuzzer adds what it finds to its corpus folder).
# Without clang++ it says so and exits 0. A crash, leak, timeout or sanitizer report fails it; the input
# that did it is kept in BUILD_DIR/fuzz-artifacts/ to reproduce: BUILD_DIR/tests/fuzz/TARGET FILE.
set -euo pipefail
seconds=${1:-20}
build=${2:-build-fuzz}
cd "$(dirname "$0")/../.."
if ! command -v clang++ > /dev/null; then
  echo "run_fuzz.sh: no clang++ on PATH: fuzzing skipped"
  exit 0
fi
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi

# target, then the corpus folders and files that seed it
targets=(fuzz_checkpoint_state fuzz_checkpoint fuzz_safetensors fuzz_config fuzz_token_shard fuzz_hf_folder fuzz_token_cache)
seeds() {
  case $1 in
    fuzz_checkpoint_state) echo tests/fuzz/corpus/checkpoint_state ;;
    fuzz_checkpoint) echo tests/fuzz/corpus/checkpoint ;;
    fuzz_safetensors) echo tests/fuzz/corpus/safetensors tests/data/gpt2_tiny.safetensors ;;
    fuzz_config) echo tests/fuzz/corpus/config configs/*.yaml ;;
    fuzz_token_shard) echo tests/fuzz/corpus/token_shard ;;
    fuzz_hf_folder) echo tests/fuzz/corpus/hf_folder ;;
    fuzz_token_cache) echo tests/fuzz/corpus/token_cache ;;
  esac
}

cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DFERRY_CUDA=OFF -DFERRY_FUZZ=ON -DBUILD_TESTING=OFF "${launcher[@]}" > /dev/null
cmake --build "$build" -j2 --target "${targets[@]}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$build/fuzz-artifacts"
failed=()
for target in "${targets[@]}"; do
  mkdir -p "$work/$target"
  for seed in $(seeds "$target"); do
    if [ -d "$seed" ]; then cp "$seed"/* "$work/$target/"; else cp "$seed" "$work/$target/"; fi
  done
  echo "run_fuzz.sh: $target for ${seconds} s"
  # TMPDIR: the harnesses' scratch files go where the trap removes them, whatever way a target ends
  # -timeout: one input taking this long is a hang; -rss_limit_mb: reading must not allocate what the input claims
  mkdir -p "$work/tmp"
  if ! TMPDIR="$work/tmp" "$build/tests/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -artifact_prefix="$build/fuzz-artifacts/$target-" -print_final_stats=1 "$work/$target" > "$work/$target.log" 2>&1; then
    tail -n 40 "$work/$target.log"
    failed+=("$target")
  else
    grep -E "stat::number_of_executed_units|Done" "$work/$target.log" | tr '\n' ' ' || true
    echo
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "run_fuzz.sh: FAILED: ${failed[*]} (inputs in $build/fuzz-artifacts/)"
  exit 1
fi
echo "run_fuzz.sh: every target ran ${seconds} s without a finding"
