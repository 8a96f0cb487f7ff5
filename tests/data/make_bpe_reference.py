#!/usr/bin/env python3
"""Writes the GPT-2 byte-level BPE reference the C++ tokenizer test compares against (outputs committed).

Trains a small byte-level BPE (Hugging Face `tokenizers`, GPT-2's pre-tokenizer) on the bundled text and
saves it as GPT-2 files (bpe_vocab.json, bpe_merges.txt), then encodes test strings with it
(bpe_expected.json: [{"text": ..., "ids": [...]}]).

    pip install tokenizers && python3 tests/data/make_bpe_reference.py
"""
import json
import os

from reference_common import TOKENIZER_TEXTS
from tokenizers import ByteLevelBPETokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "..", "configs", "data", "fortunes.txt")
TEXTS = TOKENIZER_TEXTS + [
    "café naïve résumé",
    "MiXeD CaSe WoRdS",
    "",
    " ",
    "a",
    "\n",
]


def main():
    tok = ByteLevelBPETokenizer(add_prefix_space=False)
    tok.train([CORPUS], vocab_size=1000, min_frequency=2, special_tokens=[])
    tok.save_model(HERE, "bpe")  # bpe-vocab.json, bpe-merges.txt
    os.replace(os.path.join(HERE, "bpe-vocab.json"), os.path.join(HERE, "bpe_vocab.json"))
    os.replace(os.path.join(HERE, "bpe-merges.txt"), os.path.join(HERE, "bpe_merges.txt"))
    expected = [{"text": t, "ids": tok.encode(t).ids} for t in TEXTS]
    with open(os.path.join(HERE, "bpe_expected.json"), "w") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
    print(len(tok.get_vocab()), "tokens;", sum(len(e["ids"]) for e in expected), "expected ids")


if __name__ == "__main__":
    main()
