#!/usr/bin/env python3
"""DeepSpeed on one GPU with its optimizer offloaded to the CPU, configured as its documentation recommends:
ZeRO-2 + CPU offload (ZeRO-Offload), ZeRO-3 with `offload_optimizer.ratio` (ZeRO-Offload++'s Twin-Flow: that
share of the optimizer on the CPU, the rest on the GPU), or ZeRO-2 + ZenFlow (important gradients' columns
updated on the GPU every step, the rest on the CPU every few steps: approximate). bf16, DeepSpeedCPUAdam
(AdamW), pinned memory, overlapped communication, contiguous gradients, DeepSpeed's default 5e8-element
buckets (the queue falls back to 2e8 where they run out of the budget), OMP_NUM_THREADS = cores, Hugging Face's model
with SDPA attention and `gelu_pytorch_tanh`, Ferry's batches and learning-rate schedule; the GPU budget is
enforced with set_per_process_memory_fraction.

    python3 bench/baselines/zero_offload.py --model gpt2-1.5b --batch 4 --budget 16GiB --init-from DIR --json runs.jsonl
    python3 bench/baselines/zero_offload.py --model gpt2-1.5b --stage 3 --ratio 0.6 ...    # 40% of AdamW on the GPU
    python3 bench/baselines/zero_offload.py --model gpt2-1.5b --zenflow ...                 # approximate, async
    python3 bench/baselines/zero_offload.py --model gpt2-1.5b --stage 3 --ratio 0.6 --dry-run   # the config, no GPU
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

OPTIONS = [
    (("--stage",), {"type": int, "choices": [2, 3], "default": 2, "help": "ZeRO stage (3 for --ratio below 1)"}),
    (("--ratio",), {"type": float, "default": 1.0,
                    "help": "offload_optimizer.ratio: the share of the optimizer on the CPU (ZeRO-3 only; 1: all)"}),
    (("--sub-group-size",), {"type": float, "default": 5e7,
                             "help": "ZeRO-3's optimizer sub-groups (elements): the unit --ratio splits (DeepSpeed's "
                                     "1e9 would leave GPT-2 1.5B two sub-groups; 1e8 sixteen, 0.7 and 0.75 alike)"}),
    (("--bucket-size",), {"type": float, "default": 5e8,
                           "help": "reduce and all-gather buckets, elements (DeepSpeed's default; the queue's rows fall "
                                   "back to 2e8, its and Hugging Face's guides' value for a GPU short of memory, where "
                                   "this runs out of the budget)"}),
    (("--zenflow",), {"action": "store_true", "help": "ZeRO-2 + ZenFlow (approximate: most columns updated late)"}),
    (("--zenflow-topk",), {"type": float, "default": 0.05, "help": "ZenFlow's topk_ratio (its tutorial's 0.05)"}),
    (("--zenflow-update-interval",), {"type": int, "default": 4, "help": "ZenFlow's update_interval (its tutorial's 4)"}),
    (("--ds-report",), {"metavar": "FILE", "help": "write DeepSpeed's ds_report (ops, versions, CUDA) here"}),
]


def system_name(a):
    if a.zenflow:
        return "deepspeed-zenflow"
    if a.stage == 3:
        return f"deepspeed-zero3-ratio-{a.ratio:g}"
    return "deepspeed-zero-offload"


def ds_config(a):
    offload = {"device": "cpu", "pin_memory": True}
    zero = {"stage": a.stage, "offload_optimizer": offload, "contiguous_gradients": True, "overlap_comm": True,
            "reduce_bucket_size": int(a.bucket_size)}
    if a.stage == 2:
        zero.update(reduce_scatter=True, allgather_bucket_size=int(a.bucket_size))
    else:
        offload["ratio"] = a.ratio
        zero["sub_group_size"] = int(a.sub_group_size)
    if a.zenflow:
        zero["zenflow"] = {"topk_ratio": a.zenflow_topk, "select_strategy": "auto", "select_interval": "auto",
                           "update_interval": a.zenflow_update_interval, "full_warm_up_rounds": 0, "overlap_step": True}
    return {
        "train_micro_batch_size_per_gpu": a.batch,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": a.grad_clip,
        "bf16": {"enabled": True},
        "zero_optimization": zero,
        "optimizer": {"type": "AdamW",
                      "params": {"lr": a.lr, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": a.weight_decay}},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def check_options(a):
    if not 0.0 <= a.ratio <= 1.0:
        sys.exit(f"zero_offload: --ratio {a.ratio:g} is the CPU's share of the optimizer: give a number from 0 to 1")
    if a.ratio < 1.0 and a.stage != 3:
        sys.exit(f"zero_offload: --ratio {a.ratio:g} needs --stage 3 (DeepSpeed splits the optimizer only in ZeRO-3)")
    if a.zenflow and a.stage != 2:
        sys.exit("zero_offload: --zenflow runs on ZeRO-2 here (its tutorial's setting); drop --stage 3")


def checked_config(a):
    """The DeepSpeed config, and whether DeepSpeed's own config model accepts it (where DeepSpeed is installed)."""
    config = ds_config(a)
    try:
        import deepspeed
        from deepspeed.runtime.config import DeepSpeedConfig
    except ImportError:
        return {"ds_config": config, "parsed": "not checked: deepspeed is not installed here"}
    try:
        DeepSpeedConfig(config)
    except Exception as e:  # noqa: BLE001 - pydantic's ValidationError and DeepSpeed's own config errors
        sys.exit(f"zero_offload: DeepSpeed {deepspeed.__version__} refuses this config: {e}")
    return {"ds_config": config, "parsed": f"accepted by DeepSpeed {deepspeed.__version__}"}


