#!/usr/bin/env bash
# scripts/package.sh: the release tarball for GPU machines, ferry-<version>-linux-x86_64-cuda<major>.tar.xz, which
# runs where only glibc 2.36+ (Debian 12, Ubuntu 24.04) and, for the GPU, the NVIDIA driver are installed.
#
#   scripts/package.sh                    # build-gpu/ (shared with scripts/gpu/pack.sh), configured if missing
#   BUILD_DIR=build JOBS=2 XZ_LEVEL=0 OUT_DIR=/tmp/release scripts/package.sh
#   STAGE_ONLY=1 scripts/package.sh       # the checked tree only, not packed
#
# It builds ferry and ferry-bench (Release, CUDA for sm_90, cuDNN SDPA where cudnn-frontend's headers can be
# had: scripts/cuda_build.sh), stages ferry-<version>/{bin,lib,configs,docs,share/licenses} with the binaries'
# RUNPATH set to $ORIGIN/../lib, the libraries they load that such a machine lacks (from ldd: never the
# driver's, nor glibc's, libstdc++ or libgcc_s, which every Debian and Ubuntu has), each with its licence,
# checks that every library resolves inside the tree and that no symbol needs a newer glibc or libstdc++
# than Debian 12's, then writes INSTALL, MANIFEST.md and SHA256SUMS and packs the tree with xz.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=$(realpath -m "${BUILD_DIR:-$ROOT/build-gpu}")
OUT_DIR=$(realpath -m "${OUT_DIR:-$BUILD_DIR/release}")
JOBS=${JOBS:-2}
# Most of the bytes are cuBLASLt's kernels, stored compressed already: the 596 MB tree packs to 368 MB at -0 in
# 160 CPU-s and to 363 MB at -1 in 264 (2-core EPYC, 2026-11-27); -6 gains under 1% on that part.
XZ_LEVEL=${XZ_LEVEL:-0}
BINARIES=(ferry ferry-bench)
# What any Debian 12 or Ubuntu 24.04 has (glibc, libstdc++, libgcc_s: apt itself needs them), and what must
# come from the machine's driver: never carried.
SYSTEM_LIBS='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so'
DRIVER_LIBS='^(libcuda|libnvidia-[a-z-]*|libnvcuvid)\.so'
# Debian 12's glibc and GCC 12's libstdc++: the newest symbol versions the tree may need (read as MAX_$kind).
# shellcheck disable=SC2034
MAX_GLIBC=2.36 MAX_GLIBCXX=3.4.30 MAX_CXXABI=1.3.13

say() { printf 'package: %s\n' "$*" >&2; }
die() { printf 'package: error: %s\n' "$*" >&2; exit 1; }
for tool in patchelf:patchelf xz:xz-utils objdump:binutils strip:binutils; do
  command -v "${tool%:*}" >/dev/null || die "${tool%:*} is missing: apt-get install ${tool#*:}"
done
[[ $XZ_LEVEL =~ ^[0-9]$ ]] || die "XZ_LEVEL: '$XZ_LEVEL' is not an xz level; expected 0 to 9"

# shellcheck source=scripts/cuda_build.sh
source "$ROOT/scripts/cuda_build.sh"

