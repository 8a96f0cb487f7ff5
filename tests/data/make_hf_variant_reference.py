#!/usr/bin/env python3
"""Writes Hugging Face BERT and GPT-2 folders whose config.json departs from Ferry's old fixed choices, and
what transformers computes with them (run once; outputs are committed).

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

And a tiny GPT2LMHeadModel the other way round: n_inner 40 (not 4 * n_embd), activation_function gelu (the
exact form, not gelu_new), layer_norm_epsilon 1e-3, and weights drawn with std 0.2 (GPT-2's 0.02 keeps the
MLP's inputs so small that both GELU forms agree within the test's tolerance):
  hf_gpt2_variant/                        `GPT2LMHeadModel.save_pretrained`: config.json, model.safetensors
  hf_gpt2_variant_reference.safetensors   input_ids, targets (the next tokens), logits and the mean
                                          cross-entropy of the targets.

    pip install torch transformers safetensors && python3 tests/data/make_hf_variant_reference.py
"""
import json
import os
import shutil

import torch
from safetensors.torch import save_file
from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDER = os.path.join(HERE, "hf_bert_variant")
SEED = 2468
B, T = 2, 12
CONFIG = dict(vocab_size=260, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
              max_position_embeddings=40, type_vocab_size=3, layer_norm_eps=1e-3, hidden_act="gelu_new")
MASK_ID = 259
PAD = 3  # the second sequence's last PAD positions are padding


GPT2_FOLDER = os.path.join(HERE, "hf_gpt2_variant")
GPT2_CONFIG = dict(vocab_size=64, n_embd=16, n_layer=2, n_head=2, n_positions=16, n_inner=40, activation_function="gelu",
                   layer_norm_epsilon=1e-3)
GPT2_T = 8


def perturb_biases_and_norms(model):
    """Zero biases and unit LayerNorm gains at initialisation would leave them untested."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "LayerNorm" in name or ".ln_" in name:
                p.add_(0.05 * torch.randn_like(p))


def gpt2_variant():
    torch.manual_seed(SEED + 2)
    config = GPT2Config(**GPT2_CONFIG, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True,
                        bos_token_id=0, eos_token_id=0, initializer_range=0.2)
    model = GPT2LMHeadModel(config).float()
    perturb_biases_and_norms(model)
    model.eval()
    shutil.rmtree(GPT2_FOLDER, ignore_errors=True)
    model.save_pretrained(GPT2_FOLDER, safe_serialization=True)
    gen = torch.Generator().manual_seed(SEED + 3)
    text = torch.randint(0, GPT2_CONFIG["vocab_size"], (B, GPT2_T + 1), generator=gen)
    input_ids, targets = text[:, :-1], text[:, 1:]
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    ref = {"input_ids": input_ids.to(torch.int32).contiguous(), "targets": targets.to(torch.int32).contiguous(),
           "logits": logits.contiguous(), "loss": loss.reshape(1)}
    save_file(ref, os.path.join(HERE, "hf_gpt2_variant_reference.safetensors"), metadata={"config": json.dumps(GPT2_CONFIG)})
    print("gpt2 loss", float(loss))


def main():
    torch.manual_seed(SEED)
    config = BertConfig(**CONFIG, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, tie_word_embeddings=True)
    model = BertForMaskedLM(config).float()
    perturb_biases_and_norms(model)
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
    gpt2_variant()


if __name__ == "__main__":
    main()