def cpu_adam_build():
    """Loads DeepSpeedCPUAdam's op (a JIT build with ninja on first use, cached in TORCH_EXTENSIONS_DIR) and
    returns how: the seconds, the compiler flags and the SIMD width it was built for."""
    from deepspeed.ops.op_builder import CPUAdamBuilder

    builder = CPUAdamBuilder()
    t0 = time.perf_counter()
    builder.load(verbose=True)  # the build's commands and messages go to the log
    return {"load_s": round(time.perf_counter() - t0, 2), "simd_width": builder.simd_width(),
            "cpu_arch": builder.cpu_arch(), "cxx_args": builder.cxx_args(), "extensions_dir": os.environ.get("TORCH_EXTENSIONS_DIR", "~/.cache/torch_extensions")}


def write_ds_report(path):
    """ds_report's text (which ops are compatible and built, the versions, CUDA), into `path`."""
    import contextlib
    import io

    from deepspeed.env_report import cli_main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        sys.argv = ["ds_report"]
        cli_main()
    with open(path, "w") as f:
        f.write(out.getvalue())


def train(a, deepspeed, clock):
    model, params, attention = common.training_model(a)
    clock.lap("model_s")
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config(a),
                                           lr_scheduler=lambda opt: common.lr_scheduler(a, opt))
    clock.lap("initialize_s")
    data = common.batches(a, engine.device)
    phases = common.Phases()

    # ZeRO-3 with a ratio below 1 steps the GPU's share with a torch AdamW of its own (stage3.py's backup_optimizer),
    # whose first group the learning-rate schedule never reaches: give it the schedule's rate before each step.
    backup = getattr(engine.optimizer, "backup_optimizer", None)

    def step():
        batch, how = next(data)
        phases.start()
        loss = common.loss_of(engine, batch, how)
        phases.end("forward")
        engine.backward(loss)  # with overlap_comm, the gradients' copies to the CPU overlap this
        phases.end("backward")
        if backup is not None:
            for group in backup.param_groups:
                group["lr"] = engine.get_lr()[0]
        engine.step()  # DeepSpeedCPUAdam on the CPU's share, the parameters' copy back
        phases.end("optimizer_step")
        return loss.detach()

    times, losses = common.timed_steps(a, step)
    return params, attention, times, losses, {"phase_s": phases.seconds, "phase_median_s": phases.medians(a.warmup)}


def main():
    threads = common.use_every_core()
    a = common.arguments("deepspeed", OPTIONS)
    check_options(a)
    system = system_name(a)
    if a.dry_run:
        return common.dry_run(a, system, checked_config(a))
    import torch

    common.single_process_group(29511)
    clock = common.Stopwatch()
    try:
        import deepspeed
    except Exception as e:  # noqa: BLE001
        return common.report(a, system, [], [], 0, error=f"deepspeed not importable: {type(e).__name__}: {e}")
    clock.lap("import_s")
    settings = {"deepspeed": deepspeed.__version__, "exact": not a.zenflow, "omp_num_threads": threads,
                "ds_config": ds_config(a)}
    if a.ds_report:
        write_ds_report(a.ds_report)
    settings["cpu_adam"] = cpu_adam_build()
    clock.lap("cpu_adam_s")
    torch.manual_seed(a.seed)
    common.enforce_budget(a)
    params = 0
    try:
        params, attention, times, losses, phases = train(a, deepspeed, clock)
    except torch.cuda.OutOfMemoryError as e:
        return common.report(a, system, [], [], params, error=f"out of GPU memory at the budget: {str(e)[:200]}",
                             extra={**settings, "startup_s": clock.stages})
    # ZenFlow's steps are periodic (the CPU's update every update_interval steps): their mean over whole periods
    return common.report(a, system, times, losses, params, statistic="mean" if a.zenflow else "median",
                         extra={**settings, **phases, "attention": attention, "startup_s": clock.stages})


if __name__ == "__main__":
    main()
