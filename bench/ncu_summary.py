#!/usr/bin/env python3
"""Nsight Compute's `--csv --page details` report (the GPU queue's kernel-profile row) as one Markdown row per
kernel: launches, median duration, DRAM and SM throughput (% of peak), achieved and theoretical occupancy,
registers per thread, block size, and the two largest warp-stall reasons when the report holds them (the
`smsp__average_warps_issue_stalled_*` metrics). Metrics a report lacks are left blank, not guessed.

    python3 bench/ncu_summary.py bench/results/kernel-profile-gpt2-124m-h200.csv.gz \
        --out bench/results/kernel-profile-gpt2-124m-h200.md
"""
import argparse
import csv
import gzip
import io
import re
import statistics
import sys

# Table column -> the ncu metric names (details page) that give it.
COLUMNS = {
    "dram %": ("DRAM Throughput",),
    "sm %": ("Compute (SM) Throughput",),
    "achieved occupancy %": ("Achieved Occupancy",),
    "theoretical occupancy %": ("Theoretical Occupancy",),
    "registers": ("Registers Per Thread",),
    "block": ("Block Size",),
}
TO_US = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active")


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def short_name(kernel):
    """`void ferry::...::ln_forward_kernel<8, ferry::Bf16>(...)` -> `ln_forward_kernel<8, Bf16>`."""
    name = kernel.replace("(anonymous namespace)::", "").split("(", 1)[0].replace("void ", "").replace("ferry::", "")
    base, _, templ = name.partition("<")
    return base.rsplit("::", 1)[-1] + ("<" + templ if templ else "")


def read_rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", errors="replace") as f:
            text = f.read()
    except OSError as e:
        sys.exit(f"ncu_summary: cannot read {path}: {e}")
    start = text.find('"ID"')  # ncu prints its own lines (==PROF== ...) before the table
    if start < 0:
        sys.exit(f"ncu_summary: {path} holds no CSV table (no \"ID\" header)")
    return list(csv.DictReader(io.StringIO(text[start:])))


def launches(rows):
    """Per launch ID: its kernel name and {metric name: (unit, value)}."""
    out = {}
    for r in rows:
        value = number(r.get("Metric Value", ""))
        if value is None:
            continue
        launch = out.setdefault(r["ID"], {"kernel": short_name(r.get("Kernel Name", "?")), "metrics": {}})
        launch["metrics"][r.get("Metric Name", "")] = (r.get("Metric Unit", ""), value)
    return out


def summarize(by_launch):
    """One row per kernel name, in the order of first launch."""
    kernels = {}
    for launch in by_launch.values():
        kernels.setdefault(launch["kernel"], []).append(launch["metrics"])
    table = []
    for name, runs in kernels.items():
        durations = [v * TO_US.get(u, float("nan")) for m in runs for k, (u, v) in m.items() if k == "Duration"]
        row = {"kernel": name, "launches": len(runs),
               "median us": statistics.median(durations) if durations else None}
        for column, names in COLUMNS.items():
            values = [m[n][1] for m in runs for n in names if n in m]
            row[column] = statistics.median(values) if values else None
        stalls = {}
        for m in runs:
            for k, (_, v) in m.items():
                hit = STALL.search(k)
                if hit:
                    stalls.setdefault(hit.group(1), []).append(v)
        ranked = sorted(((statistics.median(v), reason) for reason, v in stalls.items()), reverse=True)[:2]
        row["top stalls"] = ", ".join(f"{reason} {value:.1f}" for value, reason in ranked)
        table.append(row)
    return table


def markdown(table, source):
    heads = ["kernel", "launches", "median us", *COLUMNS, "top stalls"]
    cell = lambda v: "" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)
    lines = [f"# Nsight Compute, kernel by kernel ({source})", "", "| " + " | ".join(heads) + " |",
             "|" + "---|" * len(heads)]
    lines += ["| " + " | ".join(cell(row[h]) for h in heads) + " |" for row in table]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("report", help="ncu --csv --page details output (.csv or .csv.gz)")
    p.add_argument("--out", help="write the Markdown here (else print it)")
    a = p.parse_args()
    table = summarize(launches(read_rows(a.report)))
    text = markdown(table, a.report.rsplit("/", 1)[-1])
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
