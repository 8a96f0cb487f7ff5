#!/usr/bin/env python3
"""The README's headline: its results table (between the markers <!-- headline:begin --> and <!-- headline:end -->)
and docs/img/headline.png, both made from the committed results in bench/results/, so that the front page
shows only what those files hold.

    python3 bench/headline.py            # rewrites README.md's table and docs/img/headline.png
    python3 bench/headline.py --check    # exits 1 when README.md's table differs from the results
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
BEGIN, END = "<!-- headline:begin -->", "<!-- headline:end -->"

# How each system of a comparison is named on the front page, and what a reader must know beside its number.
SYSTEMS = {
    "ferry-greedy-pipelined": ("Ferry, greedy placement, AdamW pipelined into the next step (exact)", ""),
    "ferry-greedy": ("Ferry, greedy placement", ""),
    "ferry-zero-offload": ("Ferry, ZeRO-Offload's placement (every AdamW on the CPU)", ""),
    "deepspeed-zero-offload": ("DeepSpeed ZeRO-2, optimizer on the CPU",
                               "not at its best: checkpointing on, 6 GiB of the 16 used ([why](docs/benchmarks.md))"),
}


def load(name):
    with open(os.path.join(RESULTS, name)) as f:
        return json.load(f)


def comparison_rows(compare, source):
    runs = [r for r in compare["runs"] if r.get("tokens_per_s") and r["system"] in SYSTEMS]
    runs.sort(key=lambda r: -r["tokens_per_s"])
    gib = compare["budget_bytes"] / 2**30
    # Ferry's own ZeRO-Offload placement, on the same kernels and card, isolates what the scheduling gains.
    zero = next((r["tokens_per_s"] for r in runs if r["system"] == "ferry-zero-offload"), None)
    rows = []
    for r in runs:
        label, caveat = SYSTEMS[r["system"]]
        what = f"GPT-2 1.5B, {r['batch']}x{r['seq']} tokens, bf16, {gib:.0f} GiB GPU budget: {label}"
        result = f"{r['tokens_per_s']:,.0f} tokens/s ({r['step_s']:.3f} s/step)"
        if zero and r["system"].startswith("ferry-greedy"):
            result += f", {r['tokens_per_s'] / zero:.2f}x Ferry's ZeRO-Offload placement"
        rows.append((what, short_device(compare["device"]), result + (f"; {caveat}" if caveat else ""), source))
    return rows


def short_device(device):
    return device.replace("NVIDIA ", "").replace(" 80GB HBM3", "")


def table(rows):
    lines = ["| run | machine | result | source |", "|---|---|---|---|"]
    lines += [f"| {what} | {machine} | {result} | [{src}](bench/results/{src}) |" for what, machine, result, src in rows]
    return "\n".join(lines)


def pipelined_runs(name):
    """The `pipelined` runs of a `ferry-bench offload` result, each with its tokens/s from the median step (before
    2026-11-28 the file's tokens_per_s held the trainer's mean rate), and the card."""
    r = load(name + ".json")
    batch, seq = map(int, r["model"].rsplit("batch ", 1)[1].split("x"))  # "GPT-2 48 layers, ..., batch 4x1024"
    runs = [dict(run, tokens_per_s=run.get("tokens_per_step", batch * seq) / run["step_s"], batch=batch, seq=seq)
            for run in r["runs"] if run["overlap"] == "pipelined"]
    return runs, short_device(r["device"].split("(")[-1].rstrip(")"))


def offload_rows(name, against=None):
    """Ferry's pipelined rows of a `ferry-bench offload` result, no baseline beside them; `against`: the tokens/s
    of Ferry's ZeRO-Offload placement on the same card, for the ratio."""
    runs, gpu = pipelined_runs(name)
    rows = []
    for run in runs:
        what = {"greedy": "Ferry, greedy placement", "zero-offload": "Ferry, ZeRO-Offload's placement"}[run["policy"]]
        ratio = f", {run['tokens_per_s'] / against:.2f}x Ferry's ZeRO-Offload placement" if against else ""
        rows.append((f"GPT-2 1.5B, {run['batch']}x{run['seq']} tokens, bf16, {run['budget_bytes'] / 2**30:.0f} GiB GPU "
                     f"budget: {what}, AdamW pipelined (exact)", gpu,
                     f"{run['tokens_per_s']:,.0f} tokens/s ({run['step_s']:.3f} s/step; predicted "
                     f"{run['predicted_step_s']:.3f}){ratio}", name + ".md"))
    return rows


