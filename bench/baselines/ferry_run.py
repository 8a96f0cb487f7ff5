#!/usr/bin/env python3
"""Ferry, run like the baselines: `ferry train` on a shape's config at the budget with one policy, the same
learning-rate schedule, seed and (with --init-from, as model.init_from) starting weights as the baselines'
flags give them, and the same result line (median step after warm-up, tokens/s, TFLOP/s, peak device bytes,
every step's time and loss).

    python3 bench/baselines/ferry_run.py --model gpt2-1.5b --policy greedy --budget 16GiB --json results.jsonl
    python3 bench/baselines/ferry_run.py --model gpt2-1.5b --policy greedy --batch 4 --warmup 1 --from-metrics train.jsonl
        # the same line from an earlier `ferry train --metrics` run of that shape (scripts/gpu/probe.sh's)
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ROOT = os.path.join(common.HERE, "..", "..")


OPTIONS = [
    (("--policy",), {"choices": ["resident", "zero-offload", "chunk-lru", "greedy"], "default": "greedy"}),
    (("--overlap",), {"choices": ["backward", "delayed", "pipelined"], "default": "backward",
                      "help": "delayed is approximate (the update a step late); backward and pipelined are exact"}),
    (("--ferry",), {"default": os.path.join(ROOT, "build", "ferry")}),
    (("--cost-model",), {"default": None,
                         "help": "offload.cost_model for a cuda run (relative to configs/; its links and CPU AdamW are "
                                 "measured at start-up); default: none, the whole model measured at start-up as "
                                 "`ferry train` does on a GPU (the H200 rows of 2026-11-28 took the H100's assumed "
                                 "device AdamW rate from this option's old default)"}),
    (("--from-metrics",), {"help": "reduce this `ferry train --metrics` file of the shape instead of running ferry"}),
]


def config_and_sets(a):
    """The shape's config (or its family's, reshaped) and the --set overrides that make the run the baselines'."""
    kind, _, n_embd, n_head, vocab, seq_len = common.MODELS[a.model]
    if a.seq != seq_len:
        sys.exit(f"ferry_run: Ferry trains the shape's full sequence ({seq_len} tokens); drop --seq {a.seq}")
    config = os.path.join(ROOT, "configs", a.model + ".yaml")
    if not os.path.exists(config):
        config = os.path.join(ROOT, "configs", "gpt2-124m.yaml" if kind == "gpt2" else "bert-base.yaml")
    sets = {"model.kind": kind, "model.n_layer": a.n_layer, "model.n_embd": n_embd, "model.n_head": n_head,
            "model.vocab_size": vocab, "model.seq_len": seq_len, "train.batch_size": a.batch, "train.steps": a.steps,
            "train.seed": a.seed, "train.eval_batches": 1, "optim.lr": a.lr, "optim.weight_decay": a.weight_decay,
            "optim.grad_clip": a.grad_clip, "optim.warmup_steps": a.lr_warmup_steps, "optim.schedule": a.lr_schedule,
            "optim.min_lr": a.min_lr, "offload.policy": a.policy, "offload.overlap": a.overlap,
            "offload.gpu_budget": a.budget_bytes, "device": a.device,
            "train.activation_checkpointing": "true" if a.activation_checkpointing else "auto"}
    if a.init_from:
        sets["model.init_from"] = os.path.abspath(a.init_from)
    if a.device == "cuda" and a.cost_model:
        sets["offload.cost_model"] = a.cost_model
    return config, sets


def run_ferry(a):
    """`ferry train`'s process and its metrics lines with a training loss (or --from-metrics' lines)."""
    if a.from_metrics:
        run = subprocess.CompletedProcess([], 0, "", "")
        lines = [json.loads(x) for x in open(a.from_metrics) if x.strip()]
    else:
        config, sets = config_and_sets(a)
        with tempfile.NamedTemporaryFile(suffix=".jsonl") as metrics:
            cmd = [a.ferry, "train", "--config", config, "--metrics", metrics.name, "--no-checkpoints"]  # timings only
            for k, v in sets.items():
                cmd += ["--set", f"{k}={v}"]
            run = subprocess.run(cmd, capture_output=True, text=True)
            lines = [json.loads(x) for x in open(metrics.name) if x.strip()]
    return run, [line for line in lines if "loss" in line]  # the step-0 line holds the validation loss only


def main():
    a = common.arguments("ferry", OPTIONS)
    system = f"ferry-{a.policy}" + ("" if a.overlap == "backward" else f"-{a.overlap}")
    if a.dry_run:
        return common.dry_run(a, system)
    run, lines = run_ferry(a)
    params = common.parameter_count(common.build_model(a, device="meta"))
    result = {"system": system, "model": a.model, "n_layer": a.n_layer, "params": params, "batch": a.batch, "seq": a.seq,
              "budget_bytes": a.budget_bytes, "overlap": a.overlap, "exact": a.overlap != "delayed",
              "activation_checkpointing": "on" if a.activation_checkpointing else "auto", "schedule": common.schedule_settings(a)}
    if run.returncode != 0 or not lines:
        err = (run.stderr.strip().splitlines() or ["no output"])[-1]
        result.update(trained=False, error=err)
    else:
        step_s = statistics.median(x["step_s"] for x in lines[a.warmup:])
        tokens = a.batch * a.seq
        result.update(trained=True, step_s=step_s, tokens_per_s=tokens / step_s,
                      tflops=common.flops_per_token(a, params) * tokens / step_s / 1e12,
                      peak_gpu_bytes=lines[-1]["peak_device_bytes"], predicted_step_s=lines[-1]["predicted_step_s"],
                      first_loss=lines[0]["loss"], final_loss=lines[-1]["loss"], steps=len(lines),
                      timed_steps=len(lines[a.warmup:]), step_times_s=[x["step_s"] for x in lines],
                      losses=[x["loss"] for x in lines], lrs=[x.get("lr") for x in lines],
                      startup_lines=[x for x in (run.stdout + run.stderr).splitlines()
                                     if x.startswith(("device:", "offload:", "tiers"))][:6])
    line = json.dumps(result)
    print(line, flush=True)
    if a.json:
        with open(a.json, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
