#!/usr/bin/env bash
# scripts/check_cudnn_sdpa.sh BUILD_DIR: compiles the cuDNN SDPA path (kernels/cuda/attention_cudnn.cpp) with
# cudnn-frontend's headers, as the GPU build (scripts/cuda_build.sh) does. A build without those headers compiles
# that file to "not available", so without this check the SDPA code is compiled only when a GPU bundle is packed.
# Uses BUILD_DIR's own flags for that file; skips (exit 0, saying why) without CUDA in BUILD_DIR, cudnn.h, or the
# wheel (PyPI's nvidia-cudnn-frontend, cached in /tmp/cfe).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:?usage: scripts/check_cudnn_sdpa.sh BUILD_DIR}")
flags=$build/kernels/cuda/CMakeFiles/ferry_kernels_cuda.dir/flags.make
say() { printf 'cudnn-sdpa: %s\n' "$*" >&2; }
die() { printf 'cudnn-sdpa: error: %s\n' "$*" >&2; exit 1; }

[[ -f $flags ]] || { say "skipped: $build has no CUDA kernels (configured without nvcc or FERRY_CUDA=OFF)"; exit 0; }
if grep -q FERRY_WITH_CUDNN_SDPA "$flags"; then
  say "skipped: $build compiles cuDNN SDPA itself (FERRY_CUDNN_FRONTEND_INCLUDE is set)"
  exit 0
fi
value() { sed -n "s/^CXX_$1 = //p" "$flags"; }
read -ra cxx_flags <<<"$(value FLAGS)"
read -ra defines <<<"$(value DEFINES)"
read -ra includes <<<"$(value INCLUDES)"
defines=("${defines[@]//\\\"/\"}")  # flags.make escapes the quotes of string definitions for make

cudnn_h=""
for d in /usr/local/cuda/include /usr/include /usr/local/include; do
  [[ -f $d/cudnn.h ]] && { cudnn_h=$d; break; }
done
[[ -n $cudnn_h ]] || { say "skipped: no cudnn.h (cuDNN 9's headers)"; exit 0; }

# cudnn_frontend_headers (scripts/cuda_build.sh) unpacks the wheel into $BUILD_DIR/cudnn-frontend.
BUILD_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ferry-cfe.XXXXXX")
trap 'rm -rf "$BUILD_DIR"' EXIT
# shellcheck source=scripts/cuda_build.sh
source "$ROOT/scripts/cuda_build.sh"
cudnn_frontend_headers
[[ $CFE_VERSION != none ]] || { say "skipped: no cudnn-frontend wheel (pip download failed)"; exit 0; }

cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
say "compiling kernels/cuda/attention_cudnn.cpp with cudnn-frontend $CFE_VERSION and $cudnn_h/cudnn.h"
"${cxx:-c++}" "${cxx_flags[@]}" -Werror "${defines[@]}" -DFERRY_WITH_CUDNN_SDPA -DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING \
  -DCUDNN_FRONTEND_SKIP_JSON_LIB "${includes[@]}" -isystem "$CFE_DIR/include" -isystem "$cudnn_h" \
  -c "$ROOT/kernels/cuda/attention_cudnn.cpp" -o "$BUILD_DIR/attention_cudnn.o" ||
  die "kernels/cuda/attention_cudnn.cpp does not compile with cuDNN SDPA on (the GPU build's configuration)"
say "ok"
