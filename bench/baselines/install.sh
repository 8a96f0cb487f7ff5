#!/usr/bin/env bash
# Installs the baselines on a GPU machine without an index from the carried bench/baselines/wheels-gpu/ (and
# wheels-gemini/ when carried too) into the user site, for bench/compare.sh; the GPU queue installs into a
# folder of its own instead (scripts/gpu/queue_items.sh: baselines_ready). DeepSpeed builds its CPU Adam on
# first use (ninja, already there), for that machine's torch and CPU.
set -euo pipefail
cd "$(dirname "$0")"
[ -d wheels-gpu ] || { echo "bench/baselines/wheels-gpu is missing: run bench/baselines/fetch.sh on a machine with PyPI and carry it"; exit 1; }
wheels=(wheels-gpu/*.*)  # the files: wheels-gpu/zenflow/ holds the DeepSpeed ZenFlow runs need
[ -d wheels-gemini ] && wheels+=(wheels-gemini/*)
# no build isolation: the source distributions (deepspeed, colossalai) build with the machine's setuptools, offline
pip install --user --no-index --no-deps --no-build-isolation "${wheels[@]}" 2>&1 | tail -1
python3 - <<'PY'
import importlib
for name in ("deepspeed", "colossalai.booster.plugin"):
    try:
        m = importlib.import_module(name)
        print(f"{name} {getattr(m, '__version__', '')}: importable")
    except Exception as e:  # noqa: BLE001 - report every reason a baseline cannot run
        print(f"{name}: not importable ({type(e).__name__}: {e})")
PY
