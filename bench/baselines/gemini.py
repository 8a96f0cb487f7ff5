#!/usr/bin/env python3
"""Colossal-AI Gemini on one GPU: the `auto` placement (Gemini places chunks by the memory it is told it has, and
after its first step lets the optimizer take `gpu_margin_mem_ratio` of what is left on the GPU), or the `static`
placement with its three fractions (shard_param_frac, offload_optim_frac, offload_param_frac; all 1: everything on
the CPU, Gemini's weakest), bf16, HybridAdam in AdamW mode (its CPU and GPU Adam), gradient clipping by Gemini
itself (GeminiPlugin's max_norm: its optimizer's clip_grad_by_norm only logs a warning), chunk search as its GPT
demo sets it (search_range_m 128, hidden_dim n_embd), Hugging Face's model with SDPA attention and
`gelu_pytorch_tanh`, Ferry's batches and learning-rate schedule. The GPU budget is enforced with
set_per_process_memory_fraction and told to Gemini (colo_set_process_memory_fraction: `auto` sizes itself from
that, not from torch's limit). In bf16, Gemini's C++ CPU Adam takes only fp32 and fp16 gradients, so its
optimizer's CPU part runs PyTorch's Adam: Colossal-AI's limit, not a setting. Colossal-AI 0.5.0 pins
torch <= 2.5.1: where it does not import, the result line says why.

    python3 bench/baselines/gemini.py --model gpt2-1.5b --placement auto --budget 16GiB --json results.jsonl
    python3 bench/baselines/gemini.py --model gpt2-1.5b --placement static --offload-optim-frac 0.5 --offload-param-frac 0
    python3 bench/baselines/gemini.py --model bert-large --dry-run
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

OPTIONS = [
    (("--placement",), {"choices": ["static", "auto"], "default": "auto",
                        "help": "auto: Gemini decides; static: the three fractions below"}),
    (("--shard-param-frac",), {"type": float, "default": None,
                               "help": "static: share of the parameters sharded; default 0 where no parameter is "
                                       "offloaded (on one GPU sharding only adds a gather a chunk), else 1 (Gemini "
                                       "offloads parameters only when it is 1)"}),
    (("--offload-optim-frac",), {"type": float, "default": 1.0, "help": "static: share of the optimizer state on the CPU"}),
    (("--offload-param-frac",), {"type": float, "default": 1.0, "help": "static: share of the parameters on the CPU"}),
    (("--gpu-margin-mem-ratio",), {"type": float, "default": 0.8,
                                   "help": "auto: share of the GPU memory left after the first step that the optimizer "
                                           "may take (0, GeminiPlugin's default, keeps every optimizer state on the "
                                           "CPU on one GPU; its tutorial uses 0.8)"}),
    (("--max-prefetch",), {"type": int, "default": 0, "help": "chunks fetched ahead (offloaded parameters)"}),
]


def system_name(a):
    if a.placement == "auto":
        return "gemini-auto"
    return f"gemini-static-o{a.offload_optim_frac:g}-p{a.offload_param_frac:g}"


def shard_param_frac(a):
    if a.shard_param_frac is not None:
        return a.shard_param_frac
    return 1.0 if a.offload_param_frac > 0 else 0.0


def plugin_settings(a):
    settings = {"placement_policy": a.placement, "precision": "bf16", "pin_memory": True, "max_norm": a.grad_clip,
                "search_range_m": 128, "hidden_dim": a.n_embd, "max_prefetch": a.max_prefetch}
    if a.placement == "static":
        settings.update(shard_param_frac=shard_param_frac(a), offload_optim_frac=a.offload_optim_frac,
                        offload_param_frac=a.offload_param_frac)
    else:
        settings.update(gpu_margin_mem_ratio=a.gpu_margin_mem_ratio)
    return settings


def tell_gemini_the_budget(a, total_bytes):
    """Gemini's `auto` plans with total memory times its own fraction, which torch's limit does not set."""
    if not total_bytes:
        return "no budget (cpu)"
    try:
        from colossalai.legacy.utils.memory import colo_set_process_memory_fraction
    except Exception as e:  # noqa: BLE001 - a Colossal-AI without it: say so in the result
        return f"not told: {type(e).__name__}: {e}"
    fraction = min(1.0, a.budget_bytes / total_bytes)
    colo_set_process_memory_fraction(fraction)
    return fraction


def train(a, booster, HybridAdam):
    import torch

    model, params, attention = common.training_model(a)
    optimizer = HybridAdam(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=a.weight_decay,
                           adamw_mode=True)
    scheduler = common.lr_scheduler(a, optimizer)
    model, optimizer, _, _, scheduler = booster.boost(model, optimizer, lr_scheduler=scheduler)
    data = common.batches(a, torch.device("cuda"))
    phases = common.Phases()

    def step():
        batch, how = next(data)
        phases.start()
        loss = common.loss_of(model, batch, how)
        phases.end("forward")
        booster.backward(loss, optimizer)
        phases.end("backward")
        optimizer.step()  # clips by max_norm itself
        optimizer.zero_grad()
        scheduler.step()
        phases.end("optimizer_step")
        return loss.detach()

    times, losses = common.timed_steps(a, step)
    return params, attention, times, losses, {"phase_s": phases.seconds, "phase_median_s": phases.medians(a.warmup)}


def main():
    threads = common.use_every_core()
    a = common.arguments("gemini", OPTIONS)
    system = system_name(a)
    if a.dry_run:
        return common.dry_run(a, system, plugin_settings(a))
    import torch

    common.single_process_group(29512)
    clock = common.Stopwatch()
    try:
        import colossalai
        from colossalai.booster import Booster
        from colossalai.booster.plugin import GeminiPlugin
        from colossalai.nn.optimizer import HybridAdam
    except Exception as e:  # noqa: BLE001 - Colossal-AI pins old torch/transformers; record why it cannot run
        return common.report(a, system, [], [], 0, error=f"colossalai not importable: {type(e).__name__}: {e}")
    clock.lap("import_s")
    colossalai.launch_from_torch()
    torch.manual_seed(a.seed)
    total = common.enforce_budget(a)
    settings = {"colossalai": colossalai.__version__, "plugin": plugin_settings(a), "omp_num_threads": threads,
                "gemini_memory_fraction": tell_gemini_the_budget(a, total)}
    booster = Booster(plugin=GeminiPlugin(**plugin_settings(a)))
    params = 0
    try:
        params, attention, times, losses, phases = train(a, booster, HybridAdam)
    except torch.cuda.OutOfMemoryError as e:
        return common.report(a, system, [], [], params, error=f"out of GPU memory at the budget: {str(e)[:200]}",
                             extra={**settings, "startup_s": clock.stages})
    except Exception as e:  # noqa: BLE001 - e.g. auto's "Adjust layout failed!": a result line, not a lost run
        return common.report(a, system, [], [], params, error=f"{type(e).__name__}: {str(e)[:200]}",
                             extra={**settings, "startup_s": clock.stages})
    return common.report(a, system, times, losses, params,
                         extra={**settings, **phases, "attention": attention, "startup_s": clock.stages})


if __name__ == "__main__":
    main()
