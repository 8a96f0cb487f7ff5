#!/usr/bin/env python3
"""make_corpus.py FERRY: the seeds of the checkpoint fuzz targets, from checkpoints `ferry train` writes.

Trains a 4-wide GPT-2 on a 16-token shard for 3 steps (once as is, once with the delayed update, whose
checkpoints hold pending_update.safetensors), then writes a checkpoint of each framed as fuzz_checkpoint reads
it (a flags byte, then per file a u32 little-endian length and the bytes) to corpus/checkpoint/, and its
state.json to corpus/checkpoint_state/ (as good--*.json). Rerun when the checkpoint format changes."""
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
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
