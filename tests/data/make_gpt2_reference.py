#!/usr/bin/env python3
"""Writes the GPT-2 reference data the C++ tests compare against (run once; outputs are committed).

A tiny GPT2LMHeadModel from Hugging Face transformers (PyTorch, CPU, fp32) with a fixed seed:
  gpt2_tiny.safetensors            the weights, with Hugging Face names (what save_pretrained writes)
  gpt2_tiny_reference.safetensors  a batch (input_ids, targets), the logits, the loss, every parameter's
                                   gradient (grad.<name>), and the loss before each of 5 torch.optim.AdamW
                                   steps with weight decay and global-norm clipping, plus the loss after them.
  adamw_reference.safetensors      torch.optim.AdamW alone on fixed random tensors: the initial weights, the
                                   gradients of 5 steps, and the weights, exp_avg and exp_avg_sq after each.
Hyper-parameters are stored in each file's __metadata__.

    pip install torch transformers safetensors && python3 tests/data/make_gpt2_reference.py
"""
import json
import os

import torch
from reference_common import causal_lm_reference
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 1234
B, T = 2, 32
CONFIG = dict(vocab_size=101, n_positions=32, n_embd=64, n_layer=2, n_head=4)
ADAMW = dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)
GRAD_CLIP = 0.5
STEPS = 5


def main():
    torch.manual_seed(SEED)
    config = GPT2Config(**CONFIG, activation_function="gelu_new", layer_norm_epsilon=1e-5,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).float()
    # GPT-2 starts with zero biases and unit LayerNorm gains; perturb them so their gradients are tested.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or ".ln_" in name:
                p.add_(0.05 * torch.randn_like(p))
    model.train()

    params = dict(model.named_parameters())  # the tied lm_head.weight is listed once, as transformer.wte.weight
    weights = {name: p.detach().clone().contiguous() for name, p in params.items()}
    save_file(weights, os.path.join(HERE, "gpt2_tiny.safetensors"), metadata={"format": "pt"})

    ref = causal_lm_reference(model, params, CONFIG["vocab_size"], B, T, SEED + 1, ADAMW, GRAD_CLIP, STEPS)
    losses, norms = ref["adamw_losses"].tolist(), ref["adamw_grad_norms"].tolist()

    meta = {"config": json.dumps(CONFIG), "adamw": json.dumps(ADAMW), "grad_clip": str(GRAD_CLIP),
            "steps": str(STEPS), "torch": torch.__version__, "seed": str(SEED)}
    save_file(ref, os.path.join(HERE, "gpt2_tiny_reference.safetensors"), metadata=meta)
    print("loss", float(ref["loss"]), "adamw losses", losses, "grad norms", norms)


def adamw_reference():
    """torch.optim.AdamW on one fixed random tensor (an odd size), with weight decay, 5 steps."""
    gen = torch.Generator().manual_seed(SEED + 2)
    n, steps = 1037, 5
    hyper = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)
    p = torch.nn.Parameter(torch.randn(n, generator=gen))
    grads = torch.randn(steps, n, generator=gen) * 0.1
    opt = torch.optim.AdamW([p], lr=hyper["lr"], betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"],
                            weight_decay=hyper["weight_decay"], foreach=False)
    out = {"param0": p.detach().clone(), "grads": grads.clone()}
    params, ms, vs = [], [], []
    for k in range(steps):
        p.grad = grads[k].clone()
        opt.step()
        state = opt.state[p]
        params.append(p.detach().clone())
        ms.append(state["exp_avg"].clone())
        vs.append(state["exp_avg_sq"].clone())
    out.update(param=torch.stack(params), exp_avg=torch.stack(ms), exp_avg_sq=torch.stack(vs))
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(HERE, "adamw_reference.safetensors"),
              metadata={"adamw": json.dumps(hyper), "torch": torch.__version__})


if __name__ == "__main__":
    main()
    adamw_reference()
