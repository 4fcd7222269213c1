#!/usr/bin/env python3
"""Sums an Nsight Compute CSV (ncu --csv --metrics gpu__time_duration.sum) per kernel
name: calls, total and mean device time, share, and the grid and block of its longest
launch; the kernels that take the most time first (scripts/gpu_checks.sh ncu). With
--detail, a CSV of sections and metrics (gpu_checks.sh ncu-detail) as one row per kernel
name: the means over its launches of duration, DRAM bandwidth, occupancy, registers
and the stall reasons asked for.

  python3 bench/ncu_table.py ncu-vision.csv [--top 30]
  python3 bench/ncu_table.py --detail ncu-detail-lm-backward.csv
"""
import argparse
import csv
import re

UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def short(name: str) -> str:
    """The kernel's name without its parameter list or the backend's namespaces, and
    templates' arguments elided past 90 characters."""
    # The kernels of a .cu file's anonymous namespace: its "(...)" is no parameter list.
    name = name.replace("(anonymous namespace)::", "").replace("gmlp::cuda::", "")
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


# --detail's columns: (heading, metric names as ncu's sections or --metrics print them).
DETAIL = [
    ("µs", ("Duration", "gpu__time_duration.sum")),
    ("DRAM GB/s", ()),  # from the two byte counts and the duration
    ("DRAM % of peak", ("DRAM Throughput",)),
    ("SM % of peak", ("Compute (SM) Throughput",)),
    ("occupancy %, achieved", ("Achieved Occupancy",)),
    ("theoretical", ("Theoretical Occupancy",)),
    ("registers", ("Registers Per Thread",)),
    # Whether a kernel is held by what it issues rather than by its bytes: at 3 TB/s a
    # value of 6 bytes leaves an H100 time for about 60 instructions (docs/bench-gpu.md).
    ("issue slots busy %", ("sm__inst_issued.avg.pct_of_peak_sustained_active",)),
    ("warp instructions (M)", ()),  # smsp__inst_executed.sum, in millions
    ("stalled: no instruction %", ("smsp__warp_issue_stalled_no_instruction_per_warp_active.pct",)),
    ("long scoreboard %", ("smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",)),
    ("barrier %", ("smsp__warp_issue_stalled_barrier_per_warp_active.pct",)),
]


def number(r: dict) -> float:
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "")
    return v * UNITS[unit] if unit in UNITS else v  # times in µs, the rest as printed


def detail(rows: list) -> None:
    per: dict = {}  # kernel -> launch id -> metric -> value
    for r in rows:
        try:
            v = number(r)
        except ValueError:
            continue
        per.setdefault(short(r["Kernel Name"]), {}).setdefault(r["ID"], {})[r["Metric Name"]] = v
    print("| kernel | launches | " + " | ".join(h for h, _ in DETAIL) + " |")
    print("|---|---:|" + "---:|" * len(DETAIL))
    for name, launches in sorted(per.items()):
        cells = []
        for heading, names in DETAIL:
            vals = []
            for m in launches.values():
                if heading == "DRAM GB/s":
                    t = m.get("Duration", m.get("gpu__time_duration.sum"))
                    if t and "dram__bytes_read.sum" in m and "dram__bytes_write.sum" in m:
                        vals.append((m["dram__bytes_read.sum"] + m["dram__bytes_write.sum"]) / (t * 1e3))
                elif heading == "warp instructions (M)":
                    if "smsp__inst_executed.sum" in m:
                        vals.append(m["smsp__inst_executed.sum"] / 1e6)
                else:
                    vals += [m[n] for n in names if n in m][:1]
            cells.append(f"{sum(vals) / len(vals):.1f}" if vals else "")
        print(f"| `{name}` | {len(launches)} | " + " | ".join(cells) + " |")


def read_rows(path: str) -> list:
    with open(path, newline="") as f:
        return list(csv.DictReader(line for line in f if line.startswith('"')))


def kernel_times(rows: list, name=short) -> dict:
    """Per kernel (as name() gives it): calls, total µs, and its longest launch's time and shape."""
    kernels: dict = {}
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        us = float(r["Metric Value"].replace(",", "")) * UNITS[r["Metric Unit"]]
        k = kernels.setdefault(name(r["Kernel Name"]), {"calls": 0, "us": 0.0, "max": 0.0, "shape": ""})
        k["calls"] += 1
        k["us"] += us
        if us > k["max"]:
            k["max"], k["shape"] = us, f"grid {r.get('Grid Size', '?')} block {r.get('Block Size', '?')}"
    return kernels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--detail", action="store_true", help="a CSV of sections and metrics: one row per kernel")
    a = ap.parse_args()
    rows = read_rows(a.csv)
    if a.detail:
        detail(rows)
        return
    kernels = kernel_times(rows, short)
    total = sum(k["us"] for k in kernels.values())
    print(f"{a.csv}: {sum(k['calls'] for k in kernels.values())} kernels, {total / 1e3:.3f} ms of device time")
    print(f"| kernel | calls | total (us) | mean (us) | share | longest launch |")
    print("|---|---:|---:|---:|---:|---|")
    for name, k in sorted(kernels.items(), key=lambda kv: -kv[1]["us"])[: a.top]:
        print(f"| `{name}` | {k['calls']} | {k['us']:.1f} | {k['us'] / k['calls']:.1f} | "
              f"{100 * k['us'] / max(total, 1e-9):.1f}% | {k['shape']} |")


if __name__ == "__main__":
    main()
