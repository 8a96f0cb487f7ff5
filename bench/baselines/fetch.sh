#!/usr/bin/env bash
# Downloads the pinned baselines from PyPI for the GPU machine's Python (FERRY_BASELINE_PYTHON_VERSION, default
# 312), which has no package index: DeepSpeed (requirements.txt) into bench/baselines/wheels-gpu/ and Colossal-AI
# (gemini-requirements.txt) into wheels-gemini/, both ignored by git; DeepSpeed 0.19.6 for the ZenFlow rows
# (zenflow-requirements.txt) into wheels-gpu/zenflow/. Carry them with the bundle:
# run(carry=["gpu_bundle", "bench/baselines/wheels-gpu", "bench/baselines/wheels-gemini"]), under the device
# tool's 64 MiB together.
set -euo pipefail
cd "$(dirname "$0")"
# --no-deps: torch, transformers and the CUDA libraries are the GPU machine's own; every other dependency is
# listed. DeepSpeed comes as its source distribution (pip builds it there, without ops: they JIT-build on first
# use for that machine's torch and CPU).
py=${FERRY_BASELINE_PYTHON_VERSION:-312}
fetch() {  # fetch REQUIREMENTS DIR
  mkdir -p "$2"
  pip download --no-deps -d "$2" -r "$1" --python-version "$py" --platform manylinux2014_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_28_x86_64 \
      --platform any --only-binary=:all: --no-binary deepspeed,colossalai,contexttimer 2>&1 | tail -1
}
fetch requirements.txt wheels-gpu
fetch zenflow-requirements.txt wheels-gpu/zenflow
fetch gemini-requirements.txt wheels-gemini
du -sh wheels-gpu wheels-gemini
