#!/usr/bin/env python3
"""Turns comparison result lines (the runners' --json: bench/baselines/*.py, the GPU queue's
bench/results/compare-<gpu>/*.jsonl) into the comparison report: <out>.json ({"device", "budget_bytes", "runs":
[...], "max_model": [...]}), <out>.md (per model, batch and budget: the exact rows, then the approximate ones,
each against the best DeepSpeed row of its kind; the largest model per system) and <out>.png (tokens/s; the
loss of every step per system, exact solid and approximate dashed; the largest model per system).

    python3 bench/report.py --runs bench/results/compare-h100/ --budget 16GiB --out bench/results/compare-h100
    python3 bench/report.py --runs runs.jsonl more.jsonl [--max-model search.jsonl] --budget 16GiB --out OUT
"""
import argparse
import datetime
import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "baselines"))
import common  # noqa: E402


def read(paths):
    """The result lines of these files, or of every *.jsonl in these folders, in order, each once: the GPU queue
    copies one Ferry run into every comparison row of its shape (`ran_for_row`), so a folder holds it several times."""
    files = []
    for path in paths or []:
        files += sorted(glob.glob(os.path.join(path, "*.jsonl"))) if os.path.isdir(path) else [path]
    lines = [line.strip() for f in files if os.path.exists(f) for line in open(f) if line.strip()]
    return [json.loads(line) for line in dict.fromkeys(lines)]


def gib(n):
    return f"{n / 2**30:.1f} GiB"


def budgets(runs, default):
    """The GPU budgets of the runs, smallest first; a line without its own (older runners) ran at `default`."""
    return sorted({r.get("budget_bytes") or default for r in runs})


def is_exact(r):
    """Whether a run's update is exact AdamW: older lines say so through their overlap mode only."""
    return r.get("exact", r.get("overlap") != "delayed")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", required=True, nargs="+", help="result files, or folders of *.jsonl")
    p.add_argument("--max-model", nargs="*")
    p.add_argument("--budget", required=True,
                   help="the largest-model search's GPU budget, and that of result lines that do not state theirs")
    p.add_argument("--out", required=True, help="path without extension")
    p.add_argument("--command", default="", help="the command that produced the runs, for the record")
    p.add_argument("--note", action="append", default=[], help="a line of context under the title (repeatable)")
    return p.parse_args()


def largest_trained(search):
    """Per system, the largest model of the search that trained (0 parameters when none did)."""
    max_model = []
    for system in sorted({r["system"] for r in search}):
        trained = [r for r in search if r["system"] == system and r.get("trained")]
        best = max(trained, key=lambda r: r["params"]) if trained else None
        max_model.append({"system": system, "params": best["params"] if best else 0,
                          "n_layer": best["n_layer"] if best else 0})
    return max_model


def groups(runs):
    """The runs by (model, batch, budget), in the order they first appear."""
    keys = dict.fromkeys((r["model"], r.get("batch"), r.get("budget_bytes")) for r in runs)
    return [(key, [r for r in runs if (r["model"], r.get("batch"), r.get("budget_bytes")) == key]) for key in keys]


def best_deepspeed(rows):
    trained = [r for r in rows if r["system"].startswith("deepspeed") and r.get("trained")]
    return max(trained, key=lambda r: r["tokens_per_s"]) if trained else None


def settings(r):
    """A few words on how the run was set up: recomputation, the optimizer split, the overlap."""
    words = []
    ckpt = r.get("activation_checkpointing")
    if ckpt is not None:
        words.append(f"recompute {'on' if ckpt in (True, 'on') else 'auto' if ckpt == 'auto' else 'off'}")
    zero = (r.get("ds_config") or {}).get("zero_optimization", {})
    if zero:
        words.append(f"ZeRO-{zero.get('stage')}, CPU share {zero.get('offload_optimizer', {}).get('ratio', 1.0):g}")
        if zero.get("zenflow"):
            words.append(f"ZenFlow top-k {zero['zenflow'].get('topk_ratio')}, every {zero['zenflow'].get('update_interval')} steps")
    if r.get("overlap"):
        words.append(f"overlap {r['overlap']}")
    return ", ".join(words)


def row_line(r, base):
    if r.get("not_measured"):
        return f"| {r['system']} | not measured: {r['not_measured']} | | | | | | | |"
    if not r.get("trained"):
        return f"| {r['system']} | did not train: {r.get('error', '?')[:100]} | | | | | | | {settings(r)} |"
    ratio = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x" if base else "-"
    predicted = f" ({r['predicted_step_s']:.3f})" if r.get("predicted_step_s") else ""
    rss = gib(r["host_peak_rss_bytes"]) if r.get("host_peak_rss_bytes") else "-"
    gpu = gib(r["peak_gpu_bytes"]) if r.get("peak_gpu_bytes") is not None else "-"  # none on --device cpu
    return (f"| {r['system']} | {r['step_s']:.3f}{predicted} | {r['tokens_per_s']:.0f} | {r['tflops']:.1f} | "
            f"{gpu} | {rss} | {r['final_loss']:.3f} | {ratio} | {settings(r)} |")


