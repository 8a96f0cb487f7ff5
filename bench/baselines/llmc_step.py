#!/usr/bin/env python3
"""llm.c's GPT-2 training step (train_gpt2cu: bf16, cuDNN attention, fp32 master weights, fused kernels), the other
reference Ferry's GPU step is measured against (issue 31, item 4), beside PyTorch's (torch_step.py).

Writes llm.c's token shards (its header of 256 int32: magic 20240520, version 1, the count; then uint16 tokens)
of uniformly random ids, runs `train_gpt2cu -e d12` (a fresh GPT-2 124M, random initialisation: only speed is
measured) once per recompute setting given, parses its `step N/M | ... | X ms | ...` lines and reports the median
step after the warm-up. MFU uses Ferry's count (bench/mfu.h: 6*N*tokens + 12*L*C*T*tokens, N the real
vocabulary's parameters) and the peak given (H100/H200 SXM bf16 dense: 989 TFLOP/s), not llm.c's own figure.
Appends one JSON line per run to --json.

    python3 bench/baselines/llmc_step.py --binary gpu_bundle/bin/train_gpt2cu --json step-gpt2-124m-h100-llmc.jsonl
    python3 bench/baselines/llmc_step.py --parse-only LOG   # the step times of a saved train_gpt2cu log
"""
import argparse
import json
import os
import random
import re
import statistics
import struct
import subprocess
import sys
import tempfile
from datetime import datetime, timezone

STEP_LINE = re.compile(r"^step\s+(\d+)/(\d+) \| loss ([-0-9.naif]+) .*\| ([0-9.]+) ms \|")
GPT2_124M = {"vocab": 50257, "n_layer": 12, "n_embd": 768, "n_head": 12, "max_seq": 1024}


def write_shard(path, n_tokens, vocab, seed):
    """One shard in llm.c's format (llmc/dataloader.h): 256 int32 of header, then the tokens as uint16."""
    rng = random.Random(seed)
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, n_tokens
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{n_tokens}H", *(rng.randrange(vocab) for _ in range(n_tokens))))


def parse_steps(text):
    """[(step, loss, ms)] of the training step lines, in order."""
    steps = []
    for line in text.splitlines():
        m = STEP_LINE.match(line.strip())
        if m:
            steps.append((int(m.group(1)), float(m.group(3)), float(m.group(4))))
    return steps


def model_flops(batch, seq, shape=GPT2_124M):
    """Ferry's count (bench/mfu.h) for GPT-2 with a tied head: N parameters of the real vocabulary."""
    V, L, C = shape["vocab"], shape["n_layer"], shape["n_embd"]
    N = V * C + shape["max_seq"] * C + L * (12 * C * C + 13 * C) + 2 * C
    tokens = batch * seq
    return N, 6 * N * tokens + 12 * L * C * seq * tokens


def run(a, recompute, data_dir):
    cmd = [a.binary, "-e", "d12", "-i", os.path.join(data_dir, "train_*.bin"), "-j", os.path.join(data_dir, "val_*.bin"),
           "-b", str(a.batch), "-t", str(a.seq), "-x", str(a.warmup + a.steps), "-r", str(recompute),
           "-v", "1000000", "-m", "1", "-s", "0", "-h", "0", "-n", "0", "-o", os.path.join(data_dir, "log")]
    proc = subprocess.run(cmd, cwd=data_dir, capture_output=True, text=True, timeout=a.timeout)
    output = proc.stdout + proc.stderr
    if a.log:
        with open(a.log, "a") as f:
            f.write(f"$ {' '.join(cmd)}\n{output}\n")
    steps = parse_steps(output)
    if proc.returncode != 0 or len(steps) < a.warmup + 1:
        tail = "\n".join(output.splitlines()[-15:])
        raise RuntimeError(f"train_gpt2cu -r {recompute} exited {proc.returncode} after {len(steps)} steps:\n{tail}")
    return cmd, steps, output


def result_of(a, recompute, cmd, steps, output):
    times = [ms for _, _, ms in steps[a.warmup:]]
    step_ms = statistics.median(times)
    N, flops = model_flops(a.batch, a.seq)
    device = next((l.split("|")[2].strip() for l in output.splitlines() if "| device " in l), None)
    return {
        "system": f"llm.c-r{recompute}",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "command": " ".join(cmd),
        "device": device,
        "settings": {"recompute": recompute, "precision": "bf16, fp32 master weights", "attention": "cuDNN",
                     "initialisation": "-e d12 (random)", "data": "uniformly random tokens"},
        "batch": a.batch, "seq": a.seq, "params": N, "steps": len(times), "warmup": a.warmup,
        "step_ms_median": step_ms, "step_ms": times,
        "tokens_per_s": a.batch * a.seq / (step_ms / 1e3), "model_tflops": flops / (step_ms / 1e3) / 1e12,
        "mfu": flops / (step_ms / 1e3) / (a.peak_tflops * 1e12),
        "last_loss": steps[-1][1],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", help="train_gpt2cu (bench/baselines/build_llmc.sh builds it)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20, help="timed steps (the median is reported)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--recompute", type=int, nargs="+", default=[1, 0],
                    help="llm.c's -r settings to run: 1 (its default: GELU recomputed in the backward), 0 (none)")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="the GPU's bf16 dense peak")
    ap.add_argument("--timeout", type=int, default=150, help="seconds per run")
    ap.add_argument("--json", help="append each run's result as one JSON line to this file")
    ap.add_argument("--log", help="append train_gpt2cu's output to this file")
    ap.add_argument("--parse-only", metavar="LOG", help="print the step lines parsed from a saved log, run nothing")
    a = ap.parse_args()
    if a.parse_only:
        print(json.dumps(parse_steps(open(a.parse_only).read())))
        return
    if not a.binary or not os.access(a.binary, os.X_OK):
        sys.exit(f"llmc_step: no runnable train_gpt2cu at {a.binary!r}: build it with bench/baselines/build_llmc.sh")
    failed = 0
    with tempfile.TemporaryDirectory() as data_dir:
        tokens = a.batch * a.seq
        write_shard(os.path.join(data_dir, "train_000000.bin"), tokens * (a.warmup + a.steps) + 1, GPT2_124M["vocab"], 1)
        write_shard(os.path.join(data_dir, "val_000000.bin"), tokens + 1, GPT2_124M["vocab"], 2)
        for recompute in a.recompute:
            try:
                cmd, steps, output = run(a, recompute, data_dir)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"llmc_step: {e}", file=sys.stderr)
                failed += 1
                continue
            result = result_of(a, recompute, cmd, steps, output)
            print(json.dumps(result))
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps(result) + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
