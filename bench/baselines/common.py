"""What every baseline runner shares: the model shapes (the same as Ferry's configs), building the Hugging
Face model, the data (the bundled text as byte tokens, as Ferry's configs read it), the GPU budget, the
timing, and the result line. A result is one JSON object per run, appended to --json.
"""
import argparse
import contextlib
import json
import os
import resource
import statistics
import time

# name -> (kind, n_layer, n_embd, n_head, vocab, seq_len); the configs Ferry trains (configs/*.yaml)
MODELS = {
    "gpt2-124m": ("gpt2", 12, 768, 12, 50257, 1024),
    "gpt2-350m": ("gpt2", 24, 1024, 16, 50257, 1024),
    "gpt2-774m": ("gpt2", 36, 1280, 20, 50257, 1024),
    "gpt2-1.5b": ("gpt2", 48, 1600, 25, 50257, 1024),
    "gpt-3b": ("gpt2", 32, 2560, 32, 50257, 1024),
    "gpt-7b": ("gpt2", 32, 4096, 32, 50257, 1024),
    "bert-base": ("bert", 12, 768, 12, 30522, 512),
    "bert-large": ("bert", 24, 1024, 16, 30522, 512),
}
HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = os.path.join(HERE, "..", "..", "configs", "data", "fortunes.txt")


def parse_bytes(text):
    units = {"": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}
    for unit in sorted(units, key=len, reverse=True):
        if unit and text.endswith(unit):
            return int(float(text[: -len(unit)]) * units[unit])
    return int(text)


def arguments(system, extra=None):
    p = argparse.ArgumentParser(description=f"{system}: one training run of a model shape at a GPU memory budget")
    p.add_argument("--model", required=True, choices=sorted(MODELS), help="a shape of Ferry's configs")
    p.add_argument("--n-layer", type=int, help="override the shape's layer count (max-model-size search)")
    p.add_argument("--batch", type=int, default=1, help="sequences per step")
    p.add_argument("--seq", type=int, help="tokens per sequence (default: the shape's seq_len)")
    p.add_argument("--steps", type=int, default=20, help="training steps (the first --warmup are not timed)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--budget", default="16GiB", help="GPU memory budget, e.g. 16GiB (enforced per process)")
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--json", help="append the result as one JSON line to this file")
    p.add_argument("--dry-run", action="store_true",
                   help="build the model on the meta device and print its parameter count; no GPU needed")
    for args, kwargs in extra or []:
        p.add_argument(*args, **kwargs)
    a = p.parse_args()
    kind, n_layer, n_embd, n_head, vocab, seq_len = MODELS[a.model]
    a.kind, a.n_embd, a.n_head, a.vocab, a.seq_len = kind, n_embd, n_head, vocab, seq_len
    a.n_layer = a.n_layer or n_layer
    a.seq = a.seq or seq_len
    a.budget_bytes = parse_bytes(a.budget)
    if a.steps <= a.warmup:
        p.error("--steps must be larger than --warmup")
    return a


def build_model(a, device=None):
    """The Hugging Face model of the shape (GPT2LMHeadModel or BertForMaskedLM), dropout off."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    ctx = torch.device(device) if device else contextlib.nullcontext()
    with ctx:
        if a.kind == "gpt2":
            cfg = GPT2Config(vocab_size=a.vocab, n_positions=a.seq_len, n_embd=a.n_embd, n_layer=a.n_layer,
                             n_head=a.n_head, activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                             attn_pdrop=0.0, tie_word_embeddings=True)
            return GPT2LMHeadModel(cfg)
        cfg = BertConfig(vocab_size=a.vocab, hidden_size=a.n_embd, num_hidden_layers=a.n_layer,
                         num_attention_heads=a.n_head, intermediate_size=4 * a.n_embd,
                         max_position_embeddings=a.seq_len, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return BertForMaskedLM(cfg)


def parameter_count(model):
    return sum(p.numel() for p in model.parameters())  # tied weights are counted once, as Ferry counts them


def batches(a, device):
    """The bundled text as byte tokens in windows drawn by the seed; BERT gets Ferry's masked-LM recipe."""
    import torch

    data = torch.tensor(list(open(TEXT, "rb").read()), dtype=torch.long)
    gen = torch.Generator().manual_seed(a.seed)
    mask_id = a.vocab - 1
    while True:
        starts = torch.randint(0, len(data) - a.seq - 1, (a.batch,), generator=gen)
        x = torch.stack([data[s:s + a.seq] for s in starts])
        if a.kind == "gpt2":
            y = torch.stack([data[s + 1:s + a.seq + 1] for s in starts])
            yield {"input_ids": x.to(device), "labels": y.to(device)}, "shifted"
        else:
            chosen = torch.rand(x.shape, generator=gen) < 0.15
            how = torch.rand(x.shape, generator=gen)
            labels = torch.where(chosen, x, torch.full_like(x, -100))
            inp = x.clone()
            inp[chosen & (how < 0.8)] = mask_id
            rand = torch.randint(0, 256, x.shape, generator=gen)
            swap = chosen & (how >= 0.8) & (how < 0.9)
            inp[swap] = rand[swap]
            yield {"input_ids": inp.to(device), "labels": labels.to(device)}, "mlm"


def loss_of(model, batch, how):
    import torch.nn.functional as F

    if how == "mlm":
        return model(**batch).loss
    logits = model(input_ids=batch["input_ids"]).logits  # next-token targets given, not shifted by HF
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), batch["labels"].view(-1))


def single_process_group(port):
    """The environment of a one-GPU, one-process job, for runners that initialise torch.distributed."""
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(port)), ("RANK", "0"), ("LOCAL_RANK", "0"),
                       ("WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)


def enforce_budget(budget_bytes):
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: the runs need the GPU machine (--dry-run works anywhere)")
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, budget_bytes / total), 0)
    return total


def flops_per_token(a, params):
    """6 N per token plus attention's 12 L T C (Kaplan et al.), the figure MFU uses."""
    return 6 * params + 12 * a.n_layer * a.seq * a.n_embd


def dry_run(a, system):
    model = build_model(a, device="meta")
    print(json.dumps({"system": system, "model": a.model, "n_layer": a.n_layer, "params": parameter_count(model)}))


def report(a, system, step_times, losses, params, error=None, extra=None):
    """Prints and appends the run's result line; `error`: why the run did not train."""
    import torch

    result = {"system": system, "model": a.model, "n_layer": a.n_layer, "params": params, "batch": a.batch,
              "seq": a.seq, "budget_bytes": a.budget_bytes, "activation_checkpointing": a.activation_checkpointing}
    if error:
        result.update(error=error, trained=False)
    else:
        timed = step_times[a.warmup:]
        step_s = statistics.median(timed)
        tokens = a.batch * a.seq
        result.update(trained=True, step_s=step_s, tokens_per_s=tokens / step_s,
                      tflops=flops_per_token(a, params) * tokens / step_s / 1e12,
                      peak_gpu_bytes=torch.cuda.max_memory_allocated(),
                      host_peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      first_loss=losses[0], final_loss=losses[-1], steps=len(losses),
                      device=torch.cuda.get_device_name(0))
    result.update(extra or {})
    line = json.dumps(result)
    print(line, flush=True)
    if a.json:
        with open(a.json, "a") as f:
            f.write(line + "\n")
    return result


def timed_steps(a, step):
    """Runs step() a.steps times; returns the step times (s) and losses."""
    import torch

    times, losses = [], []
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    return times, losses
