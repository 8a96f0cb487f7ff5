"""What every baseline runner shares: the model shapes (the same as Ferry's configs), building the Hugging
Face model (or loading Ferry's exported starting weights), Ferry's own batches and learning-rate schedule, the
GPU budget, the timing, and the result line. A result is one JSON object per run, appended to --json, with
every step's time and loss and the versions and settings that made it.
"""
import argparse
import contextlib
import json
import math
import os
import platform
import resource
import statistics
import sys
import time

# name -> (kind, n_layer, n_embd, n_head, vocab, seq_len); the configs Ferry trains (configs/*.yaml)
MODELS = {
    "gpt-tiny": ("gpt2", 4, 128, 4, 256, 128),
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
VAL_FRACTION = 0.05  # every config's data.val_fraction: Ferry trains on the text's first 95%
MASK64 = 2**64 - 1


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
    p.add_argument("--activation-checkpointing", action=argparse.BooleanOptionalAction, default=False,
                   help="recompute each block in the backward (Hugging Face's gradient checkpointing)")
    p.add_argument("--init-from", metavar="DIR",
                   help="start from this Hugging Face folder (`ferry export --config ...`: Ferry's starting weights)")
    p.add_argument("--lr", type=float, default=1e-4, help="peak learning rate (configs/gpt2-1.5b.yaml's)")
    p.add_argument("--min-lr", type=float, help="the cosine's floor (default: lr / 10, as Ferry's optim.min_lr)")
    p.add_argument("--lr-warmup-steps", type=int, default=100, help="linear warmup steps (Ferry's optim.warmup_steps)")
    p.add_argument("--lr-schedule", choices=["cosine", "constant"], default="cosine",
                   help="after the warmup, over the run's --steps (Ferry's optim.schedule)")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--json", help="append the result as one JSON line to this file")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: no budget, a check of the set-up on a machine without a GPU (Ferry: its host device)")
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
    a.min_lr = a.lr / 10 if a.min_lr is None else a.min_lr
    if a.steps <= a.warmup:
        p.error("--steps must be larger than --warmup")
    return a


def build_model(a, device=None):
    """The Hugging Face model of the shape (GPT2LMHeadModel or BertForMaskedLM), dropout off, SDPA attention and
    GPT-2's tanh GELU in PyTorch's fused form (`gelu_pytorch_tanh`: the same function as `gelu_new`, one kernel);
    from --init-from's folder when given, else initialised by Hugging Face."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    no_dropout = ({"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0} if a.kind == "gpt2" else
                  {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})
    act = {"activation_function": "gelu_pytorch_tanh"} if a.kind == "gpt2" else {}
    cls = GPT2LMHeadModel if a.kind == "gpt2" else BertForMaskedLM
    if getattr(a, "init_from", None) and device != "meta":
        model = cls.from_pretrained(a.init_from, torch_dtype=torch.float32, attn_implementation="sdpa", **no_dropout, **act)
        check_shape(a, model.config)
        return model
    if a.kind == "gpt2":
        cfg = GPT2Config(vocab_size=a.vocab, n_positions=a.seq_len, n_embd=a.n_embd, n_layer=a.n_layer, n_head=a.n_head,
                         tie_word_embeddings=True, **no_dropout, **act)
    else:
        cfg = BertConfig(vocab_size=a.vocab, hidden_size=a.n_embd, num_hidden_layers=a.n_layer, num_attention_heads=a.n_head,
                         intermediate_size=4 * a.n_embd, max_position_embeddings=a.seq_len, **no_dropout)
    cfg._attn_implementation = "sdpa"
    with torch.device(device) if device else contextlib.nullcontext():
        return cls(cfg)


def check_shape(a, cfg):
    """--init-from's folder must hold the shape the run names: its parameters are counted as the shape's."""
    got = (cfg.n_layer, cfg.n_embd, cfg.vocab_size) if a.kind == "gpt2" else (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size)
    if got != (a.n_layer, a.n_embd, a.vocab):
        raise SystemExit(f"--init-from {a.init_from}: its config.json has (layers, width, vocab) {got}, not --model {a.model}'s "
                         f"{(a.n_layer, a.n_embd, a.vocab)}; export that shape (ferry export --config configs/{a.model}.yaml)")


def attention_backend(model):
    """The attention implementation the model runs (`sdpa`, `eager`, ...), as transformers resolved it."""
    return getattr(model.config, "_attn_implementation", None) or "unknown"


def parameter_count(model):
    return sum(p.numel() for p in model.parameters())  # tied weights are counted once, as Ferry counts them


def training_model(a):
    """The run's model as the baselines train it (recomputing its layers under --activation-checkpointing), its
    parameter count and its attention backend."""
    model = build_model(a)
    # from_pretrained hands the model back in eval mode, and Hugging Face recomputes a layer only in training mode:
    # until 2026-11-28 every --init-from run trained without recomputation whatever it asked (the H200's DeepSpeed
    # out-of-memory traces show no checkpoint frame). No key/value cache either: nothing is generated.
    model.train()
    model.config.use_cache = False
    if a.activation_checkpointing:
        model.gradient_checkpointing_enable()
    return model, parameter_count(model), attention_backend(model)


class FerryRng:
    """Ferry's generator (foundation/rng.h: SplitMix64), so that the baselines train on Ferry's very batches."""

    GOLDEN = 0x9E3779B97F4A7C15

    def __init__(self, seed):
        self.state = seed & MASK64

    def next_u64(self):
        self.state = (self.state + self.GOLDEN) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        return int((self.next_u64() >> 11) * 2.0**-53 * float(n))  # Rng::below: a double's product, truncated


def ferry_windows(train, seed, index, batch, seq):
    """The offsets of Ferry's training batch `index` (dataset/dataset.cpp: TextDataset::train_batch)."""
    rng = FerryRng(seed ^ ((0xD1B54A32D192ED03 * (index + 1)) & MASK64))
    windows = len(train) - seq
    return [rng.below(windows) for _ in range(batch)]


