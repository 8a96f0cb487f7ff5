#!/usr/bin/env python3
"""Writes hf_sentence_transformer/: a tiny folder laid out as sentence-transformers ships a model (like
sentence-transformers/all-MiniLM-L6-v2), for the export's tests (run once; the output is committed).

The encoder is hf_bert_variant's (config.json and model.safetensors are copies of its files: a link out of
the folder is refused, as formats/model_folder.h says); beside it the files Ferry does not write and must carry through an export:
  modules.json, sentence_bert_config.json, config_sentence_transformers.json, 1_Pooling/config.json,
  README.md (the model card), and the tokenizer (vocab.txt with the model's 260 ids,
  tokenizer_config.json, special_tokens_map.json).
No package is needed:

    python3 tests/data/make_sentence_transformer_fixture.py
"""
import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDER = os.path.join(HERE, "hf_sentence_transformer")
VOCAB_SIZE = 260  # hf_bert_variant's vocab_size
HIDDEN = 32       # its hidden_size
POSITIONS = 40    # its max_position_embeddings


def write_json(name, value):
    path = os.path.join(FOLDER, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(value, f, indent=2)
        f.write("\n")


def vocabulary():
    """BERT's special tokens, letters, digits, punctuation, word pieces, then [unusedN] up to VOCAB_SIZE."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens += letters + [str(d) for d in range(10)] + list(".,!?'-:;()")
    tokens += ["##" + c for c in letters]
    tokens += ["the", "of", "and", "to", "in", "is", "it", "ferry", "boat", "sea", "##ed", "##ing", "##ly"]
    tokens += ["[unused%d]" % i for i in range(VOCAB_SIZE - len(tokens))]
    assert len(tokens) == VOCAB_SIZE and len(set(tokens)) == VOCAB_SIZE
    return tokens


def main():
    os.makedirs(FOLDER, exist_ok=True)
    for name in ("config.json", "model.safetensors"):
        copy = os.path.join(FOLDER, name)
        if os.path.lexists(copy):
            os.remove(copy)
        shutil.copyfile(os.path.join(HERE, "hf_bert_variant", name), copy)
    with open(os.path.join(FOLDER, "vocab.txt"), "w") as f:
        f.write("".join(t + "\n" for t in vocabulary()))
    special = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]"}
    write_json("special_tokens_map.json", special)
    write_json("tokenizer_config.json", dict(special, tokenizer_class="BertTokenizer", do_lower_case=True,
                                             model_max_length=POSITIONS))
    write_json("modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ])
    write_json("sentence_bert_config.json", {"max_seq_length": POSITIONS, "do_lower_case": False})
    write_json("config_sentence_transformers.json", {
        "__version__": {"sentence_transformers": "3.0.1", "transformers": "4.41.2", "pytorch": "2.3.1"},
        "prompts": {}, "default_prompt_name": None, "similarity_fn_name": "cosine"})
    write_json(os.path.join("1_Pooling", "config.json"), {
        "word_embedding_dimension": HIDDEN, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False, "include_prompt": True})
    with open(os.path.join(FOLDER, "README.md"), "w") as f:
        f.write("---\nlibrary_name: sentence-transformers\npipeline_tag: sentence-similarity\n---\n\n"
                "# hf_sentence_transformer\n\nA tiny sentence-transformers model (mean pooling, normalised) for Ferry's "
                "tests: the encoder is\nhf_bert_variant's; tests/data/make_sentence_transformer_fixture.py wrote this folder.\n")


if __name__ == "__main__":
    main()
