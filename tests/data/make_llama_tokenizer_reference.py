#!/usr/bin/env python3
"""Writes the tokenizer.json references of today's decoder models and the ids Hugging Face `tokenizers` gives
for a multilingual text (outputs committed; the C++ tests need no Python).

No hub access here, so each tokenizer is small: its vocabulary and merges are trained on fortunes.txt and the
test text, and the rest of the file is written as the published tokenizer.json writes it (what each mirrors
is said at its builder below). The text is llama_tokenizer_text.txt (Latin, accents, CJK, Cyrillic, Arabic,
emoji, digits, code, whitespace runs, \\r\\n).

    pip install tokenizers==0.23.3 && python3 tests/data/make_llama_tokenizer_reference.py [--retrain]

Writes hf_tokenizers/<kind>/tokenizer.json (+ tokenizer_config.json) for llama3, qwen2, llama2,
llama2_metaspace and smollm2,
and llama_tokenizer_expected.json: {"texts": [...], kind: [{"ids", "ids_special", "decoded"}]}, one entry per
text: its ids without and with the post-processor's special tokens, and decode(ids) keeping special tokens
(left out where it is the text); and "llama3_added_flags": added tokens with lstrip, rstrip and single_word
for the llama3 file and the ids of texts around them. Without --retrain the committed
tokenizer.json files are kept (training breaks ties in no fixed order) and only the ids are written again.
"""
import json
import os
import sys

from reference_common import TOKENIZER_TEXTS
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "..", "configs", "data", "fortunes.txt")
TEXT = os.path.join(HERE, "llama_tokenizer_text.txt")
OUT = os.path.join(HERE, "hf_tokenizers")
VOCAB = 700  # small: the files stay tens of KB, and rarer characters fall back to bytes

# Llama 3's pre-tokenizer regex (meta-llama/Meta-Llama-3-8B and Llama 3.1/3.2), and Qwen2's (Qwen/Qwen2.5-*),
# which differs in taking digits one by one.
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")


def added(token_id, content, special=True):
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


def byte_level(add_prefix_space, trim_offsets, use_regex):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets,
            "use_regex": use_regex}


def template(bos, bos_id):
    """TemplateProcessing that puts `bos` before each sequence (Llama 2's <s>, Llama 3's <|begin_of_text|>)."""
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}


