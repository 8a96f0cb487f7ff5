#!/usr/bin/env python3
"""Writes two tiny Hugging Face BERT folders the export round-trip tests start from (outputs committed).

  hf_roundtrip/bert_pretraining/  a BertForPreTraining ('bert.' names, the pooler, the masked-LM head and the
                                  next-sentence head) with the tokenizer files transformers saves
                                  (tokenizer_config.json, tokenizer.json, vocab.txt, special_tokens_map.json
                                  where this transformers version writes one)
  hf_roundtrip/bert_model/        a BertModel (no prefix, the pooler, no head) with config.json and vocab.txt
                                  only: the export must write a tokenizer_config.json itself

Dropout is set to values no default has (0.13, 0.07), so a test can tell the source's settings were kept.

    pip install torch transformers safetensors && python3 tests/data/make_hf_roundtrip_reference.py
"""
import os
import shutil

import torch
from transformers import BertConfig, BertForPreTraining, BertModel, BertTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "hf_roundtrip")
SEED = 2468
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "of", "and", "to", "in", "is", "it", "cat", "dog", "sat", "on", "mat", "ferry", "boat", "sea",
         "##s", "##ed", "##ing", "##ly", ".", ",", "!", "?"]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
CONFIG = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, max_position_embeddings=32,
              type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12, hidden_dropout_prob=0.13,
              attention_probs_dropout_prob=0.07, tie_word_embeddings=True)


def perturbed(model):
    # BERT starts with zero biases and unit LayerNorm gains: values a broken copy could also produce.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "LayerNorm" in name:
                p.add_(0.05 * torch.randn_like(p))
    return model


def write_vocab(folder):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "vocab.txt")
    with open(path, "w") as f:
        f.write("\n".join(SPECIAL + LETTERS + WORDS) + "\n")
    return path


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    torch.manual_seed(SEED)
    vocab_size = len(SPECIAL) + len(LETTERS) + len(WORDS)
    config = BertConfig(vocab_size=vocab_size, **CONFIG)

    pretraining = os.path.join(OUT, "bert_pretraining")
    write_vocab(pretraining)
    perturbed(BertForPreTraining(config).float()).save_pretrained(pretraining, safe_serialization=True)
    # (read back from the folder: transformers 5's constructor ignores a vocab_file and saves a 5-token tokenizer)
    BertTokenizer.from_pretrained(pretraining, do_lower_case=True).save_pretrained(pretraining)

    base = os.path.join(OUT, "bert_model")
    write_vocab(base)
    perturbed(BertModel(config, add_pooling_layer=True).float()).save_pretrained(base, safe_serialization=True)


if __name__ == "__main__":
    main()
