#!/usr/bin/env python3
"""Sums an Nsight Compute CSV (ncu --csv --metrics gpu__time_duration.sum) per kernel
name: calls, total and mean device time, share, and the grid and block of its longest
launch; the kernels that take the most time first (scripts/gpu_checks.sh ncu).

  python3 bench/ncu_table.py ncu-vision.csv [--top 30]
"""
import argparse
import csv
import re

UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def short(name: str) -> str:
    """The kernel's name without its parameter list, and templates' arguments elided past 60 characters."""
    depth, out = 0, []
    for ch in name:  # cut at the first top-level '('
        if ch == "(" and depth == 0 and out:
            break
        depth += ch == "<"
        depth -= ch == ">"
        out.append(ch)
    s = "".join(out).strip()
    s = re.sub(r"^void ", "", s)
    return s if len(s) <= 90 else s[:87] + "..."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        rows = list(csv.DictReader(line for line in f if line.startswith('"')))
    kernels: dict = {}
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        us = float(r["Metric Value"].replace(",", "")) * UNITS[r["Metric Unit"]]
        k = kernels.setdefault(short(r["Kernel Name"]), {"calls": 0, "us": 0.0, "max": 0.0, "shape": ""})
        k["calls"] += 1
        k["us"] += us
        if us > k["max"]:
            k["max"], k["shape"] = us, f"grid {r.get('Grid Size', '?')} block {r.get('Block Size', '?')}"
    total = sum(k["us"] for k in kernels.values())
    print(f"{a.csv}: {sum(k['calls'] for k in kernels.values())} kernels, {total / 1e3:.3f} ms of device time")
    print(f"| kernel | calls | total (us) | mean (us) | share | longest launch |")
    print("|---|---:|---:|---:|---:|---|")
    for name, k in sorted(kernels.items(), key=lambda kv: -kv[1]["us"])[: a.top]:
        print(f"| `{name}` | {k['calls']} | {k['us']:.1f} | {k['us'] / k['calls']:.1f} | "
              f"{100 * k['us'] / max(total, 1e-9):.1f}% | {k['shape']} |")


if __name__ == "__main__":
    main()