def batches(a, device):
    """GPT: Ferry's batches, window for window (the text's first 95% as byte tokens, offsets drawn as Ferry draws
    them from train.seed and the step), so the same steps see the same tokens. BERT: the same 15% / 80-10-10
    masking recipe, drawn by torch's generator (not Ferry's draws)."""
    import torch

    text = open(TEXT, "rb").read()
    data = torch.tensor(list(text), dtype=torch.long)
    if a.kind == "gpt2":
        train = data[: len(data) - int(len(data) * VAL_FRACTION)]
        index = 0
        while True:
            starts = ferry_windows(train, a.seed, index, a.batch, a.seq)
            x = torch.stack([train[s:s + a.seq] for s in starts])
            y = torch.stack([train[s + 1:s + a.seq + 1] for s in starts])
            yield {"input_ids": x.to(device), "labels": y.to(device)}, "shifted"
            index += 1
    gen = torch.Generator().manual_seed(a.seed)
    mask_id = a.vocab - 1
    while True:
        starts = torch.randint(0, len(data) - a.seq - 1, (a.batch,), generator=gen)
        x = torch.stack([data[s:s + a.seq] for s in starts])
        chosen = torch.rand(x.shape, generator=gen) < 0.15
        how = torch.rand(x.shape, generator=gen)
        labels = torch.where(chosen, x, torch.full_like(x, -100))
        inp = x.clone()
        inp[chosen & (how < 0.8)] = mask_id
        rand = torch.randint(0, 256, x.shape, generator=gen)
        swap = chosen & (how >= 0.8) & (how < 0.9)
        inp[swap] = rand[swap]
        yield {"input_ids": inp.to(device), "labels": labels.to(device)}, "mlm"


def lr_at(a, s):
    """Ferry's learning rate at step s (0-based; cpu_optim/lr_schedule.cpp): linear warmup to --lr, then a cosine
    to --min-lr over the rest of the run's --steps, or constant."""
    if s < a.lr_warmup_steps:
        return a.lr * (s + 1) / a.lr_warmup_steps
    if a.lr_schedule == "constant":
        return a.lr
    progress = min(1.0, (s - a.lr_warmup_steps) / max(1, a.steps - a.lr_warmup_steps))
    return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def lr_scheduler(a, optimizer):
    """A LambdaLR stepping Ferry's schedule: step k (0-based) runs at lr_at(k), as Ferry's step k+1 does."""
    import torch

    for group in optimizer.param_groups:
        group["lr"] = a.lr
        group["initial_lr"] = a.lr
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_at(a, s) / a.lr)


def schedule_settings(a):
    return {"lr": a.lr, "min_lr": a.min_lr, "lr_warmup_steps": a.lr_warmup_steps, "lr_schedule": a.lr_schedule,
            "seed": a.seed, "data": "configs/data/fortunes.txt, Ferry's batches" if a.kind == "gpt2" else
            "configs/data/fortunes.txt, torch-drawn masking", "init_from": a.init_from or "Hugging Face's initialisation"}


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


def use_every_core():
    """OMP_NUM_THREADS = the machine's cores, before torch is imported (DeepSpeed's launcher would set it; these
    runners start without a launcher). Returns the value in force."""
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count()))
    return int(os.environ["OMP_NUM_THREADS"])


def enforce_budget(a):
    """The GPU budget as the caching allocator's limit; nothing on --device cpu."""
    import torch

    if a.device == "cpu":
        return 0
    budget_bytes = a.budget_bytes
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: the runs need the GPU machine (--dry-run works anywhere)")
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, budget_bytes / total), 0)
    return total


