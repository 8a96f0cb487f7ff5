#!/usr/bin/env bash
# Installs the baselines on the GPU machine from the carried bench/baselines/wheels/ (and wheels-gemini/
# when carried too), without an index, into the user site. DeepSpeed builds its CPU Adam and other ops on
# first use (ninja + nvcc, already there).
set -euo pipefail
cd "$(dirname "$0")"
[ -d wheels ] || { echo "bench/baselines/wheels is missing: run bench/baselines/fetch.sh on a machine with PyPI and carry it"; exit 1; }
links=(--find-links wheels)
[ -d wheels-gemini ] && links+=(--find-links wheels-gemini)
pip install --user --no-index "${links[@]}" --no-deps -r build-requirements.txt 2>&1 | tail -1
# no build isolation: the sdists (deepspeed, hjson, ...) build with the setuptools just installed, offline
pip install --user --no-index "${links[@]}" --no-deps --no-build-isolation -r requirements.txt 2>&1 | tail -1
[ -d wheels-gemini ] && pip install --user --no-index "${links[@]}" --no-deps -r gemini-requirements.txt 2>&1 | tail -1
python3 - <<'PY'
import importlib
for name in ("deepspeed", "colossalai.booster.plugin", "matplotlib"):
    try:
        m = importlib.import_module(name)
        print(f"{name} {getattr(m, '__version__', '')}: importable")
    except Exception as e:  # noqa: BLE001 - report every reason a baseline cannot run
        print(f"{name}: not importable ({type(e).__name__}: {e})")
PY
