#!/usr/bin/env bash
# scripts/gpu/pack.sh (run HERE, on the build machine): builds the GPU binaries (Release, CUDA for sm_90) and
# packs into gpu_bundle/ (ignored by git, carried to the GPU machine with `run`'s carry) what that machine
# cannot fetch: our dependencies' runtime .debs (and the -dev ones, for a rebuild there), the cudnn-frontend
# headers, the stripped binaries, tests/data, configs and a manifest. Fails if the bundle reaches 40 MB.
#
#   scripts/gpu/pack.sh                 # build-gpu/ (configured if missing), 2 jobs
#   BUILD_DIR=build JOBS=2 scripts/gpu/pack.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD_DIR=$(realpath -m "${BUILD_DIR:-$ROOT/build-gpu}")
BUNDLE=$ROOT/gpu_bundle
JOBS=${JOBS:-2}
LIMIT_BYTES=${FERRY_BUNDLE_LIMIT_BYTES:-$((40 * 1000 * 1000))}  # 40 MB, the bundle's budget in a 64 MiB carry
TARGETS=(ferry ferry-bench test_device test_engine test_kernels_cuda test_cuda_attention)
# Runtime libraries the binaries load (ldd build/ferry) that a CUDA image may lack or hold in another version
# (yaml-cpp 0.8, oneDNN 3, fmt 10 elsewhere): Debian 12's, the ones we link against. libc, libstdc++ and
# libgcc are left to the machine (any CUDA image has them, and newer). oneDNN is libdnnl2 on Debian 12.
RUNTIME_DEBS=(libdnnl2 libtbb12 libtbbmalloc2 libyaml-cpp0.7 libfmt9 ocl-icd-libopencl1 libgomp1)
# Headers and CMake configs, for the fallback rebuild on the GPU machine only (TBB's CMake config checks
# that libtbbbind exists, though nothing links it).
DEV_DEBS=(libdnnl-dev libtbb-dev libtbbbind-2-5 libyaml-cpp-dev libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev googletest ocl-icd-opencl-dev opencl-c-headers)

say() { printf 'pack: %s\n' "$*" >&2; }
die() { printf 'pack: error: %s\n' "$*" >&2; exit 1; }

# 1-2. cudnn-frontend's headers and the build: Release, CUDA on, architecture 90 (H100/H200), cuDNN SDPA where
# its headers are (an existing build gets them too), as scripts/package.sh builds a release.
# shellcheck source=scripts/cuda_build.sh
source "$ROOT/scripts/cuda_build.sh"
CUDA_BUILD_ADD_SDPA=1 cuda_build "${TARGETS[@]}"
cfe_version=$CFE_VERSION
cfe_dir=$CFE_DIR

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE"/{bin,debs,dev-debs}

# 3. The binaries, stripped (symbols are not needed there; cuda-gdb can use the build's own). Test binaries
# carry FERRY_SOURCE_DIR/FERRY_TEST_DATA as absolute paths of this checkout: the GPU side links that path to
# its copy of the repository (source_dir below).
for t in "${TARGETS[@]}"; do
  bin=$(find "$BUILD_DIR" -type f -name "$t" -perm -u+x | head -1)
  [[ -n $bin ]] || die "no binary $t under $BUILD_DIR"
  strip --strip-unneeded -o "$BUNDLE/bin/$t" "$bin"
done
check_sm90 "$BUNDLE/bin/ferry" "$BUNDLE/bin/test_device" "$BUNDLE/bin/test_kernels_cuda" "$BUNDLE/bin/test_cuda_attention"
sm90=$SM90
# llm.c's train_gpt2cu, the GPU step's other reference (bench/baselines/build_llmc.sh builds it, minutes): carried
# when built; the queue's step-124m-vs-llmc row says so where it is missing.
llmc=$ROOT/bench/baselines/llmc-bin
if [[ -x $llmc/train_gpt2cu ]]; then
  cp "$llmc/train_gpt2cu" "$BUNDLE/bin/" && cp "$llmc/BUILD.md" "$BUNDLE/llmc-BUILD.md"
  llmc_built=$(sed -n 's/^- llm.c commit: //p' "$llmc/BUILD.md")
else
  llmc_built="not built (bench/baselines/build_llmc.sh LLMC_CHECKOUT)"
fi

# The binaries travel xz-compressed (37 MB stripped, about 6 MB packed); env.sh's unpack_bundle expands them.
tar -C "$BUNDLE" -cf - bin | xz -T"$JOBS" -6 >"$BUNDLE/bin.tar.xz"
rm -rf "$BUNDLE/bin"

# 4. The .debs, by name checked first so that a renamed package says so.
download() {
  local dir=$1; shift
  for p in "$@"; do apt-cache show "$p" >/dev/null 2>&1 || die "no package '$p' here (apt-cache search for its name on $(. /etc/os-release; echo "$PRETTY_NAME"))"; done
  (cd "$dir" && apt-get download "$@" >&2) || die "apt-get download $* failed (run apt-get update?)"
}
download "$BUNDLE/debs" "${RUNTIME_DEBS[@]}"
download "$BUNDLE/dev-debs" "${DEV_DEBS[@]}"

# 5. cudnn-frontend's headers, for a rebuild there.
[[ $cfe_version == none ]] || tar -C "$cfe_dir" -czf "$BUNDLE/cudnn_frontend_include.tar.gz" include

# 6. Data and configs (the tests' and the benchmarks'), and where the binaries think the source is.
tar -C "$ROOT" -czf "$BUNDLE/data.tar.gz" tests/data configs
cache ferry_SOURCE_DIR >"$BUNDLE/source_dir"

# 7. The manifest, and the size check.
total=$(du -sb "$BUNDLE" | cut -f1)
{
  echo "# gpu_bundle manifest"
  echo
  echo "- git: $(git -C "$ROOT" rev-parse HEAD)$(git -C "$ROOT" diff --quiet HEAD -- . ':!gpu_bundle' || echo ' (with uncommitted changes)')"
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- built on: $(. /etc/os-release; echo "$PRETTY_NAME"), $(gcc --version | head -1), $(nvcc --version | tail -1)"
  echo "- build: $BUILD_DIR, $(cache CMAKE_BUILD_TYPE), CUDA architectures $(cache CMAKE_CUDA_ARCHITECTURES)"
  echo "- source dir compiled into the test binaries: $(cat "$BUNDLE/source_dir")"
  echo "- sm_90 code: $sm90"
  echo "- llm.c's train_gpt2cu: $llmc_built"
  echo "- cudnn-frontend headers: $cfe_version (cuDNN SDPA compiled in: $([[ $cfe_version == none ]] && echo no || echo yes))"
  echo "- total: $total bytes (limit $LIMIT_BYTES)"
  echo
  echo "| file | bytes |"
  echo "|---|---|"
  (cd "$BUNDLE" && find . -type f ! -name MANIFEST.md -printf '%P\t%s\n' | sort | awk -F'\t' '{printf "| %s | %s |\n", $1, $2}')
} >"$BUNDLE/MANIFEST.md"
total=$(du -sb "$BUNDLE" | cut -f1)
((total < LIMIT_BYTES)) || die "gpu_bundle is $total bytes, over the $LIMIT_BYTES limit: see $BUNDLE/MANIFEST.md"
say "gpu_bundle: $total bytes ($(du -sh "$BUNDLE" | cut -f1)); carry it: run(carry=[\"gpu_bundle\"], command=\"bash scripts/gpu/contact.sh\")"
