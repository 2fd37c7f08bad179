"""Time per kernel per decode step from an Nsight Compute per-kernel summary (device-ncu.sh).

    python3 ncu_summary.py ncu-decode.csv [--steps N]

Rows are kernels by full name (template values included: two instantiations of one kernel with
the same launch shape stay apart) and launch shape; `per step` is invocations x average time /
steps, where steps is --steps or the invocations of the greedy sampler's arg-max (one per
step); `MB read` is the DRAM bytes one launch read.
"""
import argparse
import csv
import re
from collections import defaultdict


def number(text):
    return float(text.replace(",", "")) if text else 0.0


def short(name):
    name = re.sub(r"\(.*$", "", name)
    name = re.sub(r"^void ", "", name)
    return name[:60]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=float)
    args = ap.parse_args()
    with open(args.csv) as f:
        lines = [l for l in f if l.startswith('"')]
    rows = defaultdict(dict)
    for r in csv.DictReader(lines):
        key = (r["Kernel Name"], r["Block Size"], r["Grid Size"])
        rows[key]["n"] = number(r["Invocations"])
        rows[key][r["Metric Name"]] = number(r["Average"])
    steps = args.steps
    if steps is None:
        steps = max((v["n"] for k, v in rows.items() if "arg_reduce" in k[0]), default=1.0)
    total = 0.0
    table = []
    for (name, block, grid), v in rows.items():
        us = v.get("gpu__time_duration.sum", 0.0) / 1000.0
        per_step = v["n"] * us / steps
        total += per_step
        gbs = v.get("dram__bytes_read.sum", 0.0) / (us * 1000.0) if us else 0.0
        occ = v.get("sm__warps_active.avg.pct_of_peak_sustained_active", 0.0)
        regs = v.get("launch__registers_per_thread", 0.0)
        mb = v.get("dram__bytes_read.sum", 0.0) / 1e6
        table.append((per_step, short(name), block, grid, v["n"] / steps, us, mb, gbs, occ, regs))
    table.sort(reverse=True)
    print(f"steps {steps:g}; kernel time per step {total:.1f} us")
    print("| us/step | launches/step | us each | MB read | DRAM GB/s | warps active % | regs | kernel | block | grid |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for per_step, name, block, grid, n, us, mb, gbs, occ, regs in table:
        print(f"| {per_step:.1f} | {n:.2f} | {us:.2f} | {mb:.1f} | {gbs:.0f} | {occ:.0f} | {regs:.0f} | `{name}` | {block} | {grid} |")


main()