def train(pre_tokenizer, normalizer, special, byte_alphabet, limit_alphabet=None):
    """A BPE vocabulary and merges trained on the corpus behind the given normalizer and pre-tokenizer."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    kwargs = {"vocab_size": VOCAB, "min_frequency": 2, "special_tokens": special, "show_progress": False}
    if byte_alphabet:
        kwargs["initial_alphabet"] = pre_tokenizers.ByteLevel.alphabet()
    if limit_alphabet:
        kwargs["limit_alphabet"] = limit_alphabet
    tok.train([CORPUS, TEXT], trainers.BpeTrainer(**kwargs))
    model = json.loads(tok.to_str())["model"]
    return model["vocab"], model["merges"]


def bpe_model(vocab, merges, **options):
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False}
    model.update(options)
    model.update({"vocab": vocab, "merges": merges})
    return model


def tokenizer_json(added_tokens, normalizer, pre_tokenizer, post_processor, decoder, model):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": post_processor,
            "decoder": decoder, "model": model}


def with_specials(vocab, specials):
    """The trained vocabulary after `specials` (content -> id), renumbered after them."""
    out = dict(specials)
    for token, _ in sorted(vocab.items(), key=lambda kv: kv[1]):
        if token not in out:
            out[token] = len(out)
    return out


def llama3():
    """meta-llama/Meta-Llama-3-8B (and 3.1/3.2): no normalizer; Split(regex, Isolated) then ByteLevel without its
    regex; BPE with ignore_merges; post-processor ByteLevel + TemplateProcessing "<|begin_of_text|> $A";
    ByteLevel decoder; special added tokens after the vocabulary (<|begin_of_text|>, <|end_of_text|>, the
    reserved ones, <|eot_id|>). tokenizer_config.json: bos <|begin_of_text|>, eos <|end_of_text|>."""
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated", "invert": False},
        byte_level(False, True, False)]}
    vocab, merges = train(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_REGEX), "isolated"),
                                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
                          None, [], True)
    # Llama 3's vocabulary (converted from tiktoken) holds words its merges do not build, which ignore_merges
    # makes one token: so does this one's.
    for word in [" rocket", "Stra\u00dfe"]:
        vocab.setdefault(pre_tokenizers.ByteLevel(use_regex=False).pre_tokenize_str(word)[0][0], len(vocab))
    n = len(vocab)
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    added_tokens = [added(n + i, s) for i, s in enumerate(specials)]
    post = {"type": "Sequence", "processors": [byte_level(True, False, True), template("<|begin_of_text|>", n)]}
    return (tokenizer_json(added_tokens, None, pre, post, byte_level(True, True, True),
                           bpe_model(vocab, merges, ignore_merges=True)),
            {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"})


def qwen2():
    """Qwen/Qwen2.5-0.5B (Qwen2): NFC normalizer; Split(regex with single digits, Isolated) then ByteLevel
    without its regex; BPE with "" prefix/suffix; ByteLevel post-processor (no BOS) and decoder; special added
    tokens after the vocabulary (<|endoftext|>, <|im_start|>, <|im_end|>, ...). tokenizer_config.json: bos null,
    eos <|endoftext|>."""
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated", "invert": False},
        byte_level(False, False, False)]}
    vocab, merges = train(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_REGEX), "isolated"),
                                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
                          normalizers.NFC(), [], True)
    n = len(vocab)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]
    added_tokens = [added(n + i, s) for i, s in enumerate(specials)]
    added_tokens += [added(n + len(specials), "<tool_call>", special=False)]  # Qwen2.5's non-special ones
    return (tokenizer_json(added_tokens, {"type": "NFC"}, pre, byte_level(False, False, False),
                           byte_level(False, False, False),
                           bpe_model(vocab, merges, continuing_subword_prefix="", end_of_word_suffix="")),
            {"bos_token": None, "eos_token": "<|endoftext|>"})


def llama2():
    """meta-llama/Llama-2-7b-hf (TinyLlama and Mistral-7B-v0.1 write the same): normalizer Prepend("▁") +
    Replace(" " -> "▁"); no pre-tokenizer; BPE with unk <unk>, fuse_unk, byte_fallback to <0x00>..<0xFF>
    (ids 3..258 after <unk> <s> </s>); TemplateProcessing "<s> $A"; decoder Replace("▁" -> " "), ByteFallback,
    Fuse, Strip(" ", 1, 0); added tokens <unk> <s> </s>. tokenizer_config.json: bos <s>, eos </s>."""
    normalizer = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    vocab, merges = train(None, normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]),
                          [], False, limit_alphabet=120)
    specials = {"<unk>": 0, "<s>": 1, "</s>": 2}
    specials.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    vocab = with_specials(vocab, specials)
    added_tokens = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")]
    decoder = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    return (tokenizer_json(added_tokens, normalizer, None, template("<s>", 1), decoder,
                           bpe_model(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True)),
            {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "add_eos_token": False})


def llama2_metaspace():
    """Llama 2's model as transformers' LlamaConverter writes it with legacy=False (what re-saved Llama 2,
    Mistral and TinyLlama tokenizers hold): no normalizer; Metaspace("▁", prepend_scheme "first", split false)
    pre-tokenizer; the rest as llama2's (its committed file's vocabulary and merges)."""
    with open(os.path.join(OUT, "llama2", "tokenizer.json"), encoding="utf-8") as f:
        data = json.load(f)
    data["normalizer"] = None
    data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
    return data, {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "add_eos_token": False}


def smollm2():
    """HuggingFaceTB/SmolLM2-135M: GPT-2-style byte-level BPE: no normalizer; Digits(individual_digits) then
    ByteLevel with GPT-2's regex; ByteLevel post-processor (no BOS) and decoder; special added tokens first
    (<|endoftext|> 0, <|im_start|> 1, <|im_end|> 2, <repo_name>, ...). tokenizer_config.json: bos and eos
    <|endoftext|>."""
    pre = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                 byte_level(False, True, True)]}
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>",
                "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>"]
    vocab, merges = train(pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                   pre_tokenizers.ByteLevel(add_prefix_space=False)]),
                          None, specials, True)
    added_tokens = [added(vocab[s], s) for s in specials]
    return (tokenizer_json(added_tokens, None, pre, byte_level(True, False, True), byte_level(True, True, True),
                           bpe_model(vocab, merges)),
            {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"})


def texts():
    """The test strings: the shared ones, each paragraph of the multilingual text and all of it, and special
    tokens inside text (matched before pre-tokenization, never split)."""
    with open(TEXT, encoding="utf-8", newline="") as f:
        text = f.read()
    extra = ["", " ", "\n", "\r\n", "a", "   x", "x   ", "don't DON'T", "12345678", "\u00e9\u0301 decomposed",
             "<|endoftext|>hello<|endoftext|>", "<s> hi</s>", "<s>hi</s>there", "<|begin_of_text|>Hi<|eot_id|>", "<|im_start|>user\nhi<|im_end|>",
             "not <s special", "\U0001F680\U0001F680 rocket \u4e2d",
             # decomposed characters, which NFC (Qwen2's normalizer) composes: accents, marks out of order,
             # a singleton (the Angstrom sign), Hangul jamo
             "cafe\u0301 A\u030angstro\u0308m, Tie\u0302\u0301ng Vie\u0323\u0302t \u212b \u1100\u1161\u11a8"]
    return TOKENIZER_TEXTS + extra + [p for p in text.split("\n\n") if p] + [text]


def added_flags():
    """Added tokens with lstrip, rstrip and single_word (RoBERTa's <mask> strips left; chat templates' tokens
    strip right) added to the llama3 file through the `tokenizers` API: their entries as the file writes them
    (the C++ test adds them to the same file) and the ids of texts around them."""
    tok = Tokenizer.from_file(os.path.join(OUT, "llama3", "tokenizer.json"))
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True), AddedToken("<|end|>", rstrip=True),
                            AddedToken("<|both|>", lstrip=True, rstrip=True)])
    tok.add_tokens([AddedToken("<w>", single_word=True)])
    entries = [t for t in json.loads(tok.to_str())["added_tokens"] if t["content"] in
               ("<mask>", "<|end|>", "<|both|>", "<w>")]
    texts = ["a  <mask>b", "a<mask>", "  <mask>", "x <|end|>  y", "x<|end|>\n\ny", "a \u3000<mask> \u2028<|end|>\u3000z",
             "x <|both|>  y <|both|>", "<mask><mask>  <mask>", "a<w>b", "a <w> b", "<w>b", "_<w>", "\u00e9<w>", " <w>.",
             "<w><w> <w>", "say <mask> and <|end|> then <w> done"]
    return {"added_tokens": entries,
            "cases": [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in texts]}


def main():
    builders = {"llama3": llama3, "qwen2": qwen2, "llama2": llama2, "llama2_metaspace": llama2_metaspace,
                "smollm2": smollm2}
    expected = {"texts": texts()}
    for kind, build in builders.items():
        folder = os.path.join(OUT, kind)
        path = os.path.join(folder, "tokenizer.json")
        if "--retrain" in sys.argv or not os.path.exists(path):
            data, config = build()
            os.makedirs(folder, exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
            with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                json.dump(config, f, ensure_ascii=False, indent=1)
        tok = Tokenizer.from_file(path)
        cases = []
        for t in expected["texts"]:
            ids = tok.encode(t, add_special_tokens=False).ids
            cases.append({"ids": ids, "ids_special": tok.encode(t).ids})
            decoded = tok.decode(ids, skip_special_tokens=False)
            if decoded != t:
                cases[-1]["decoded"] = decoded
        expected[kind] = cases
        print(kind, tok.get_vocab_size(), "tokens;", sum(len(c["ids"]) for c in cases), "expected ids")
    expected["llama3_added_flags"] = added_flags()
    with open(os.path.join(HERE, "llama_tokenizer_expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, separators=(",", ":"))


if __name__ == "__main__":
    main()
