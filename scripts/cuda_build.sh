# scripts/cuda_build.sh (sourced by scripts/package.sh and scripts/gpu/pack.sh, not run): the Release build for
# sm_90 (H100/H200) that both ship, with cuDNN SDPA where cudnn-frontend's headers can be had.
# The caller sets ROOT, BUILD_DIR and JOBS and defines say() and die() (messages to stderr), then calls
#   cuda_build TARGET...    configures BUILD_DIR when it has no CMakeCache.txt, checks it is a Release CUDA build
#                           for sm_90, and builds the targets. CUDA_BUILD_ADD_SDPA=1 also gives an existing
#                           build cudnn-frontend's headers (a reconfigure that recompiles the CUDA kernels).
#   check_sm90 BINARY...    fails unless each holds sm_90 code (cuobjdump); sets SM90 to what was checked.
# and reads CFE_VERSION (cudnn-frontend's version, or none) and cache NAME (a value of BUILD_DIR's CMake cache).

# shellcheck shell=bash disable=SC2034  # it sets variables its caller reads

cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD_DIR/CMakeCache.txt"; }

# cudnn-frontend's headers (header-only): the build compiles cuDNN SDPA with them, and a rebuild on a GPU
# machine needs them. A wheel from /tmp/cfe, else PyPI's; without one, attention runs the flash kernel only.
# Sets CFE_VERSION, CFE_DIR and SDPA_ARGS.
cudnn_frontend_headers() {
  local whl
  whl=$(ls /tmp/cfe/nvidia_cudnn_frontend-*.whl 2>/dev/null | head -1 || true)
  if [[ -z $whl ]]; then
    mkdir -p /tmp/cfe
    python3 -m pip download -q --no-deps --only-binary=:all: -d /tmp/cfe nvidia-cudnn-frontend >&2 ||
      say "pip download nvidia-cudnn-frontend failed: no cuDNN SDPA in this build (attention: Ferry's flash kernel)"
    whl=$(ls /tmp/cfe/nvidia_cudnn_frontend-*.whl 2>/dev/null | head -1 || true)
  fi
  CFE_VERSION=none
  CFE_DIR=$BUILD_DIR/cudnn-frontend
  SDPA_ARGS=()
  [[ -n $whl ]] || return 0
  rm -rf "$CFE_DIR" && mkdir -p "$CFE_DIR"
  python3 -m zipfile -e "$whl" "$CFE_DIR" >/dev/null
  [[ -f $CFE_DIR/include/cudnn_frontend.h ]] || die "$whl holds no include/cudnn_frontend.h"
  CFE_VERSION=$(basename "$whl" | cut -d- -f2)
  SDPA_ARGS=(-DFERRY_CUDNN_FRONTEND_INCLUDE="$CFE_DIR/include")
}

cuda_build() {
  local launcher=() generator=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  command -v ninja >/dev/null && generator=(-G Ninja)
  if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
    cudnn_frontend_headers
    cmake -S "$ROOT" -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DFERRY_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 "${launcher[@]}" "${SDPA_ARGS[@]}" >&2
  elif [[ ${CUDA_BUILD_ADD_SDPA:-0} == 1 ]]; then
    cudnn_frontend_headers
    [[ ${#SDPA_ARGS[@]} -eq 0 ]] || cmake -S "$ROOT" -B "$BUILD_DIR" "${SDPA_ARGS[@]}" >&2
  else
    local include
    include=$(cache FERRY_CUDNN_FRONTEND_INCLUDE)
    CFE_VERSION=none
    [[ -z $include ]] || CFE_VERSION="headers in $include"
  fi
  [[ $(cache CMAKE_BUILD_TYPE) == Release ]] ||
    die "$BUILD_DIR is a $(cache CMAKE_BUILD_TYPE) build; a release needs Release (BUILD_DIR=another folder)"
  [[ $(cache CMAKE_CUDA_COMPILER) != "" && $(cache FERRY_CUDA) =~ ^(ON|AUTO)$ ]] ||
    die "$BUILD_DIR has no CUDA compiler or FERRY_CUDA=$(cache FERRY_CUDA): configure it with -DFERRY_CUDA=ON where nvcc exists"
  [[ $(cache CMAKE_CUDA_ARCHITECTURES) == *90* ]] ||
    die "$BUILD_DIR builds CUDA for '$(cache CMAKE_CUDA_ARCHITECTURES)', not 90 (H100/H200): reconfigure with -DCMAKE_CUDA_ARCHITECTURES=90"
  say "building $* in $BUILD_DIR ($JOBS jobs)"
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "$@" >&2
}

# The device code must be Hopper's own (sm_90 cubins), not PTX for the driver to compile. cuobjdump: $CUOBJDUMP,
# the toolkit's, else the one Triton's wheel carries (or the wheel nvidia-cuda-cuobjdump's nvidia/cu13/bin/cuobjdump,
# given as CUOBJDUMP); without one the check is skipped and SM90 says so.
check_sm90() {
  local cuobjdump
  cuobjdump=$(command -v "${CUOBJDUMP:-cuobjdump}" || python3 -c 'import os, triton; print(os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump"))' 2>/dev/null || true)
  SM90=unchecked
  [[ -x $cuobjdump ]] || return 0
  for b in "$@"; do
    "$cuobjdump" --list-elf "$b" | grep sm_90 >/dev/null || die "$b holds no sm_90 code ($cuobjdump --list-elf)"
  done
  SM90="yes (cuobjdump --list-elf: $(for b in "$@"; do basename "$b"; done | paste -sd, | sed 's/,/, /g'))"
}
