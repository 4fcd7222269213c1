#!/usr/bin/env python3
"""Sets the predictions written without a GPU (bench/predictions.json) beside what a GPU
session measured: its Nsight Compute CSVs (ncu-<workload>.csv, scripts/gpu_checks.sh ncu)
and its benchmark's JSON (gpu-results-*.json), both in the session's log folder
(gpu_session.sh packs them into gpu-session.tgz). Prints one markdown table: each
prediction, the figure it started from, its range, the measurement, met or not.

  python3 bench/predictions.py DIR                  # DIR: the unpacked session logs
  python3 bench/predictions.py DIR --file other.json
"""
from __future__ import annotations

import argparse
import functools
import json
import pathlib
import re
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ncu_table import kernel_times, read_rows  # noqa: E402


def kernel_mean_us(folder: pathlib.Path, workload: str, match: str) -> tuple[float, int] | None:
    """The mean device time of a call of the kernels whose full name matches, and their calls."""
    path = folder / f"ncu-{workload}.csv"
    if not path.exists():
        return None
    hits = [k for name, k in kernel_times(read_rows(str(path)), name=lambda n: n).items() if re.search(match, name)]
    calls = sum(k["calls"] for k in hits)
    return (sum(k["us"] for k in hits) / calls, calls) if calls else (float("nan"), 0)


@functools.cache
def bench_records(folder: pathlib.Path) -> list:
    """Every record of the results files there."""
    out = []
    for f in sorted(folder.glob("gpu-results-*.json")):
        try:
            out += json.loads(f.read_text())
        except ValueError:  # a bench cut off as it wrote: its figures are in its log
            print(f"{f}: not whole JSON; skipped", file=sys.stderr)
    return out


def bench_ms(folder: pathlib.Path, workload: str, key: str) -> list:
    """gmlp bf16's figure (step_s or loop_s) in ms, pass by pass."""
    return [r[key] * 1e3 for r in bench_records(folder)
            if r.get("workload") == workload and r.get("impl") == "gmlp bf16" and key in r]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=pathlib.Path)
    ap.add_argument("--file", type=pathlib.Path, default=pathlib.Path(__file__).with_name("predictions.json"))
    a = ap.parse_args()
    if not a.folder.is_dir():
        ap.error(f"{a.folder}: not a folder (the unpacked logs of a GPU session)")
    preds = json.loads(a.file.read_text())["predictions"]
    print("| written in | what | workload | before | predicted | measured | |")
    print("|---|---|---|---:|---:|---:|---|")
    for p in preds:
        lo, hi = p["predicted"]
        unit = "µs a call" if p["kind"] == "kernel" else "ms"
        if p["kind"] == "kernel":
            got = kernel_mean_us(a.folder, p["workload"], p["match"])
            if got is None:
                cell, verdict = "no ncu-" + p["workload"] + ".csv", "not measured"
            elif got[1] == 0:
                cell, verdict = f"no kernel matched /{p['match']}/", "not measured"
            else:
                cell, verdict = f"{got[0]:.1f} ({got[1]} calls)", "met" if got[0] <= hi else "not met"
        else:
            ms = bench_ms(a.folder, p["workload"], "step_s" if p["kind"] == "step" else "loop_s")
            if not ms:
                cell, verdict = "no gmlp bf16 row", "not measured"
            else:
                cell = ", ".join(f"{x:.2f}" for x in ms) + f" (median {statistics.median(ms):.2f})"
                verdict = "met" if statistics.median(ms) <= hi else "not met"
        print(f"| {p['written']} | {p['what']} | {p['workload']} | {p['before']} | {lo}–{hi} {unit} | {cell} "
              f"| {verdict} |")


if __name__ == "__main__":
    main()