# Each carried library's origin, "<what it is>\t<its licence file>": a Debian package, else the wheel whose
# dist-info lists it (a CUDA toolkit assembled from NVIDIA's PyPI wheels), else the toolkit's EULA.
origin_of() {
  local real=$1 pkg version record dist
  # dpkg knows a file under one spelling of merged /usr (/lib/... or /usr/lib/...)
  pkg=$( (dpkg-query -S "$real" || dpkg-query -S "${real#/usr}") 2>/dev/null | head -1 | cut -d: -f1 || true)
  if [[ -n $pkg ]]; then
    version=$(dpkg-query -W -f='${Version}' "$pkg")
    printf '%s %s (Debian package)\t%s\n' "$pkg" "$version" "/usr/share/doc/$pkg/copyright"
    return
  fi
  record=$(grep -l "/$(basename "$real")," "$(dirname "$real")"/../dist-info/*/RECORD 2>/dev/null | head -1 || true)
  if [[ -n $record ]]; then
    dist=$(dirname "$record")
    printf '%s %s (PyPI wheel)\t%s\n' "$(sed -n 's/^Name: //p' "$dist/METADATA")" "$(sed -n 's/^Version: //p' "$dist/METADATA")" \
      "$(ls "$dist"/licenses/* 2>/dev/null | head -1)"
    return
  fi
  printf 'CUDA toolkit %s\t%s\n' "$CUDA_VERSION" "$(ls "$(dirname "$real")"/../EULA.txt 2>/dev/null | head -1)"
}

# "soname path" for every library the binaries load, as this machine's loader resolves them.
loaded_libraries() { ldd "$@" | awk '$2 == "=>" { print $1, $3 }' | sort -u; }

# bin/: the binaries, stripped, their RUNPATH $ORIGIN/../lib.
stage_binaries() {
  mkdir -p "$STAGE/bin"
  for b in "${BINARIES[@]}"; do
    [[ -x $BUILD_DIR/$b ]] || die "no $BUILD_DIR/$b after the build"
    strip --strip-unneeded -o "$STAGE/bin/$b" "$BUILD_DIR/$b"
    patchelf --set-rpath '$ORIGIN/../lib' "$STAGE/bin/$b"
  done
  check_sm90 "${BINARIES[@]/#/$STAGE/bin/}"
}

# One library into lib/ under its soname, its licence into share/licenses/, its row (with NOTE) for the manifest.
carry_library() {
  local real soname origin licence
  real=$(readlink -f "$1")
  [[ -f $real ]] || die "library '$1' not found in $BUILD_DIR's toolkit"
  soname=$(objdump -p "$real" | awk '$1 == "SONAME" { print $2 }')
  cp "$real" "$STAGE/lib/$soname"
  IFS=$'\t' read -r origin licence < <(origin_of "$real")
  [[ -n $licence && -f $licence ]] || die "no licence file found for $soname ($origin)"
  mkdir -p "$STAGE/share/licenses/${origin%% *}"
  cp "$licence" "$STAGE/share/licenses/${origin%% *}/"
  LIB_ROWS+=("$soname"$'\t'"$origin$2")
}

# lib/: what the binaries load beyond the system's, under their sonames; a library that loads another carried
# one gets RUNPATH $ORIGIN (a RUNPATH serves only its own object's needs); licences into share/licenses.
stage_libraries() {
  mkdir -p "$STAGE/lib" "$STAGE/share/licenses"
  local soname path
  LIB_ROWS=()
  while read -r soname path; do
    [[ $path != not ]] || die "ldd: $soname not found for ${BINARIES[*]} in $BUILD_DIR"
    [[ ! $soname =~ $DRIVER_LIBS ]] || die "the binaries link $soname, the driver's: it must come from the machine (dlopen it instead)"
    [[ ! $soname =~ $SYSTEM_LIBS ]] || continue
    carry_library "$path" ""
  done < <(loaded_libraries "${BINARIES[@]/#/$BUILD_DIR/}")
  # Opened at run time, so ldd does not list them: cuBLASLt (kernels/cuda/cublaslt_library.h; the loader finds it
  # through the binaries' RUNPATH), and the CUDA runtime cudnn-frontend opens for its few calls.
  carry_library "$(cache CUDA_cublasLt_LIBRARY)" ", opened at the first GPU matmul"
  [[ $SDPA != yes ]] || carry_library "$(cache CUDA_cudart_LIBRARY)" ", for cuDNN SDPA"
  local lib
  for lib in "$STAGE"/lib/*; do
    readelf -d "$lib" | grep -q 'R\(UN\)\?PATH.*\$ORIGIN' && continue
    if readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | grep -qxFf <(ls "$STAGE/lib"); then
      patchelf --set-rpath '$ORIGIN' "$lib"
    fi
  done
}

# Every library resolves inside the tree with an empty environment, and no symbol needs more than Debian 12's
# glibc and libstdc++. Sets NEEDS (the newest versions needed, for the manifest).
check_stage() {
  local soname path bad=()
  while read -r soname path; do
    [[ $soname =~ $SYSTEM_LIBS || $(realpath -m "$path") == "$STAGE/lib/"* ]] || bad+=("$soname => $path")
  done < <(env -i PATH=/usr/bin:/bin ldd "$STAGE"/bin/* "$STAGE"/lib/* 2>/dev/null | awk '$2 == "=>" { print $1, $3 }' | sort -u)
  [[ ${#bad[@]} -eq 0 ]] || die "resolved outside $STAGE/lib (RUNPATH missing or library not carried): ${bad[*]}"
  local symbols newest limit
  symbols=$(for f in "$STAGE"/bin/* "$STAGE"/lib/*; do objdump -T "$f"; done | grep -o '\(GLIBC\|GLIBCXX\|CXXABI\)_[0-9.]*[0-9]' | sort -u)
  NEEDS=""
  for kind in GLIBC GLIBCXX CXXABI; do
    newest=$(grep "^${kind}_" <<<"$symbols" | sed "s/^${kind}_//" | sort -V | tail -1)
    limit=MAX_$kind
    [[ $(printf '%s\n%s\n' "$newest" "${!limit}" | sort -V | tail -1) == "${!limit}" ]] ||
      die "a file needs ${kind}_$newest, newer than Debian 12's ${!limit}: build the release on Debian 12 (objdump -T)"
    NEEDS+="${NEEDS:+, }${kind}_$newest"
  done
  env -i PATH=/usr/bin:/bin "$STAGE/bin/ferry" --version >/dev/null || die "$STAGE/bin/ferry --version fails with an empty environment"
}

# configs, docs, INSTALL, MANIFEST.md and SHA256SUMS.
stage_documents() {
  cp -r "$ROOT/configs" "$STAGE/configs"
  mkdir -p "$STAGE/docs"
  cp "$ROOT/README.md" "$STAGE/docs/README.md"
  [[ ! -d $ROOT/docs ]] || cp -r "$ROOT/docs/." "$STAGE/docs/"
  local attention="Ferry's own flash kernel (this build has no cuDNN SDPA)"
  [[ $SDPA == no ]] ||
    attention="cuDNN's SDPA where cuDNN 9 loads (the system's libcudnn.so.9, its libcudnn*.so.9 files copied into lib/, or FERRY_CUDNN_LIB=<file or folder>), else Ferry's own flash kernel"
  cat >"$STAGE/INSTALL" <<EOF
Ferry $VERSION for Linux x86_64 and NVIDIA GPUs (CUDA $CUDA_VERSION, built for sm_90: H100, H200).

Needs glibc 2.36 or newer (Debian 12, Ubuntu 24.04) and, to train on a GPU, the NVIDIA driver for CUDA
$CUDA_MAJOR (580 or newer). Nothing else: the libraries ferry loads are in lib/, found through the binaries'
RUNPATH (\$ORIGIN/../lib), so the folder works wherever it is unpacked (a symlink to bin/ferry works too).

  tar -xJf $NAME.tar.xz && cd $NAME
  ./bin/ferry --version
  ./bin/ferry train --config configs/gpt-tiny.yaml        # the default experiment, on the CPU
  ./bin/ferry train --config configs/gpt2-1.5b.yaml --set device=cuda --set offload.cost_model=cost_models/h100-assumed.json

Attention on the GPU: $attention.
docs/ has the manual; MANIFEST.md the build and the libraries carried (share/licenses: their licences);
sha256sum -c SHA256SUMS checks every file.
EOF
  write_manifest >"$STAGE/MANIFEST.md"
  (cd "$STAGE" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' sha256sum >SHA256SUMS)
}

write_manifest() {
  local git
  git=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
  git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || git+=" (with uncommitted changes)"
  echo "# $NAME"
  echo
  echo "\`ferry --version\` on the build machine:"
  echo
  echo '```'
  env -i PATH=/usr/bin:/bin "$STAGE/bin/ferry" --version
  echo '```'
  echo
  echo "- git: $git"
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- built on: $(. /etc/os-release; echo "$PRETTY_NAME"), $(gcc --version | head -1), nvcc $("$(cache CMAKE_CUDA_COMPILER)" --version | sed -n 's/.*, V//p')"
  echo "- build: $BUILD_DIR, $(cache CMAKE_BUILD_TYPE), CUDA architectures $(cache CMAKE_CUDA_ARCHITECTURES)"
  echo "- sm_90 code: $SM90"
  echo "- cudnn-frontend: $CFE_VERSION"
  echo "- newest symbol versions needed: $NEEDS (Debian 12: GLIBC_2.36, GLIBCXX_3.4.30; Ubuntu 24.04: GLIBC_2.39, GLIBCXX_3.4.33)"
  echo
  echo "| library (lib/) | from | bytes | sha256 |"
  echo "|---|---|---|---|"
  local row soname
  for row in "${LIB_ROWS[@]}"; do
    soname=${row%%$'\t'*}
    echo "| $soname | ${row#*$'\t'} | $(stat -c %s "$STAGE/lib/$soname") | $(sha256sum "$STAGE/lib/$soname" | cut -d' ' -f1) |"
  done
  echo
  echo "Every file's sha256: SHA256SUMS."
}

start=$SECONDS
cuda_build "${BINARIES[@]}"
version_text=$("$BUILD_DIR/ferry" --version)
VERSION=$(sed -n '1s/^ferry \([^ ]*\).*/\1/p' <<<"$version_text")
[[ -n $VERSION ]] || die "$BUILD_DIR/ferry --version printed no version"
[[ $version_text == *"CUDA: built with"* ]] || die "$BUILD_DIR/ferry is not a CUDA build ($BUILD_DIR/ferry --version)"
SDPA=no
[[ $version_text == *"attention: cuDNN SDPA"* ]] && SDPA=yes
CUDA_VERSION=$("$(cache CMAKE_CUDA_COMPILER)" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
CUDA_MAJOR=${CUDA_VERSION%%.*}
NAME=ferry-$VERSION-linux-x86_64-cuda$CUDA_MAJOR
STAGE=$OUT_DIR/$NAME
TARBALL=$OUT_DIR/$NAME.tar.xz
built=$SECONDS

rm -rf "$STAGE" "$TARBALL"
mkdir -p "$STAGE"
stage_binaries
stage_libraries
check_stage
stage_documents
staged=$SECONDS
say "staged $STAGE: $(du -sb "$STAGE" | cut -f1) bytes, ${#LIB_ROWS[@]} libraries, $((staged - built)) s"
if [[ ${STAGE_ONLY:-0} == 1 ]]; then
  echo "$STAGE"
  exit 0
fi

tar -C "$OUT_DIR" --sort=name --owner=0 --group=0 --numeric-owner -cf - "$NAME" | xz -T"$JOBS" -"$XZ_LEVEL" >"$TARBALL.tmp"
mv "$TARBALL.tmp" "$TARBALL"
(cd "$OUT_DIR" && sha256sum "$NAME.tar.xz" >"$NAME.tar.xz.sha256")
say "packed $TARBALL: $(stat -c %s "$TARBALL") bytes (xz -$XZ_LEVEL, $JOBS threads, $((SECONDS - staged)) s; build $((built - start)) s)"
echo "$TARBALL"
