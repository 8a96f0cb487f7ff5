#!/usr/bin/env python3
"""Writes the GPT-2 byte-level BPE reference the C++ tokenizer test compares against (outputs committed).

Trains a small byte-level BPE (Hugging Face `tokenizers`, GPT-2's pre-tokenizer) on the bundled text and
saves it as GPT-2 files (bpe_vocab.json, bpe_merges.txt), then encodes test strings with it
(bpe_expected.json: [{"text": ..., "ids": [...]}]).

    pip install tokenizers && python3 tests/data/make_bpe_reference.py [--retrain]

Without --retrain the committed vocabulary is kept and only the expected ids are written again.
"""
import json
import os
import sys

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
    # beyond ASCII: punctuation, symbols, digits of other scripts, fractions, superscripts, emoji, spaces
    "em\u2014dash \u201cquotes\u201d and \u00bfpregunta? \u00bd of \u00b2\u00b3 \u20ac5 \u00a92026",
    "\u0661\u0662\u0663 and \uff15 \u00b0C \u00b11 \u2192 arrows \u2713 \U0001F600 smile",
    "no\u00a0break and\u2003em space, \u00e6sthetic \u00c6r\u00f8 \u4e2d\u6587",
]


def main():
    vocab, merges = os.path.join(HERE, "bpe_vocab.json"), os.path.join(HERE, "bpe_merges.txt")
    if "--retrain" in sys.argv or not os.path.exists(vocab):
        tok = ByteLevelBPETokenizer(add_prefix_space=False)
        tok.train([CORPUS], vocab_size=1000, min_frequency=2, special_tokens=[])
        tok.save_model(HERE, "bpe")  # bpe-vocab.json, bpe-merges.txt
        os.replace(os.path.join(HERE, "bpe-vocab.json"), vocab)
        os.replace(os.path.join(HERE, "bpe-merges.txt"), merges)
    else:  # the committed vocabulary: training breaks ties in no fixed order
        tok = ByteLevelBPETokenizer(vocab, merges, add_prefix_space=False)
    expected = [{"text": t, "ids": tok.encode(t).ids} for t in TEXTS]
    with open(os.path.join(HERE, "bpe_expected.json"), "w") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
    print(len(tok.get_vocab()), "tokens;", sum(len(e["ids"]) for e in expected), "expected ids")


if __name__ == "__main__":
    main()