def step_row(name):
    s = load(name + ".json")
    return (f"GPT-2 124M resident, {s['batch']}x{s['seq']} tokens, {s['precision']}", short_device(s["gpu"]),
            f"{s['tokens_per_s']:,.0f} tokens/s, MFU {100 * s['mfu']:.1f}% ({s['date']})", name + ".md")


def headline_rows():
    zero_offload = pipelined_runs("offload-gpt2-1.5b-zero-offload-h200")[0][0]["tokens_per_s"]
    rows = offload_rows("offload-gpt2-1.5b-greedy-h200", zero_offload) + offload_rows("offload-gpt2-1.5b-zero-offload-h200")
    rows += comparison_rows(load("compare-h100.json"), "compare-h100.md")
    rows += [step_row("step-gpt2-124m-h200"), step_row("step-gpt2-124m-h100")]
    e = load("experiment-gpt-tiny.json")
    minutes, seconds = divmod(round(e["wall_s"]), 60)
    rows.append((f"The default experiment ({os.path.basename(e['config'])}, {e['steps']} steps) on the host device",
                 f"{e['machine']}, {e['hardware_threads']} threads",
                 f"{minutes}:{seconds:02d}, validation loss {e['val_loss_start']:.2f} -> {e['val_loss']:.2f}, "
                 f"peak RSS {e['peak_rss_bytes'] / 2**20:.0f} MiB", "experiment-gpt-tiny.md"))
    return rows


def plot(compare, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = [r for r in compare["runs"] if r.get("tokens_per_s") and r["system"] in SYSTEMS]
    runs.sort(key=lambda r: r["tokens_per_s"])
    fig, ax = plt.subplots(figsize=(8, 3.2))
    colors = ["#bbbbbb" if r["system"].startswith("deepspeed") else "#2a6f97" for r in runs]
    bars = ax.barh([SYSTEMS[r["system"]][0] for r in runs], [r["tokens_per_s"] for r in runs], color=colors)
    for bar, r in zip(bars, runs):
        note = f" {r['tokens_per_s']:,.0f}" + (" (not at its best: see docs/benchmarks.md)" if r["system"].startswith("deepspeed") else "")
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, note, va="center", fontsize=8)
    ax.set_xlabel("tokens/s (higher is better)")
    ax.set_xlim(0, max(r["tokens_per_s"] for r in runs) * 1.6)
    ax.set_title(f"GPT-2 1.5B, {compare['budget_bytes'] / 2**30:.0f} GiB GPU budget, {short_device(compare['device'])} "
                 f"({compare['date']})", fontsize=10)
    ax.tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="exit 1 when README.md's table is not the results'")
    args = p.parse_args()
    readme_path = os.path.join(ROOT, "README.md")
    readme = open(readme_path).read()
    if BEGIN not in readme or END not in readme:
        sys.exit(f"headline: README.md has no {BEGIN} ... {END} markers")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = head + BEGIN + "\n" + table(headline_rows()) + "\n" + END + tail
    if args.check:
        sys.exit(0 if new == readme else "headline: README.md's table is stale: run python3 bench/headline.py")
    open(readme_path, "w").write(new)
    plot(load("compare-h100.json"), os.path.join(ROOT, "docs", "img", "headline.png"))
    print("headline: README.md's table and docs/img/headline.png written")


if __name__ == "__main__":
    main()
