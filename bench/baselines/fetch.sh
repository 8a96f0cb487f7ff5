#!/usr/bin/env bash
# Downloads the pinned baselines and their missing dependencies (requirements.txt, build-requirements.txt)
# from PyPI into bench/baselines/wheels/, and what Gemini's booster needs besides into wheels-gemini/ (both
# ignored by git), for the GPU machine, which has no package index. Run here; carry the two folders in two
# device calls (64 MiB each), then run install.sh there.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p wheels wheels-gemini
# --no-deps: torch, transformers and the CUDA libraries are the GPU machine's own; every other
# dependency is listed. Binary wheels for the GPU machine's Python (FERRY_BASELINE_PYTHON_VERSION, e.g. 311).
py=${FERRY_BASELINE_PYTHON_VERSION:-$(python3 -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')}
fetch() {  # fetch REQUIREMENTS DIR
  pip download --no-deps -d "$2" -r "$1" --python-version "$py" --platform manylinux2014_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_28_x86_64 \
      --platform any --only-binary=:all: --no-binary deepspeed,colossalai,hjson,contexttimer 2>&1 | tail -1
}
fetch requirements.txt wheels
fetch build-requirements.txt wheels
fetch gemini-requirements.txt wheels-gemini
du -sh wheels wheels-gemini
