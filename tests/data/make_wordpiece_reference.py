#!/usr/bin/env python3
"""Writes the BERT WordPiece reference the C++ tokenizer test compares against (outputs committed).

Trains a small uncased WordPiece vocabulary (Hugging Face `tokenizers`, BERT's normaliser and
pre-tokeniser) on the bundled text, saves it as wordpiece_vocab.txt, then encodes test strings with it,
without [CLS]/[SEP] (wordpiece_expected.json: [{"text": ..., "ids": [...]}]).

    pip install tokenizers && python3 tests/data/make_wordpiece_reference.py

(`tokenizers`' WordPiece training breaks ties in no fixed order, so a rerun may order a few tokens of the
vocabulary differently; the vocabulary and the expected ids are always written, and committed, together.)
"""
import json
import os

from reference_common import TOKENIZER_TEXTS
from tokenizers import BertWordPieceTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "..", "configs", "data", "fortunes.txt")
TEXTS = TOKENIZER_TEXTS + [
    "Café naïve résumé ÉCOLE Ærø Łódź",
    "MiXeD CaSe WoRdS",
    "an unpronounceableword and supercalifragilisticexpialidocious",
    "em\u2014dash \u201cquotes\u201d and \u00bfpregunta?",
    "\u4e2d\u6587 mixed with text",
    "",
    " ",
    "a",
]


def main():
    tok = BertWordPieceTokenizer(lowercase=True)
    tok.train([CORPUS], vocab_size=1000, min_frequency=2)
    tok.save_model(HERE, "wordpiece")  # wordpiece-vocab.txt
    os.replace(os.path.join(HERE, "wordpiece-vocab.txt"), os.path.join(HERE, "wordpiece_vocab.txt"))
    expected = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in TEXTS]
    with open(os.path.join(HERE, "wordpiece_expected.json"), "w") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
    print(len(tok.get_vocab()), "tokens;", sum(len(e["ids"]) for e in expected), "expected ids")


if __name__ == "__main__":
    main()
