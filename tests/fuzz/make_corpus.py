#!/usr/bin/env python3
"""make_corpus.py FERRY: the seeds of the checkpoint, Hugging Face folder and token cache fuzz targets.

Trains a 4-wide GPT-2 on a 16-token shard for 3 steps (once as is, once with the delayed update, whose
checkpoints hold pending_update.safetensors), then writes a checkpoint of each framed as fuzz_checkpoint reads
it (a flags byte, then per file a u32 little-endian length and the bytes) to corpus/checkpoint/, and its
state.json to corpus/checkpoint_state/ (as good--*.json). The first run's checkpoint, exported by `ferry export`
and split here into two shards and an index as Hugging Face shards a large model, seeds corpus/hf_folder/ (with
damaged variants); corpus/token_cache/ gets cache entries made here (shard and sidecar as the cache writes
them). Rerun when a format changes."""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = ["state.json", "model.safetensors", "optimizer.safetensors", "pending_update.safetensors"]


def write_shard(path, count):
    rng = random.Random(7)
    header = [20240520, 1, count] + [0] * 253  # llm.c's uint16 shard: magic, version, token count
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % count, *[rng.randrange(16) for _ in range(count)]))


def frame(root, folder, flags):
    out = bytes([flags])
    for name in FILES:
        path = os.path.join(root, folder, name)
        data = open(path, "rb").read() if os.path.exists(path) else b""
        out += struct.pack("<I", len(data)) + data
    manifest = open(os.path.join(root, "ferry-run.json"), "rb").read()
    return out + struct.pack("<I", len(manifest)) + manifest


def frame_records(flags, records):
    """The framing of fuzz_files.h: a flags byte, then per file a u32 little-endian length and the bytes."""
    return bytes([flags]) + b"".join(struct.pack("<I", len(r)) + r for r in records)


def read_safetensors(data):
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return header, data[8 + n:]


def write_safetensors(tensors):
    """tensors: name -> (dtype, shape, bytes); offsets laid out in the given order."""
    header, blob = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + blob


HF_SHARDS = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
NO_MODEL_SAFETENSORS, SINGLE_FILE = 16, 2 | 4 | 8  # fuzz_hf_folder's flags: the files left out


