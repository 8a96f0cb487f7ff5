#!/usr/bin/env python3
"""A fine-tuned Llama exported by Ferry reloads in transformers with Ferry's numbers (issue 34's goal): writes the
export and its transformers reference (committed; the C++ test needs no Python) and a result with the checks.

A random LlamaForCausalLM (grouped-query attention: 2 heads, 1 key/value head; its own lm_head) is saved by
transformers, beside a byte-level BPE tokenizer.json of Llama 3's kind (make_llama_tokenizer_reference.py's, at
300 tokens so that the files stay small); `ferry train` fine-tunes it from that folder (model.init_from,
data.tokenizer: hf with data.vocab that tokenizer.json, fp32, device cpu) on configs/data/fortunes.txt, and
`ferry export` writes hf_llama_finetuned/ (the run's tokenizer.json, with the tokenizer_config.json it writes). Then, in transformers:
  - AutoModelForCausalLM loads the export with no missing or unexpected keys, AutoTokenizer its tokenizer;
  - AutoTokenizer's ids of the whole text equal Ferry's (`ferry tokenize` of the same file);
  - the mean loss over the validation batches `ferry eval` takes equals `ferry eval`'s (1e-4 relative);
  - the logits of a fixed batch (two validation windows) are written to llama_finetuned_reference.safetensors,
    which Export.AFineTunedLlamaExportGivesTransformersLogits compares with Ferry's own logits of the export
    (1e-4); the script runs that test when the build has it.
The result goes to bench/results/llama-finetune-export.{json,md} with the date, machine and command.

    pip install torch transformers tokenizers safetensors
    python3 tests/data/make_llama_finetune_reference.py [--ferry build/ferry] [--test build/tests/formats/test_formats]
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

import make_llama_tokenizer_reference as tokenizers_reference

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TEXT = os.path.join(ROOT, "configs", "data", "fortunes.txt")
EXPORT = os.path.join(HERE, "hf_llama_finetuned")
REFERENCE = os.path.join(HERE, "llama_finetuned_reference.safetensors")
RESULT = os.path.join(ROOT, "bench", "results", "llama-finetune-export")
SEED = 2718
SEQ, BATCH, STEPS, EVAL_BATCHES, VAL_FRACTION = 32, 4, 30, 4, 0.05
REF_WINDOWS, REF_T = 2, 12  # the logits reference: the first validation windows, cut to REF_T tokens
TEST = "Export.AFineTunedLlamaExportGivesTransformersLogits"


def run(cmd, cwd=None):
    print("+", " ".join(cmd), flush=True)
    env = dict(os.environ, XDG_CACHE_HOME=os.path.dirname(cmd[-1]))  # the cost model's cache: the work folder's
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stdout}\n{out.stderr}")
    return out.stdout + out.stderr


def base_model(folder, tokenizer_folder):
    """The random model to fine-tune, as a Hugging Face folder, and the small Llama 3 tokenizer in a folder of its
    own (so that the export writes the tokenizer_config.json of the run's tokenizer, not the source's)."""
    tokenizers_reference.VOCAB = 300
    tokenizer, tokenizer_config = tokenizers_reference.llama3()
    os.makedirs(tokenizer_folder)
    with open(os.path.join(tokenizer_folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(tokenizer_folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config, f, indent=1)
    vocab = max(t["id"] for t in tokenizer["added_tokens"]) + 1
    added = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    torch.manual_seed(SEED)
    config = LlamaConfig(vocab_size=vocab, hidden_size=8, intermediate_size=24, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=SEQ, rms_norm_eps=1e-5,
                         hidden_act="silu", rope_parameters=dict(rope_type="default", rope_theta=10000.0),
                         tie_word_embeddings=False, bos_token_id=added["<|begin_of_text|>"],
                         eos_token_id=added["<|end_of_text|>"])
    LlamaForCausalLM(config).float().save_pretrained(folder, safe_serialization=True)
    return vocab


def experiment(path, base, tokenizer, work):
    with open(path, "w") as f:
        f.write(f"""# A random LlamaForCausalLM fine-tuned on the bundled text (make_llama_finetune_reference.py).
model: {{kind: llama, init_from: {base}}}
data: {{path: {TEXT}, tokenizer: hf, vocab: {tokenizer}, val_fraction: {VAL_FRACTION}, cache_dir: {work}/cache}}
optim: {{lr: 3.0e-3, warmup_steps: 5, weight_decay: 0.1, grad_clip: 1.0}}
train: {{seq_len: {SEQ}, batch_size: {BATCH}, steps: {STEPS}, seed: {SEED}, precision: fp32, log_every: 10,
        eval_every: {STEPS}, eval_batches: {EVAL_BATCHES}, checkpoint_dir: {work}/ckpt}}
