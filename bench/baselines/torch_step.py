#!/usr/bin/env python3
"""PyTorch's GPT-2 training step, the reference Ferry's GPU step is measured against (issue 31).

GPT-2 as llm.c's train_gpt2.py and nanoGPT write it: pre-LayerNorm blocks, tied LM head, tanh GELU, the
vocabulary padded to 50304 rows (their choice, for the matmuls; N counts the real 50257),
F.scaled_dot_product_attention held to cuDNN's kernel (llm.c's and Ferry's; flash where cuDNN declines; --sdpa),
bf16 autocast with fp32 weights, fused AdamW, the whole model under torch.compile with coordinate-descent tuning
(llm.c's train_gpt2.py's setting; --compile-mode). Random initialisation and random tokens: only speed is
measured. Prints one JSON object and appends it to --json (one line per run); MFU uses Ferry's count
(bench/mfu.h: 6*N*tokens + 12*L*C*T*tokens) and the peak given (H100/H200 SXM bf16 dense: 989 TFLOP/s).

    python3 bench/baselines/torch_step.py --json bench/results/step-gpt2-124m-h100-torch.jsonl
    python3 bench/baselines/torch_step.py --device cpu --n-layer 2 --n-embd 64 --n-head 4 --batch 2 --seq 64 --no-compile
"""
import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, maxT, L, C, H):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        # autocast computes the loss in fp32 itself (nanoGPT passes the bf16 logits; a cast would copy them)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def attention_context(choice):
    """SDPA held to one backend (with flash behind cuDNN where cuDNN declines a shape), or PyTorch's own choice; a
    new context each step (sdpa_kernel's is used once)."""
    import contextlib

    if choice == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION] if choice == "cudnn" else [SDPBackend.FLASH_ATTENTION]
    try:
        return sdpa_kernel(order, set_priority=True)
    except TypeError:  # a torch without set_priority: the backends allowed, PyTorch's order among them
        return sdpa_kernel(order)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20, help="timed steps (the median is reported)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (torch.compile compiles in the first)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile's mode (default, as llm.c's train_gpt2.py, with coordinate-descent tuning; "
                         "max-autotune tunes for minutes and needs a longer --warmup)")
    ap.add_argument("--sdpa", choices=["cudnn", "flash", "auto"], default="cudnn",
                    help="the attention backend SDPA is held to (cudnn: what llm.c and Ferry run; auto: PyTorch picks)")
    ap.add_argument("--pad-vocab", type=int, default=64,
                    help="the model's vocabulary rows padded to a multiple of this (nanoGPT and llm.c: 50304); "
                         "the FLOPs count the real vocabulary's parameters, as Ferry's")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="the GPU's bf16 dense peak")
    ap.add_argument("--json", help="append the result as one JSON line to this file")
    a = ap.parse_args()

    torch.manual_seed(0)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    padded = (a.vocab + a.pad_vocab - 1) // a.pad_vocab * a.pad_vocab
    model = GPT(padded, a.seq, a.n_layer, a.n_embd, a.n_head).to(dev)
    optim = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=cuda)
    if not a.no_compile:
        torch._inductor.config.coordinate_descent_tuning = True  # as llm.c's train_gpt2.py compiles
    step_fn = model if a.no_compile else torch.compile(model, mode=None if a.compile_mode == "default" else a.compile_mode)
    sdpa = a.sdpa if cuda else "auto"
    idx = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    targets = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)

    def step():
        with attention_context(sdpa), torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            loss = step_fn(idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        optim.zero_grad(set_to_none=True)
        return loss.detach()

    times = []
    for i in range(a.warmup + a.steps):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step()
        if cuda:
            torch.cuda.synchronize()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)

    # the tied head counted once, the padded rows not at all: as Ferry counts N
    N = sum(p.numel() for p in model.parameters()) - (padded - a.vocab) * a.n_embd
    tokens = a.batch * a.seq
    flops = 6 * N * tokens + 12 * a.n_layer * a.n_embd * a.seq * tokens
    result = {
        "system": "pytorch" + ("" if a.no_compile else "-compile"),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "command": " ".join([sys.executable] + sys.argv),
        "device": torch.cuda.get_device_name(dev) if cuda else platform.processor() or "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": common.cudnn_version() if cuda else None,
        "shape": {"vocab": a.vocab, "padded_vocab": padded, "n_layer": a.n_layer, "n_embd": a.n_embd, "n_head": a.n_head},
        "compile": None if a.no_compile else {"mode": a.compile_mode, "coordinate_descent_tuning": True},
        "sdpa": a.sdpa if cuda else None,
        "batch": a.batch, "seq": a.seq, "precision": "bf16 autocast, fp32 weights, fused AdamW" if cuda else "bf16 autocast",
        "params": N, "steps": a.steps, "warmup": a.warmup,
        "step_ms_median": step_s * 1e3, "step_ms": [t * 1e3 for t in times],
        "tokens_per_s": tokens / step_s, "model_tflops": flops / step_s / 1e12,
        "mfu": flops / step_s / (a.peak_tflops * 1e12) if cuda else None,
        "last_loss": float(loss),
    }
    print(json.dumps(result))
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