def write_hf_folder_corpus(export_dir):
    """corpus/hf_folder/: the exported folder as two shards and an index, as one model.safetensors, and damaged."""
    config = open(os.path.join(export_dir, "config.json"), "rb").read()
    single = open(os.path.join(export_dir, "model.safetensors"), "rb").read()
    header, blob = read_safetensors(single)
    names = sorted(header)
    tensors = {n: (header[n]["dtype"], header[n]["shape"], blob[header[n]["data_offsets"][0]:header[n]["data_offsets"][1]])
               for n in names}
    halves = [names[:len(names) // 2], names[len(names) // 2:]]
    shards = [write_safetensors({n: tensors[n] for n in half}) for half in halves]
    weight_map = {n: HF_SHARDS[k] for k, half in enumerate(halves) for n in half}
    index = {"metadata": {"total_size": sum(len(t[2]) for t in tensors.values())}, "weight_map": weight_map}

    def index_bytes(mapping):
        return json.dumps(dict(index, weight_map=mapping), indent=2).encode()

    outside = dict(weight_map, **{halves[1][0]: "../train.bin"})
    missing = dict(weight_map, **{halves[1][0]: "model-00003-of-00002.safetensors"})
    seeds = {
        "good--sharded": (NO_MODEL_SAFETENSORS, [config, index_bytes(weight_map)] + shards),
        "good--single-file": (SINGLE_FILE, [config, b"", b"", b"", single]),
        "config--none-so-the-default-shape": (1 | NO_MODEL_SAFETENSORS, [b"", index_bytes(weight_map)] + shards),
        "index--names-a-file-outside-the-folder": (NO_MODEL_SAFETENSORS, [config, index_bytes(outside)] + shards),
        "index--names-a-missing-shard": (NO_MODEL_SAFETENSORS, [config, index_bytes(missing)] + shards),
        "index--weight_map-not-an-object": (NO_MODEL_SAFETENSORS, [config, b'{"weight_map": []}'] + shards),
        "index--not-json": (NO_MODEL_SAFETENSORS, [config, b"{"] + shards),
        "shard--cut-short": (NO_MODEL_SAFETENSORS, [config, index_bytes(weight_map), shards[0], shards[1][:len(shards[1]) // 2]]),
        "shard--tensor-in-both": (NO_MODEL_SAFETENSORS, [config, index_bytes(weight_map), shards[0], write_safetensors(tensors)]),
        "config--bert-model-type": (NO_MODEL_SAFETENSORS,
                                    [config.replace(b'"gpt2"', b'"bert"'), index_bytes(weight_map)] + shards),
        "config--huge-n_embd": (NO_MODEL_SAFETENSORS, [config.replace(b'"n_embd": 4', b'"n_embd": 40000000'),
                                                       index_bytes(weight_map)] + shards),
    }
    folder = os.path.join(HERE, "corpus", "hf_folder")
    os.makedirs(folder, exist_ok=True)
    for name, (flags, records) in seeds.items():
        with open(os.path.join(folder, name + ".bin"), "wb") as f:
            f.write(frame_records(flags, records))


FIX_UP_SIDECAR, NO_SIDECAR = 1, 2  # fuzz_token_cache's flags


def write_token_cache_corpus():
    """corpus/token_cache/: a cache entry (shard and sidecar) of fuzz_token_cache's text, and damaged ones."""
    def shard(tokens, count=None):
        header = [20240520, 1, len(tokens) if count is None else count] + [0] * 253
        return struct.pack("<256i", *header) + struct.pack("<%dH" % len(tokens), *tokens)

    def sidecar(**changes):
        info = {"tokenizer": "wordpiece", "vocab_size": 9, "vocab": "/vocab.txt", "lowercase": True, "mask_token_id": 4,
                "cache_key": "0000000000000000", "shard_bytes": 0, "shard_crc32c": "00000000"}
        info.update(changes)
        return json.dumps(info, indent=2).encode()

    tokens = [5, 6, 5, 8, 7, 7]  # hello world hello fu ##z ##z
    seeds = {
        "good--hit": (FIX_UP_SIDECAR, [shard(tokens), sidecar()]),
        "good--another-key": (0, [shard(tokens), sidecar()]),
        "good--no-sidecar": (NO_SIDECAR, [shard(tokens)]),
        "shard--count-beyond-the-file": (FIX_UP_SIDECAR, [shard(tokens, 1 << 30), sidecar()]),
        "shard--negative-count": (FIX_UP_SIDECAR, [shard(tokens, -1), sidecar()]),
        "shard--header-cut-short": (FIX_UP_SIDECAR, [shard(tokens)[:100], sidecar()]),
        "shard--tokens-beyond-the-vocabulary": (FIX_UP_SIDECAR, [shard([60000, 9, 65535]), sidecar()]),
        "sidecar--crc-not-hex": (0, [shard(tokens), sidecar(shard_crc32c="xyz")]),
        "sidecar--tokenizer-unknown": (FIX_UP_SIDECAR, [shard(tokens), sidecar(tokenizer="sentencepiece")]),
        "sidecar--not-an-object": (0, [shard(tokens), b"[1, 2]"]),
    }
    folder = os.path.join(HERE, "corpus", "token_cache")
    os.makedirs(folder, exist_ok=True)
    for name, (flags, records) in seeds.items():
        with open(os.path.join(folder, name + ".bin"), "wb") as f:
            f.write(frame_records(flags, records))


def main():
    ferry = sys.argv[1]
    work = tempfile.mkdtemp(prefix="ferry-corpus-")
    write_shard(os.path.join(work, "tokens.bin"), 4000)
    with open(os.path.join(work, "tiny.yaml"), "w") as f:
        f.write("model: {n_layer: 1, n_head: 1, n_embd: 4, vocab_size: 16, seq_len: 4}\n"
                "data: {path: tokens.bin, val_fraction: 0.1}\n"
                "train: {batch_size: 2, steps: 3, eval_batches: 1, checkpoint_every: 1, keep_checkpoints: 3}\n")
    for mode, extra in [("backward", []), ("delayed", ["--set", "offload.overlap=delayed", "--set", "offload.sync_steps=0",
                                                  "--set", "offload.policy=chunk-lru", "--set", "offload.bucket_mb=0.25"])]:
        root = os.path.join(work, mode)
        subprocess.run([ferry, "train", "--config", os.path.join(work, "tiny.yaml"), "--set", "train.checkpoint_dir=" + root] + extra,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # One checkpoint each (the delayed one with its pending update), checksums fixed up by the harness.
        folder = "step-00000003" if mode == "backward" else "step-00000002"
        with open(os.path.join(HERE, "corpus", "checkpoint", "%s-%s.bin" % (mode, folder)), "wb") as f:
            f.write(frame(root, folder, 1))
        with open(os.path.join(root, folder, "state.json")) as f:
            text = f.read()
        with open(os.path.join(HERE, "corpus", "checkpoint_state", "good--%s-%s.json" % (mode, folder)), "w") as f:
            f.write(text)
    export = os.path.join(work, "hf")
    subprocess.run([ferry, "export", "--checkpoint", os.path.join(work, "backward"), "--out", export],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    write_hf_folder_corpus(export)
    write_token_cache_corpus()
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
