#!/usr/bin/env python3
"""Writes the Unicode reference the C++ character-class test compares dataset/unicode.cpp's tables against
(output committed): for every code point of the blocks the tables claim to cover, its general category
and lowercase from Python's unicodedata, and whether it has Unicode's White_Space property.

    python3 tests/data/make_unicode_reference.py

unicode_reference.json: {"unicode_version", "blocks": {name: [first, last]}, "code_points": [[cp, category,
lowercase, white_space], ...]}. The lowercase is the first character of str.lower(): U+0130 lowercases to
"i" + U+0307, and BERT's accent stripping drops the U+0307.
"""
import json
import os
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCKS = {
    "Basic Latin": [0x0000, 0x007F],
    "Latin-1 Supplement": [0x0080, 0x00FF],
    "Latin Extended-A": [0x0100, 0x017F],
    "Greek and Coptic": [0x0370, 0x03FF],
    "Cyrillic": [0x0400, 0x04FF],
    "General Punctuation": [0x2000, 0x206F],
    "CJK Symbols and Punctuation": [0x3000, 0x303F],
    "Halfwidth and Fullwidth Forms": [0xFF00, 0xFFEF],
}


def white_space(ch):
    # str.isspace() also takes the C0 separators U+001C..U+001F, which Unicode's White_Space (and so the
    # \s of GPT-2's pre-tokenizer regex) does not.
    return ch.isspace() and not 0x1C <= ord(ch) <= 0x1F


def main():
    rows = []
    for first, last in BLOCKS.values():
        for cp in range(first, last + 1):
            ch = chr(cp)
            rows.append([cp, unicodedata.category(ch), ord(ch.lower()[0]), int(white_space(ch))])
    # One code point a line, so that a regenerated file diffs line by line.
    blocks = ",\n".join(f"  {json.dumps(name)}: {json.dumps(span)}" for name, span in BLOCKS.items())
    code_points = ",\n".join(f"  {json.dumps(row)}" for row in rows)
    with open(os.path.join(HERE, "unicode_reference.json"), "w") as f:
        f.write(f'{{\n "unicode_version": {json.dumps(unicodedata.unidata_version)},\n "blocks": {{\n{blocks}\n }},\n'
                f' "code_points": [\n{code_points}\n ]\n}}\n')


if __name__ == "__main__":
    main()
