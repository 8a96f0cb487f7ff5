#!/usr/bin/env python3
"""Writes the BERT reference data the C++ tests compare against (run once; outputs are committed).

A tiny BertForMaskedLM from Hugging Face transformers (PyTorch, CPU, fp32, no dropout) with a fixed seed:
  bert_tiny.safetensors            the weights, with Hugging Face names (the tied decoder weight and bias
                                   appear once, as the word embeddings and cls.predictions.bias)
  bert_tiny_reference.safetensors  a batch (input_ids with [MASK] tokens, attention_mask with padding in
                                   the second sequence, labels: -100 except at the chosen positions), the
                                   logits, the masked-LM loss, every parameter's gradient (grad.<name>), and
                                   the loss before each of 5 torch.optim.AdamW steps with weight decay and
                                   global-norm clipping, plus the loss after them.

    pip install torch transformers safetensors && python3 tests/data/make_bert_reference.py
"""
import json
import os

import torch
from reference_common import adamw_trajectory, gradients
from safetensors.torch import save_file
from transformers import BertConfig, BertForMaskedLM

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 4321
B, T = 2, 16
CONFIG = dict(vocab_size=101, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
              max_position_embeddings=32)
MASK_ID = 3
PAD = 4  # the second sequence's last PAD positions are padding
ADAMW = dict(lr=3e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)
GRAD_CLIP = 0.5
STEPS = 5


def main():
    torch.manual_seed(SEED)
    config = BertConfig(**CONFIG, hidden_act="gelu", layer_norm_eps=1e-12, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, type_vocab_size=2, tie_word_embeddings=True)
    model = BertForMaskedLM(config).float()
    # BERT starts with zero biases and unit LayerNorm gains; perturb them so their gradients are tested.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "LayerNorm" in name:
                p.add_(0.05 * torch.randn_like(p))
    model.train()

    params = dict(model.named_parameters())
    save_file({n: p.detach().clone().contiguous() for n, p in params.items()}, os.path.join(HERE, "bert_tiny.safetensors"),
              metadata={"format": "pt"})

    gen = torch.Generator().manual_seed(SEED + 1)
    original = torch.randint(5, CONFIG["vocab_size"], (B, T), generator=gen)
    attention_mask = torch.ones(B, T, dtype=torch.long)
    attention_mask[1, T - PAD:] = 0
    chosen = (torch.rand(B, T, generator=gen) < 0.3) & (attention_mask == 1)
    chosen[0, 0] = True
    labels = torch.where(chosen, original, torch.full_like(original, -100))
    input_ids = original.clone()
    input_ids[chosen] = MASK_ID
    input_ids[attention_mask == 0] = 0  # [PAD]

    def loss_of(m):
        out = m(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        return out.logits, out.loss

    logits, loss = loss_of(model)
    loss.backward()
    ref = {
        "input_ids": input_ids.to(torch.int32),
        "attention_mask": attention_mask.to(torch.int32),
        "labels": labels.to(torch.int32),
        "logits": logits.detach().contiguous(),
        "loss": loss.detach().reshape(1),
    }
    ref.update(gradients(params))
    ref["adamw_losses"], ref["adamw_grad_norms"] = adamw_trajectory(model, loss_of, ADAMW, GRAD_CLIP, STEPS)
    losses, norms = ref["adamw_losses"].tolist(), ref["adamw_grad_norms"].tolist()

    import transformers
    meta = {"config": json.dumps(CONFIG), "adamw": json.dumps(ADAMW), "grad_clip": str(GRAD_CLIP), "steps": str(STEPS),
            "torch": torch.__version__, "transformers": transformers.__version__, "seed": str(SEED)}
    save_file(ref, os.path.join(HERE, "bert_tiny_reference.safetensors"), metadata=meta)
    print("loss", float(ref["loss"]), "adamw losses", losses, "grad norms", norms)


if __name__ == "__main__":
    main()
