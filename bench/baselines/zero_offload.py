#!/usr/bin/env python3
"""DeepSpeed ZeRO-Offload on one GPU: ZeRO stage 2 with the optimizer offloaded to the CPU (pinned memory,
DeepSpeedCPUAdam in AdamW mode), bf16, contiguous gradients and overlapped communication, as DeepSpeed's
ZeRO-Offload tutorial recommends; the GPU budget is enforced with set_per_process_memory_fraction.

    python3 bench/baselines/zero_offload.py --model gpt2-1.5b --batch 8 --budget 16GiB --json results.jsonl
    python3 bench/baselines/zero_offload.py --model gpt-7b --dry-run     # the shape's parameter count, no GPU
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SYSTEM = "deepspeed-zero-offload"


def ds_config(a):
    return {
        "train_micro_batch_size_per_gpu": a.batch,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": a.grad_clip,
        "bf16": {"enabled": True},
        "zero_optimization": {
            "stage": 2,
            "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "contiguous_gradients": True,
            "overlap_comm": True,
            "reduce_scatter": True,
            "reduce_bucket_size": 2e8,
            "allgather_bucket_size": 2e8,
        },
        "optimizer": {"type": "AdamW",
                      "params": {"lr": a.lr, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": a.weight_decay}},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def main():
    a = common.arguments(SYSTEM)
    if a.dry_run:
        return common.dry_run(a, SYSTEM)
    import torch

    common.single_process_group(29511)
    params = 0
    try:
        import deepspeed
    except Exception as e:  # noqa: BLE001
        return common.report(a, SYSTEM, [], [], params, error=f"deepspeed not importable: {type(e).__name__}: {e}")
    torch.manual_seed(a.seed)
    common.enforce_budget(a.budget_bytes)
    try:
        model = common.build_model(a)
        params = common.parameter_count(model)
        if a.activation_checkpointing:
            model.gradient_checkpointing_enable()
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config(a))
        data = common.batches(a, engine.device)

        def step():
            batch, how = next(data)
            loss = common.loss_of(engine, batch, how)
            engine.backward(loss)
            engine.step()
            return loss.detach()

        times, losses = common.timed_steps(a, step)
    except torch.cuda.OutOfMemoryError as e:
        return common.report(a, SYSTEM, [], [], params, error=f"out of GPU memory at the budget: {str(e)[:200]}")
    return common.report(a, SYSTEM, times, losses, params, extra={"deepspeed": deepspeed.__version__, "torch": torch.__version__})


if __name__ == "__main__":
    main()
