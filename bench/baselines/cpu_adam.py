#!/usr/bin/env python3
"""DeepSpeedCPUAdam's rate over N parameters on every core, beside `ferry-bench adam`: one AdamW step over an
fp32 parameter tensor with fp32 gradients and moments (what ZeRO-Offload's CPU step does; its bf16 casts run on
the GPU), timed --reps times after one untimed step; Gparam/s from the median, and the bytes it moves (read
parameter, gradient, m, v; write parameter, m, v: 28 a parameter) per second.

    python3 bench/baselines/cpu_adam.py --params 1560000000 --json cpu_adam-deepspeed-h100.json --markdown cpu_adam-deepspeed-h100.md
    python3 bench/baselines/cpu_adam.py --params 10000000 --reps 3    # a short check anywhere
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

BYTES_PER_PARAM = 28  # read p, g, m, v (4 fp32 streams), write p, m, v (3)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--params", type=float, default=1.56e9, help="parameters in the one tensor (GPT-2 1.5B: 1.56e9)")
    p.add_argument("--reps", type=int, default=5, help="timed steps (the median is reported)")
    p.add_argument("--json", help="write the result here")
    p.add_argument("--markdown", help="write a one-row table here")
    return p.parse_args()


def measure(n, reps):
    import torch
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    torch.manual_seed(0)
    param = torch.nn.Parameter(torch.empty(n, dtype=torch.float32).uniform_(-0.02, 0.02))
    param.grad = torch.empty(n, dtype=torch.float32).uniform_(-1e-3, 1e-3)
    opt = DeepSpeedCPUAdam([param], lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, adamw_mode=True)
    opt.step()  # untimed: allocates m and v and touches every page
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    return times


def main():
    threads = common.use_every_core()
    a = parse_args()
    import torch

    torch.set_num_threads(threads)
    try:
        import deepspeed
        from deepspeed.ops.op_builder import CPUAdamBuilder
    except Exception as e:  # noqa: BLE001
        sys.exit(f"cpu_adam: deepspeed not importable ({type(e).__name__}: {e}); install the carried wheels (scripts/gpu/env.sh)")
    n = int(a.params)
    builder = CPUAdamBuilder()
    times = measure(n, a.reps)
    median = statistics.median(times)
    result = {"benchmark": "deepspeed_cpu_adam", "date": datetime.date.today().isoformat(), "command": " ".join(sys.argv),
              "params": n, "reps": a.reps, "threads": threads, "step_s": times, "median_s": median,
              "gparams_per_s": n / median / 1e9, "gb_per_s": n * BYTES_PER_PARAM / median / 1e9,
              "deepspeed": deepspeed.__version__, "simd_width": builder.simd_width(), "cxx_args": builder.cxx_args(),
              "cpu": common.cpu_name(), "cpu_cores": os.cpu_count(), "torch": torch.__version__}
    print(json.dumps(result), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(f"# DeepSpeedCPUAdam on {result['cpu']} ({result['date']})\n\nCommand: `{result['command']}`\n\n"
                    "| implementation | params | threads | SIMD | median step s | Gparam/s | GB/s (28 B/param) |\n|---|---|---|---|---|---|---|\n"
                    f"| DeepSpeed {result['deepspeed']} DeepSpeedCPUAdam (AdamW, fp32) | {n / 1e9:.2f}B | {threads} | "
                    f"{result['simd_width']} | {median:.3f} | {result['gparams_per_s']:.2f} | {result['gb_per_s']:.1f} |\n")


if __name__ == "__main__":
    main()