def group_tables(key, rows):
    """The Markdown section of one (model, batch, budget): exact rows, then approximate ones, each kind against
    its own best DeepSpeed row, so an approximate update is never set against an exact one."""
    model, batch, budget = key
    head = f"## {model} ({rows[0]['params'] / 1e9:.2f}B parameters)"
    if batch:
        head += f", batch {batch} x {rows[0].get('seq')}"
    if budget:
        head += f", {gib(budget)} budget"
    lines = [head, ""]
    for title, kind in (("Exact AdamW", True), ("Approximate updates (late or partial)", False)):
        part = [r for r in rows if is_exact(r) == kind]
        if not part:
            continue
        base = best_deepspeed(part)
        lines += [f"### {title}", "",
                  f"| system | step s (predicted) | tokens/s | TFLOP/s | peak GPU | host peak RSS | final loss | "
                  f"vs {base['system'] if base else 'DeepSpeed'} | settings |",
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += [row_line(r, base) for r in part]
        lines.append("")
    return lines


def budgets_title(out):
    return ", ".join(gib(b) for b in out["budgets"]) + (" GPU budgets" if len(out["budgets"]) > 1 else " GPU budget")


def markdown(out, command, runs):
    lines = [f"# Ferry against DeepSpeed and Gemini on {out['device']}, {budgets_title(out)}", ""]
    lines += [f"- {note}" for note in out["notes"]] + ([""] if out["notes"] else [])
    if out["sample"]:
        lines += ["**FORMAT SAMPLE: made-up numbers that exercise the report, not measurements.**", ""]
    lines += [f"Date: {out['date']}. Command: `{command}`", ""]
    for key, rows in groups(runs):
        lines += group_tables(key, rows)
    if out["max_model"]:
        lines += [f"## Largest GPT trained at {gib(out['budget_bytes'])} (GPT-7B's width, layers grown)", "",
                  "| system | layers | parameters |",
                  "|---|---|---|"]
        lines += [f"| {m['system']} | {m['n_layer']} | {m['params'] / 1e9:.2f}B |" for m in out["max_model"]]
        lines.append("")
    return "\n".join(lines)


def plot_throughput(ax, runs, title, default_budget):
    several = len(budgets(runs, default_budget)) > 1  # then each bar group names its budget
    labels = [f"{m} b{b}" + (f"\n{gib(g or default_budget)}" if several else "") for (m, b, g), _ in groups(runs)]
    systems = list(dict.fromkeys(r["system"] for r in runs))
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        values = [next((r["tokens_per_s"] for r in rows if r["system"] == system and r.get("trained")), 0)
                  for _, rows in groups(runs)]
        ax.bar([j + i * width for j in range(len(labels))], values, width, label=system,
               hatch=None if all(is_exact(r) for r in runs if r["system"] == system) else "//")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))], labels)
    ax.set_ylabel("tokens/s")
    ax.set_title(title)
    ax.legend(fontsize=7)


def plot_losses(ax, runs, title):
    """Every step's loss per system of the first group with per-step losses: exact solid, approximate dashed."""
    with_losses = [(key, rows) for key, rows in groups(runs) if any(r.get("losses") for r in rows)]
    if not with_losses:
        return False
    (model, batch, budget), rows = with_losses[0]
    for r in rows:
        if r.get("losses"):
            ax.plot(range(1, len(r["losses"]) + 1), r["losses"], "-" if is_exact(r) else "--", marker=".", label=r["system"])
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(f"{title}: {model}, batch {batch}" + (f", {gib(budget)}" if budget else ""))
    ax.legend(fontsize=7)
    return True


def plot(path, out, runs):
    """Tokens/s, the loss curves and, with a search, the largest model per system. False: no matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    sample = " - SAMPLE" if out["sample"] else ""
    panels = 2 + bool(out["max_model"])
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.8), squeeze=False)
    plot_throughput(axes[0][0], runs, f"Throughput, {budgets_title(out)} ({out['device']}){sample}", out["budget_bytes"])
    if not plot_losses(axes[0][1], runs, f"Loss per step{sample}"):
        axes[0][1].set_axis_off()
    if out["max_model"]:
        ax = axes[0][2]
        ax.barh([m["system"] for m in out["max_model"]], [m["params"] / 1e9 for m in out["max_model"]])
        ax.set_xlabel("parameters (billions)")
        ax.set_title(f"Largest GPT trained at {gib(out['budget_bytes'])}{sample}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def device_of(r):
    """The GPU a result line ran on: a baseline's `device`, or Ferry's start-up line "device: cuda (NVIDIA H200)"."""
    if r.get("device"):
        return r["device"]
    line = next((x for x in r.get("startup_lines", []) if x.startswith("device:")), "")
    return line.split("(", 1)[1].rstrip(")") if "(" in line else None


def main():
    a = parse_args()
    runs, search = read(a.runs), read(a.max_model)
    if not runs:
        sys.exit(f"report: no result lines in {' '.join(a.runs)}")
    budget = common.parse_bytes(a.budget)
    out = {"device": next((d for d in map(device_of, runs) if d), "unknown"),
           "budget_bytes": budget, "budgets": budgets(runs, budget), "date": datetime.date.today().isoformat(),
           "command": a.command, "notes": a.note, "sample": any(r.get("sample") for r in runs + search),
           "runs": runs, "max_model": largest_trained(search)}
    with open(a.out + ".json", "w") as f:
        json.dump(out, f, indent=2)
    with open(a.out + ".md", "w") as f:
        f.write(markdown(out, a.command, runs))
    if not plot(a.out + ".png", out, runs):
        print("report: matplotlib is missing; no plot (pip install matplotlib)")
        return
    print(f"report: wrote {a.out}.json, {a.out}.md and {a.out}.png")


if __name__ == "__main__":
    main()