def flops_per_token(a, params):
    """6 N per token plus attention's 12 L T C (Kaplan et al.), the figure MFU uses."""
    return 6 * params + 12 * a.n_layer * a.seq * a.n_embd


def dry_run(a, system, settings=None):
    """The shape's parameter count and, when given, the system's settings (e.g. DeepSpeed's config): no GPU."""
    model = build_model(a, device="meta")
    print(json.dumps({"system": system, "model": a.model, "n_layer": a.n_layer, "params": parameter_count(model),
                      "attention": attention_backend(model), **({"settings": settings} if settings else {})}))


def environment():
    """What the numbers depend on besides the settings: versions, the CPU and its threads, the GPU."""
    import torch
    import transformers

    env = {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
           "cpu": cpu_name(), "cpu_cores": os.cpu_count(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
           "torch_threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        env.update(device=torch.cuda.get_device_name(0), cuda=torch.version.cuda, cudnn=cudnn_version())
    else:
        env.update(device=f"CPU only ({env['cpu']})")
    return env


def cudnn_version():
    """torch's cuDNN version, or why it has none: a cuDNN other than its own found first on LD_LIBRARY_PATH makes
    torch refuse it (2026-11-28 H200: 9.14 where torch 2.11 wants 9.19), which must not cost a run its result."""
    import torch

    try:
        return torch.backends.cudnn.version()
    except RuntimeError as e:
        return f"unavailable: {str(e)[:160]}"


def cpu_name():
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def report(a, system, step_times, losses, params, error=None, extra=None, statistic="median"):
    """Prints and appends the run's result line: the median step after --warmup (the mean with statistic="mean",
    for a system whose steps are periodic), every step's time and loss, the schedule, the environment and `extra`
    (the system's settings); `error`: why the run did not train."""
    import torch

    result = {"system": system, "model": a.model, "n_layer": a.n_layer, "params": params, "batch": a.batch,
              "seq": a.seq, "budget_bytes": a.budget_bytes, "activation_checkpointing": a.activation_checkpointing,
              "exact": True, "schedule": schedule_settings(a)}
    if error:
        result.update(error=error, trained=False)
    else:
        timed = step_times[a.warmup:]
        step_s = statistics.mean(timed) if statistic == "mean" else statistics.median(timed)
        tokens = a.batch * a.seq
        result.update(trained=True, step_s=step_s, tokens_per_s=tokens / step_s,
                      tflops=flops_per_token(a, params) * tokens / step_s / 1e12,
                      first_loss=losses[0], final_loss=losses[-1], steps=len(losses), timed_steps=len(timed),
                      step_times_s=step_times, losses=losses, step_statistic=statistic)
    if torch.cuda.is_available():
        result.update(peak_gpu_bytes=torch.cuda.max_memory_allocated(), peak_gpu_reserved_bytes=torch.cuda.max_memory_reserved())
    result["host_peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result.update(environment())
    result.update(extra or {})
    line = json.dumps(result)
    print(line, flush=True)
    if a.json:
        with open(a.json, "a") as f:
            f.write(line + "\n")
    return result


def synchronize():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed_steps(a, step):
    """Runs step() a.steps times; returns the step times (s) and losses. Each step's line goes to stderr as it
    ends, so a run killed at its time limit still shows how far it got."""
    times, losses = [], []
    for k in range(a.steps):
        synchronize()
        t0 = time.perf_counter()
        loss = step()
        synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
        print(f"step {k + 1}/{a.steps}: {times[-1]:.3f} s, loss {losses[-1]:.4f}", file=sys.stderr, flush=True)
    return times, losses


class Phases:
    """Each step's seconds per phase (forward, backward, optimizer step), each phase ended by a synchronize: where
    a system's step goes. The synchronizes wait only for work the step's end waits for anyway."""

    def __init__(self):
        self.seconds = {}
        self.t0 = 0.0

    def start(self):
        synchronize()
        self.t0 = time.perf_counter()

    def end(self, name):
        synchronize()
        now = time.perf_counter()
        self.seconds.setdefault(name, []).append(round(now - self.t0, 4))
        self.t0 = now

    def medians(self, warmup):
        return {name: statistics.median(times[warmup:]) for name, times in self.seconds.items() if times[warmup:]}


class Stopwatch:
    """Start-up stages and their seconds (model built, engine initialised, ...), kept for the result line."""

    def __init__(self):
        self.t0 = time.perf_counter()
        self.stages = {}

    def lap(self, name):
        now = time.perf_counter()
        self.stages[name] = round(now - self.t0, 2)
        print(f"{name}: {self.stages[name]:.1f} s", file=sys.stderr, flush=True)
        self.t0 = now
