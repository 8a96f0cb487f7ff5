#!/usr/bin/env bash
# bench/baselines/build_llmc.sh LLMC (run HERE): builds llm.c's train_gpt2cu for the GPU machine (sm_90, bf16,
# cuDNN attention, one GPU, no MPI) into bench/baselines/llmc-bin/, where scripts/gpu/pack.sh takes it into the
# bundle; bench/baselines/llmc_step.py runs it beside Ferry's step (issue 31, item 4). LLMC: a checkout of
# github.com/karpathy/llm.c, or its bare git directory (the `fetch` tool's snapshot); built at its HEAD.
#
#   bench/baselines/build_llmc.sh /work/.mirror/karpathy+llm.c/repo
#
# As its Makefile builds it (USE_CUDNN=1, -O3, --use_fast_math), with three changes that this machine's CUDA 13 and
# cudnn-frontend 1.3x need, each written into llmc-bin/BUILD.md: cudaMemAdvise takes a cudaMemLocation in CUDA 13
# (llm.c passes cudaCpuDeviceId, for its out-of-memory fallback only); cudnn-frontend loads cuDNN and NVRTC at run
# time (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, as Ferry builds it: its newer headers call NVRTC, which the GPU
# machine may not have on the loader's path), through a handle defined here; and no NVML (no nvml.h here: llm.c then
# leaves its GPU-utilisation printout out).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$ROOT/bench/baselines/llmc-bin
src=${1:?usage: build_llmc.sh LLMC_CHECKOUT_OR_GIT_DIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
say() { printf 'build_llmc: %s\n' "$*" >&2; }

if [[ -d $src/.git ]]; then git -C "$src" archive HEAD | tar -x -C "$work"; commit=$(git -C "$src" rev-parse HEAD)
else git --git-dir="$src" archive HEAD | tar -x -C "$work"; commit=$(git --git-dir="$src" rev-parse HEAD); fi

# cudnn-frontend's headers: the wheel scripts/cuda_build.sh uses (/tmp/cfe, else PyPI's).
whl=$(ls /tmp/cfe/nvidia_cudnn_frontend-*.whl 2>/dev/null | head -1 || true)
if [[ -z $whl ]]; then
  mkdir -p /tmp/cfe && python3 -m pip download -q --no-deps --only-binary=:all: -d /tmp/cfe nvidia-cudnn-frontend >&2
  whl=$(ls /tmp/cfe/nvidia_cudnn_frontend-*.whl | head -1)
fi
mkdir -p "$work/cudnn-frontend"
python3 -m zipfile -e "$whl" "$work/cudnn-frontend" >/dev/null

cd "$work"
grep -q 'cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)' llmc/cuda_utils.cuh ||
  say "llmc/cuda_utils.cuh no longer passes cudaCpuDeviceId to cudaMemAdvise: the CUDA 13 change is not applied"
sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
  llmc/cuda_utils.cuh
cat >cudnn_handle.cpp <<'EOF'
// cudnn-frontend with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING calls cuDNN through this handle; llm.c's own cuDNN
// calls link libcudnn, so dlopen returns the library the loader has mapped already.
#include <dlfcn.h>
namespace cudnn_frontend {
void* cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
}
EOF
flags=(--threads=0 --use_fast_math -std=c++17 -O3 "--generate-code=arch=compute_90,code=[compute_90,sm_90]" -DENABLE_CUDNN
       -DENABLE_BF16 -DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING -Icudnn-frontend/include)
say "compiling llm.c $commit's cuDNN attention (about 3 minutes on 2 cores)"
nvcc "${flags[@]}" -c llmc/cudnn_att.cpp -o cudnn_att.o
say "compiling train_gpt2.cu"
nvcc "${flags[@]}" train_gpt2.cu cudnn_att.o cudnn_handle.cpp -lcublas -lcublasLt -lcudnn -ldl -o train_gpt2cu

mkdir -p "$OUT"
strip --strip-unneeded -o "$OUT/train_gpt2cu" train_gpt2cu
{
  echo "# llm.c's train_gpt2cu, built for the GPU queue"
  echo
  echo "- llm.c commit: $commit (github.com/karpathy/llm.c)"
  echo "- built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release; echo "$PRETTY_NAME"), $(nvcc --version | tail -1)"
  echo "- cudnn-frontend: $(basename "$whl" | cut -d- -f2)"
  echo "- nvcc ${flags[*]}"
  echo "- changes to llm.c: cudaMemAdvise(..., cudaMemLocation{cudaMemLocationTypeHost, 0}) for CUDA 13; cudnn-frontend"
  echo "  loaded at run time through cudnn_frontend::cudnn_dlhandle; no NVML"
  echo "- links: $(ldd "$OUT/train_gpt2cu" | awk '/=>/ {print $1}' | paste -sd' ')"
} >"$OUT/BUILD.md"
say "wrote $OUT/train_gpt2cu ($(du -h "$OUT/train_gpt2cu" | cut -f1)) and $OUT/BUILD.md"