offload: {{policy: resident}}
device: cpu
""")


def shard_ids(path):
    """A token shard's ids (llm.c's format: a 256-int32 header, then uint16 ids, or uint32 under magic 20240801)."""
    header = np.fromfile(path, dtype=np.int32, count=256)
    dtype = np.uint32 if header[0] == 20240801 else np.uint16
    return np.fromfile(path, dtype=dtype, offset=1024)[: header[2]].astype(np.int64)


def val_windows(ids, count):
    """The validation windows of dataset/dataset.cpp's val_batch, `count` in all: (tokens, targets)."""
    n_val = int(len(ids) * VAL_FRACTION)
    val = ids[len(ids) - n_val:]
    windows = n_val - SEQ
    starts = [k * (windows - 1) // (count - 1) if count > 1 else 0 for k in range(count)]
    tokens = torch.tensor(np.stack([val[s:s + SEQ] for s in starts]))
    targets = torch.tensor(np.stack([val[s + 1:s + SEQ + 1] for s in starts]))
    return tokens, targets


def cpu_name():
    with open("/proc/cpuinfo") as f:
        names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    return names[0] if names else platform.machine()


def main():
    args = argparse.ArgumentParser()
    args.add_argument("--ferry", default=os.path.join(ROOT, "build", "ferry"))
    args.add_argument("--test", default=os.path.join(ROOT, "build", "tests", "formats", "test_formats"))
    args = args.parse_args()
    ferry = os.path.abspath(args.ferry)
    work = tempfile.mkdtemp(prefix="ferry-finetune-export-")
    base = os.path.join(work, "base")
    tokenizer_json = os.path.join(work, "tokenizer", "tokenizer.json")
    vocab = base_model(base, os.path.dirname(tokenizer_json))
    config = os.path.join(work, "finetune.yaml")
    experiment(config, base, tokenizer_json, work)

    train_log = run([ferry, "train", "--config", config])
    losses = {int(step): float(loss) for step, loss in re.findall(r"step +(\d+)/\d+ +\| loss ([0-9.]+)", train_log)}
    eval_log = run([ferry, "eval", "--config", config, "--checkpoint", os.path.join(work, "ckpt")])
    ferry_val = float(re.search(r"val loss ([0-9.]+)", eval_log).group(1))  # printed to 4 decimals
    shutil.rmtree(EXPORT, ignore_errors=True)
    export_log = run([ferry, "export", "--checkpoint", os.path.join(work, "ckpt"), "--out", EXPORT])
    run([ferry, "tokenize", "--tokenizer", "hf", "--vocab", tokenizer_json, "--input", TEXT,
         "--out", os.path.join(work, "text.bin")])
    ids = shard_ids(os.path.join(work, "text.bin"))

    model, info = AutoModelForCausalLM.from_pretrained(EXPORT, dtype=torch.float32, output_loading_info=True)
    tokenizer = AutoTokenizer.from_pretrained(EXPORT)
    with open(TEXT, encoding="utf-8") as f:
        hf_ids = tokenizer(f.read())["input_ids"]
    model.eval()
    with torch.no_grad():
        tokens, targets = val_windows(ids, EVAL_BATCHES * BATCH)
        hf_val = float(F.cross_entropy(model(tokens).logits.reshape(-1, vocab), targets.reshape(-1)))
        ref_tokens, ref_targets = tokens[:REF_WINDOWS, :REF_T], targets[:REF_WINDOWS, :REF_T]
        logits = model(ref_tokens).logits
        loss = F.cross_entropy(logits.reshape(-1, vocab), ref_targets.reshape(-1))
    meta = {"torch": torch.__version__, "seed": str(SEED), "steps": str(STEPS)}
    save_file({"input_ids": ref_tokens.to(torch.int32).contiguous(), "targets": ref_targets.to(torch.int32).contiguous(),
               "logits": logits.contiguous(), "loss": loss.reshape(1)}, REFERENCE, metadata=meta)

    test = "not run (no test binary)"
    if os.path.exists(args.test):
        out = subprocess.run([args.test, f"--gtest_filter={TEST}"], capture_output=True, text=True)
        test = "passed" if out.returncode == 0 and "[  PASSED  ] 1 test" in out.stdout else "FAILED:\n" + out.stdout
    missing = sorted(info["missing_keys"]) + sorted(info["unexpected_keys"])
    result = {
        "what": "a Llama fine-tuned by ferry train, exported by ferry export, reloaded in transformers",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{cpu_name()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        "command": "python3 tests/data/make_llama_finetune_reference.py",
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
        "model": "LlamaForCausalLM: 2 layers, hidden 8, 2 heads, 1 key/value head, own lm_head, "
                 f"vocabulary {vocab} (byte-level BPE, Llama 3's pre-tokenizer)",
        "training": f"{STEPS} steps of {BATCH} x {SEQ} tokens, fp32, device cpu, from the random model",
        "train_loss_by_step": losses,
        "exported_files": re.search(r"wrote: (.*)", export_log).group(1),
        "missing_or_unexpected_keys": missing,
        "tokenizer_ids_equal_on_the_text": hf_ids == ids.tolist(),
        "tokens_of_the_text": len(ids),
        "validation_loss": {"ferry_eval": ferry_val, "transformers": hf_val,
                            "relative_difference": abs(ferry_val - hf_val) / hf_val,
                            "batches": f"{EVAL_BATCHES} x {BATCH} x {SEQ} tokens"},
        "logits_test": f"{TEST} (ferry's logits of the export against transformers', {REF_WINDOWS} x {REF_T}, 1e-4): {test}",
    }
    shutil.rmtree(work)
    with open(RESULT + ".json", "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    with open(RESULT + ".md", "w") as f:
        f.write(f"# {result['what']}\n\n{result['date']}, {result['machine']}; `{result['command']}`\n\n")
        f.write("| check | result |\n|---|---|\n")
        for key in ["model", "training", "train_loss_by_step", "exported_files", "missing_or_unexpected_keys",
                    "tokenizer_ids_equal_on_the_text", "validation_loss", "logits_test"]:
            f.write(f"| {key} | {json.dumps(result[key]) if not isinstance(result[key], str) else result[key]} |\n")
    print(json.dumps(result, indent=2))
    ok = not missing and result["tokenizer_ids_equal_on_the_text"] and result["validation_loss"]["relative_difference"] < 1e-4
    sys.exit(0 if ok and test != "FAILED" and not test.startswith("FAILED") else 1)


if __name__ == "__main__":
    main()
