#!/usr/bin/env python3
"""Checks, without a GPU, that every baseline runner builds the same model as Ferry: for each shape, the
Hugging Face model's parameter count (on the meta device) against `ferry plan --json`'s. Run after
building Ferry:  python3 bench/baselines/check_shapes.py [--ferry build/ferry]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ROOT = os.path.join(common.HERE, "..", "..")


def ferry_params(ferry, name, shape):
    kind, n_layer, n_embd, n_head, vocab, seq_len = shape
    config = os.path.join(ROOT, "configs", name + ".yaml")
    overrides = []
    if not os.path.exists(config):  # a shape without its own config: the family's, reshaped
        config = os.path.join(ROOT, "configs", "gpt2-124m.yaml" if kind == "gpt2" else "bert-base.yaml")
        overrides = [f"model.n_layer={n_layer}", f"model.n_embd={n_embd}", f"model.n_head={n_head}",
                     f"model.vocab_size={vocab}", f"model.seq_len={seq_len}"]
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [ferry, "plan", "--config", config, "--budget", "80GiB", "--policy", "resident", "--json", out.name,
               "--set", "offload.cost_model=cost_models/h100-assumed.json", "--set", "train.batch_size=1",
               "--set", "offload.overlap=backward"]  # resident updates on the device: no CPU AdamW to overlap
        for o in overrides:
            cmd += ["--set", o]
        subprocess.run(cmd, check=False, capture_output=True, text=True)
        return json.load(open(out.name))["params"]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--ferry", default=os.path.join(ROOT, "build", "ferry"))
    a = p.parse_args()
    bad = 0
    for name, shape in common.MODELS.items():
        args = argparse.Namespace(kind=shape[0], n_layer=shape[1], n_embd=shape[2], n_head=shape[3], vocab=shape[4],
                                  seq_len=shape[5])
        hf = common.parameter_count(common.build_model(args, device="meta"))
        ours = ferry_params(a.ferry, name, shape)
        ok = hf == ours
        bad += not ok
        print(f"{name:12s} Hugging Face {hf:>14,d}  Ferry {ours:>14,d}  {'same' if ok else 'DIFFERENT'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
