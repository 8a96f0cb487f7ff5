#!/usr/bin/env python3
"""Ferry's GPU training step beside llm.c's and PyTorch's, one table (issue 31, item 4): reads `ferry-bench step
--json` files and the baselines' result lines (bench/baselines/llmc_step.py, torch_step.py), writes <out>.json and
<out>.md with each system's median step, tokens/s, model TFLOP/s and MFU (Ferry's count for every system), and
Ferry's tokens/s over each baseline's. Ratios are only taken between results of the same card, day and shape; a
result of another is listed without one. (In the GPU queue they come from one call, whose results folder starts
empty: PyTorch's line from step_vs_torch, set against the Ferry run of step_vs_llmc in that call.)

    python3 bench/step_report.py --ferry bench/results/step-gpt2-124m-h100-beside-llmc.json \\
        --baselines bench/results/step-gpt2-124m-h100-llmc.jsonl bench/results/step-gpt2-124m-h100-torch.jsonl \\
        --out bench/results/step-gpt2-124m-h100-side-by-side
"""
import argparse
import json
import os


def read_lines(paths):
    return [json.loads(line) for p in paths if os.path.exists(p) for line in open(p) if line.strip()]


def ferry_row(d):
    return {"system": f"ferry ({d['policy']}, {d['precision']})", "device": d.get("gpu") or d.get("device"),
            "date": d["date"], "batch": d["batch"], "seq": d["seq"], "step_ms": d["ms_per_step_median"],
            "tokens_per_s": d["tokens_per_s"], "model_tflops": d["model_tflops_per_s"], "mfu": d.get("mfu"),
            "command": d["command"], "ferry": True}


def baseline_row(d):
    return {"system": d["system"], "device": d.get("device"), "date": d["date"], "batch": d["batch"], "seq": d["seq"],
            "step_ms": d["step_ms_median"], "tokens_per_s": d["tokens_per_s"], "model_tflops": d["model_tflops"],
            "mfu": d.get("mfu"), "command": d["command"], "ferry": False,
            "versions": {k: d[k] for k in ("torch", "cuda", "cudnn") if k in d} or d.get("settings")}


def same_call(a, b):
    """Whether two results may be set against each other: the same card (by name), day and shape."""
    name = lambda r: (r["device"] or "").replace("cuda:0 (", "").split(",")[0].strip(" )")
    return name(a) == name(b) and a["date"] == b["date"] and (a["batch"], a["seq"]) == (b["batch"], b["seq"])


def markdown(rows, ferry):
    lines = ["# GPT-2 124M training step: Ferry, llm.c and PyTorch on one GPU", "",
             "MFU by Ferry's count for every system (bench/mfu.h: 6*N*tokens + 12*L*C*T*tokens, N with the real "
             "vocabulary; recomputation not counted). Ferry's tokens/s over each baseline's only where both ran on "
             "the same card the same day.", "",
             "| system | device | date | batch x seq | step ms (median) | tokens/s | model TFLOP/s | MFU | Ferry / it |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = "-"
        if not r["ferry"] and ferry and same_call(ferry, r):
            ratio = f"{ferry['tokens_per_s'] / r['tokens_per_s']:.2f}x"
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "-"
        lines.append(f"| {r['system']} | {r['device']} | {r['date']} | {r['batch']}x{r['seq']} | {r['step_ms']:.1f} | "
                     f"{r['tokens_per_s']:.0f} | {r['model_tflops']:.1f} | {mfu} | {ratio} |")
    lines += ["", "Commands:", ""] + [f"- {r['system']}: `{r['command']}`" for r in rows]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferry", nargs="+", required=True, help="ferry-bench step --json files (the last one present is Ferry's row)")
    ap.add_argument("--baselines", nargs="*", default=[], help="result lines of llmc_step.py and torch_step.py")
    ap.add_argument("--out", required=True, help="path without extension")
    a = ap.parse_args()
    ferry_files = [p for p in a.ferry if os.path.exists(p)]
    if not ferry_files:
        raise SystemExit(f"step_report: none of {' '.join(a.ferry)} exists")
    ferry = ferry_row(json.load(open(ferry_files[-1])))
    rows = [ferry] + [baseline_row(d) for d in read_lines(a.baselines)]
    with open(a.out + ".json", "w") as f:
        json.dump({"rows": rows}, f, indent=2)
    with open(a.out + ".md", "w") as f:
        f.write(markdown(rows, ferry))
    print(f"step_report: wrote {a.out}.json and {a.out}.md ({len(rows)} rows)")


if __name__ == "__main__":
    main()
