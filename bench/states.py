#!/usr/bin/env python3
"""Exact against compact optimizer state (optim.state) on one experiment: trains it twice with `ferry train`,
once per state, and writes <out>.json (both runs' validation and training loss curves, final validation
losses, their relative difference, wall times, machine, date, command) and <out>.md (the same as tables).

    python3 bench/states.py --config configs/gpt-tiny.yaml --out bench/results/states-gpt-tiny [--set key=value ...]
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def train(ferry, config, state, sets, scratch):
    """One run of `ferry train` with optim.state=<state>; its metrics lines and wall time."""
    metrics = os.path.join(scratch, f"metrics-{state}.jsonl")
    command = [ferry, "train", "--config", config, "--metrics", metrics, "--no-checkpoints", "--set", f"optim.state={state}"]
    for s in sets:
        command += ["--set", s]
    start = time.monotonic()
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"states.py: {' '.join(command)} failed:\n{done.stdout[-4000:]}")
    with open(metrics) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return lines, wall


def curves(lines):
    val = [[l["step"], l["val_loss"]] for l in lines if "val_loss" in l]
    loss = [[l["step"], l["loss"]] for l in lines if "loss" in l]
    return val, loss


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True, help="path without extension: <out>.json and <out>.md")
    ap.add_argument("--ferry", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "ferry"))
    ap.add_argument("--set", action="append", default=[], dest="sets", help="a config override for both runs (repeatable)")
    args = ap.parse_args()
    command = "python3 bench/states.py " + " ".join(sys.argv[1:])
    runs = {}
    with tempfile.TemporaryDirectory() as scratch:
        for state in ("exact", "compact"):
            print(f"states.py: training {args.config} with optim.state={state}", file=sys.stderr)
            lines, wall = train(args.ferry, args.config, state, args.sets, scratch)
            val, loss = curves(lines)
            runs[state] = {"state": state, "val_loss": val, "train_loss": loss, "final_val_loss": val[-1][1], "wall_s": wall}
    exact, compact = runs["exact"]["final_val_loss"], runs["compact"]["final_val_loss"]
    rel = (compact - exact) / exact
    about = {"machine": f"{cpu_model()}, {os.cpu_count()} hardware threads",
             "date": datetime.date.today().isoformat(), "command": command}
    result = {"benchmark": "states", "config": args.config, "sets": args.sets, **about,
              "runs": [runs["exact"], runs["compact"]], "final_val_loss_relative_difference": rel}
    with open(args.out + ".json", "w") as f:
        f.write(json.dumps(result, indent=2) + "\n")
    steps = [s for s, _ in runs["exact"]["val_loss"]]
    compact_val = dict((s, v) for s, v in runs["compact"]["val_loss"])
    rows = "\n".join(f"| {s} | {v:.4f} | {compact_val.get(s, float('nan')):.4f} |" for s, v in runs["exact"]["val_loss"])
    md = (f"# Exact and compact optimizer state: {os.path.basename(args.config)}\n\n"
          f"Machine: {about['machine']}. Date: {about['date']}.\n\nCommand: `{command}`\n\n"
          "Each run is `ferry train --config CONFIG --set optim.state=STATE` (exact: fp32 master, m and v; compact: bf16 "
          "weights with stochastic rounding, bf16 m and v), with the same seed and data.\n\n"
          "| step | exact val loss | compact val loss |\n|---|---|---|\n" + rows + "\n\n"
          f"Final validation loss: exact {exact:.4f}, compact {compact:.4f}: compact is {100 * rel:+.2f}% of exact. "
          f"Wall time: exact {runs['exact']['wall_s']:.0f} s, compact {runs['compact']['wall_s']:.0f} s "
          f"({len(steps)} evaluations).\n")
    with open(args.out + ".md", "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
