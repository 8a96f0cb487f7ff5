#!/usr/bin/env python3
"""Turns comparison result lines (bench/compare.sh, the runners' --json) into the comparison report:
<out>.json ({"device", "budget_bytes", "runs": [...], "max_model": [...]}), <out>.md (a table per model,
ratios against DeepSpeed ZeRO-Offload, the largest model per system) and <out>.png (tokens/s per model
and system; largest trainable model per system).

    python3 bench/report.py --runs runs.jsonl [--max-model search.jsonl] --budget 16GiB --out bench/results/compare-h100
"""
import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "baselines"))
import common  # noqa: E402


def read(path):
    if not path or not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if line.strip()]


def gib(n):
    return f"{n / 2**30:.1f} GiB"


KEEP = ("system", "model", "params", "tokens_per_s", "tflops", "peak_gpu_bytes", "final_loss", "trained", "error", "not_measured",
        "batch", "seq", "activation_checkpointing", "overlap", "first_loss", "steps",
        "step_s", "predicted_step_s", "host_peak_rss_bytes", "deepspeed", "colossalai", "torch")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", required=True)
    p.add_argument("--max-model")
    p.add_argument("--budget", required=True)
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


def model_table(model, runs):
    """The Markdown section of one model: a row per system, throughput against ZeRO-Offload's."""
    rows = [r for r in runs if r["model"] == model]
    base = next((r for r in rows if r["system"] == "deepspeed-zero-offload" and r.get("trained")), None)
    lines = [f"## {model} ({rows[0]['params'] / 1e9:.2f}B parameters)", "",
             "| system | step s (predicted) | tokens/s | TFLOP/s | peak GPU | final loss | vs ZeRO-Offload |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("not_measured"):
            lines.append(f"| {r['system']} | not measured: {r['not_measured']} | | | | | |")
            continue
        if not r.get("trained"):
            lines.append(f"| {r['system']} | did not train: {r.get('error', '?')[:80]} | | | | | |")
            continue
        ratio = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x" if base else "-"
        predicted = f" ({r['predicted_step_s']:.3f})" if r.get("predicted_step_s") else ""
        lines.append(f"| {r['system']} | {r['step_s']:.3f}{predicted} | {r['tokens_per_s']:.0f} | {r['tflops']:.1f} | {gib(r['peak_gpu_bytes'])} | "
                     f"{r['final_loss']:.3f} | {ratio} |")
    lines.append("")
    return lines


def markdown(out, budget, command, runs):
    lines = [f"# Ferry against ZeRO-Offload and Gemini on {out['device']}, {budget} GPU budget", ""]
    lines += [f"- {note}" for note in out["notes"]] + ([""] if out["notes"] else [])
    if out["sample"]:
        lines += ["**FORMAT SAMPLE: made-up numbers that exercise the report, not measurements.**", ""]
    lines += [f"Date: {out['date']}. Command: `{command}`", ""]
    for model in dict.fromkeys(r["model"] for r in runs):
        lines += model_table(model, runs)
    if out["max_model"]:
        lines += ["## Largest GPT trained at the budget (GPT-7B's width, layers grown)", "", "| system | layers | parameters |",
                  "|---|---|---|"]
        lines += [f"| {m['system']} | {m['n_layer']} | {m['params'] / 1e9:.2f}B |" for m in out["max_model"]]
        lines.append("")
    return "\n".join(lines)


def plot(path, budget, out, runs):
    """Tokens/s per model and system and, with a search, the largest model per system. False: no matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    device, sample, max_model = out["device"], out["sample"], out["max_model"]
    models = list(dict.fromkeys(r["model"] for r in runs))
    systems = list(dict.fromkeys(r["system"] for r in runs))
    fig, axes = plt.subplots(1, 2 if max_model else 1, figsize=(13 if max_model else 8, 4.5), squeeze=False)
    ax = axes[0][0]
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        values = [next((r["tokens_per_s"] for r in runs if r["model"] == m and r["system"] == system and r.get("trained")), 0)
                  for m in models]
        ax.bar([j + i * width for j in range(len(models))], values, width, label=system)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(models))], models)
    ax.set_ylabel("tokens/s")
    ax.set_title(f"Training throughput, {budget} GPU budget ({device})" + (" - SAMPLE" if sample else ""))
    ax.legend(fontsize=8)
    if max_model:
        ax2 = axes[0][1]
        ax2.barh([m["system"] for m in max_model], [m["params"] / 1e9 for m in max_model])
        ax2.set_xlabel("parameters (billions)")
        ax2.set_title("Largest GPT trained" + (" - SAMPLE" if sample else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    a = parse_args()
    runs, search = read(a.runs), read(a.max_model)
    if not runs:
        sys.exit(f"report: no result lines in {a.runs}")
    out = {"device": next((r["device"] for r in runs if r.get("device")), "unknown"),
           "budget_bytes": common.parse_bytes(a.budget), "date": datetime.date.today().isoformat(),
           "command": a.command, "notes": a.note, "sample": any(r.get("sample") for r in runs + search),
           "runs": [{k: r[k] for k in KEEP if k in r} for r in runs], "max_model": largest_trained(search)}
    with open(a.out + ".json", "w") as f:
        json.dump(out, f, indent=2)
    with open(a.out + ".md", "w") as f:
        f.write(markdown(out, a.budget, a.command, runs))
    if not plot(a.out + ".png", a.budget, out, runs):
        print("report: matplotlib is missing; no plot (bench/baselines/install.sh installs it)")
        return
    print(f"report: wrote {a.out}.json, {a.out}.md and {a.out}.png")


if __name__ == "__main__":
    main()
