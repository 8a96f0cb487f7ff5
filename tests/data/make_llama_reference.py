#!/usr/bin/env python3
"""Writes the Llama-family reference data the C++ tests compare against (run once; outputs are committed).

Two tiny models from Hugging Face transformers (PyTorch, CPU, fp32) with fixed seeds, each saved as a Hugging
Face folder (save_pretrained: config.json, model.safetensors) and a reference file:
  hf_llama_tiny/, llama_tiny_reference.safetensors    LlamaForCausalLM: grouped-query attention (4 heads, 2
                                                      key/value heads), its own lm_head, Llama 3's rope_scaling
                                                      (the pairs of a head fall on each side of the blend)
  hf_qwen2_tiny/, qwen2_tiny_reference.safetensors    Qwen2ForCausalLM: q/k/v biases, head tied to the embedding
Each reference holds a batch (input_ids, targets), the logits, the loss, every parameter's gradient
(grad.<name>), and the loss before each of 5 torch.optim.AdamW steps with weight decay and global-norm
clipping, plus the loss after them. Hyper-parameters are in the file's __metadata__.

    pip install torch transformers safetensors && python3 tests/data/make_llama_reference.py
"""
import json
import os

import torch
from reference_common import causal_lm_reference
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 4321
B, T = 2, 16
SHAPE = dict(vocab_size=67, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6, hidden_act="silu",
             attention_dropout=0.0)
ADAMW = dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)
GRAD_CLIP = 0.5
STEPS = 5


def llama():
    # Head size 8: pairs rotating at 1, 0.1, 0.01, 0.001 radians per position, wavelengths 6.3 (kept: below
    # 64 / 4), 63 (blended) and above 64 (slowed by the factor).
    rope = dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                original_max_position_embeddings=64)
    config = LlamaConfig(**SHAPE, rope_parameters=rope, tie_word_embeddings=False, attention_bias=False,
                         bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(config)


def qwen2():
    config = Qwen2Config(**SHAPE, rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
                         tie_word_embeddings=True, use_sliding_window=False, bos_token_id=1, eos_token_id=2)
    return Qwen2ForCausalLM(config)


def write(name, model, seed):
    model = model.float()
    # RMSNorm gains start at 1 and biases at 0; perturb them so that their use (and gradients) is tested.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith(".bias") or p.dim() == 1:
                p.add_(0.05 * torch.randn_like(p))
    model.train()
    model.save_pretrained(os.path.join(HERE, "hf_" + name), safe_serialization=True)

    params = dict(model.named_parameters())  # a tied lm_head.weight is listed once, as model.embed_tokens.weight
    ref = causal_lm_reference(model, params, SHAPE["vocab_size"], B, T, seed + 1, ADAMW, GRAD_CLIP, STEPS)
    meta = {"adamw": json.dumps(ADAMW), "grad_clip": str(GRAD_CLIP), "steps": str(STEPS), "torch": torch.__version__,
            "seed": str(seed)}
    save_file(ref, os.path.join(HERE, name + "_reference.safetensors"), metadata=meta)
    print(name, "loss", float(ref["loss"]), "adamw losses", ref["adamw_losses"].tolist())


def main():
    torch.manual_seed(SEED)
    write("llama_tiny", llama(), SEED)
    torch.manual_seed(SEED + 10)
    write("qwen2_tiny", qwen2(), SEED + 10)


if __name__ == "__main__":
    main()
