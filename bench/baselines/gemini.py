#!/usr/bin/env python3
"""Colossal-AI Gemini on one GPU: the static all-offload placement (shard_param_frac=1,
offload_optim_frac=1, offload_param_frac=1: the old `cpu` placement) or Gemini's `auto` placement, bf16,
HybridAdam in AdamW mode; the GPU budget is enforced with set_per_process_memory_fraction.

    python3 bench/baselines/gemini.py --model gpt2-1.5b --placement static --budget 16GiB --json results.jsonl
    python3 bench/baselines/gemini.py --model bert-large --dry-run
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    a = common.arguments("gemini", [(("--placement",), {"choices": ["static", "auto"], "default": "static",
                                                       "help": "static: everything offloaded; auto: Gemini decides"})])
    system = f"gemini-{a.placement}"
    if a.dry_run:
        return common.dry_run(a, system)
    import torch

    common.single_process_group(29512)
    params = 0
    try:
        import colossalai
        from colossalai.booster import Booster
        from colossalai.booster.plugin import GeminiPlugin
        from colossalai.nn.optimizer import HybridAdam
    except Exception as e:  # noqa: BLE001 - Colossal-AI pins old torch/transformers; record why it cannot run
        return common.report(a, system, [], [], params, error=f"colossalai not importable: {type(e).__name__}: {e}")
    colossalai.launch_from_torch()
    torch.manual_seed(a.seed)
    common.enforce_budget(a.budget_bytes)
    if a.placement == "static":
        plugin = GeminiPlugin(placement_policy="static", shard_param_frac=1.0, offload_optim_frac=1.0,
                              offload_param_frac=1.0, precision="bf16", pin_memory=True)
    else:
        plugin = GeminiPlugin(placement_policy="auto", precision="bf16", pin_memory=True)
    booster = Booster(plugin=plugin)
    try:
        model = common.build_model(a)
        params = common.parameter_count(model)
        if a.activation_checkpointing:
            model.gradient_checkpointing_enable()
        optimizer = HybridAdam(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=a.weight_decay,
                               adamw_mode=True)
        model, optimizer, *_ = booster.boost(model, optimizer)
        data = common.batches(a, torch.device("cuda"))

        def step():
            batch, how = next(data)
            loss = common.loss_of(model, batch, how)
            booster.backward(loss, optimizer)
            optimizer.clip_grad_by_norm(a.grad_clip)
            optimizer.step()
            optimizer.zero_grad()
            return loss.detach()

        times, losses = common.timed_steps(a, step)
    except torch.cuda.OutOfMemoryError as e:
        return common.report(a, system, [], [], params, error=f"out of GPU memory at the budget: {str(e)[:200]}")
    return common.report(a, system, times, losses, params, extra={"colossalai": colossalai.__version__, "torch": torch.__version__})


if __name__ == "__main__":
    main()
