#!/usr/bin/env python3
"""Writes a Hugging Face BERT folder whose config.json departs from Ferry's old fixed choices, and what
transformers computes with it (run once; outputs are committed).

A tiny BertForMaskedLM (PyTorch, CPU, fp32, no dropout) with a fixed seed and a config Ferry must read
rather than assume: intermediate_size 96 (not 4 * hidden), layer_norm_eps 1e-3 (not 1e-12, and large
enough against the embeddings' variance that ignoring it shows), hidden_act gelu_new (the tanh form, not
BERT's exact GELU), type_vocab_size 3 (not 2), 40 positions.
  hf_bert_variant/                        its encoder as `BertModel.save_pretrained` writes it (no `bert.`
                                          prefix, no masked-LM head, a pooler): config.json and
                                          model.safetensors, as sentence-transformers folders ship it
  hf_bert_variant_reference.safetensors   a batch (input_ids with [MASK] tokens, attention_mask with padding
                                          in the second sequence, labels: -100 except at the chosen
                                          positions), the encoder's last hidden states, the masked-LM head's
                                          weights (cls.predictions.*, which the folder lacks), its logits and
                                          loss.

The vocabulary (260) holds the bytes and [MASK] (256, ... 259), so the folder also trains on text with
Ferry's byte tokenizer.

    pip install torch transformers safetensors && python3 tests/data/make_hf_variant_reference.py
"""
import json
import os
import shutil

import torch
from safetensors.torch import save_file
from transformers import BertConfig, BertForMaskedLM

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDER = os.path.join(HERE, "hf_bert_variant")
SEED = 2468
B, T = 2, 12
CONFIG = dict(vocab_size=260, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
              max_position_embeddings=40, type_vocab_size=3, layer_norm_eps=1e-3, hidden_act="gelu_new")
MASK_ID = 259
PAD = 3  # the second sequence's last PAD positions are padding


def main():
    torch.manual_seed(SEED)
    config = BertConfig(**CONFIG, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, tie_word_embeddings=True)
    model = BertForMaskedLM(config).float()
    # BERT starts with zero biases and unit LayerNorm gains; perturb them so that they are tested.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "LayerNorm" in name:
                p.add_(0.05 * torch.randn_like(p))
    model.eval()

    shutil.rmtree(FOLDER, ignore_errors=True)
    model.bert.save_pretrained(FOLDER, safe_serialization=True)

    gen = torch.Generator().manual_seed(SEED + 1)
    original = torch.randint(0, 256, (B, T), generator=gen)
    attention_mask = torch.ones(B, T, dtype=torch.long)
    attention_mask[1, T - PAD:] = 0
    chosen = (torch.rand(B, T, generator=gen) < 0.3) & (attention_mask == 1)
    chosen[0, 0] = True
    labels = torch.where(chosen, original, torch.full_like(original, -100))
    input_ids = original.clone()
    input_ids[chosen] = MASK_ID
    input_ids[attention_mask == 0] = 0

    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids),
                    labels=labels, output_hidden_states=True)
    head = {n: p.detach().clone().contiguous() for n, p in model.named_parameters() if n.startswith("cls.")}
    ref = {
        "input_ids": input_ids.to(torch.int32),
        "attention_mask": attention_mask.to(torch.int32),
        "labels": labels.to(torch.int32),
        "hidden": out.hidden_states[-1].contiguous(),
        "logits": out.logits.contiguous(),
        "loss": out.loss.reshape(1),
        **head,
    }
    import transformers
    meta = {"config": json.dumps(CONFIG), "torch": torch.__version__, "transformers": transformers.__version__, "seed": str(SEED)}
    save_file(ref, os.path.join(HERE, "hf_bert_variant_reference.safetensors"), metadata=meta)
    print("loss", float(out.loss), "head tensors", sorted(head))


if __name__ == "__main__":
    main()
