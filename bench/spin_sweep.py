#!/usr/bin/env python3
"""How long should OpenMP's idle workers spin? `gmlp bench` under several GOMP_SPINCOUNT
values, each on an idle machine and with another process spinning on one core, in
rounds that alternate the settings so that the machine's drift hits all of them alike.

  /usr/bin/python3 bench/spin_sweep.py                          # tiny,small x train,infer
  /usr/bin/python3 bench/spin_sweep.py --spins 0,3000,300000 --rounds 3

A spin count fixed when the process starts is what a run lives with when load arrives
later, so the busy column of a count is also what a run that chose it on an idle
machine gets once another job starts. Prints a Markdown table (median step time of each
setting over its rounds, and its ratio to the best setting in the same column) and
writes the raw records. See docs/bench.md, "How long to spin".
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from compare import PYTHON, ROOT, machine, ok, run_one  # noqa: E402


def label(spins: int) -> str:
    return "passive" if spins == 0 else f"{spins:,}"


def main() -> None:
    ap = argparse.ArgumentParser(description="gmlp bench under several OpenMP spin counts, idle and busy")
    ap.add_argument("--configs", default="tiny,small")
    ap.add_argument("--modes", default="train,infer")
    ap.add_argument("--spins", default="0,1000,10000,30000,100000,300000",
                    help="GOMP_SPINCOUNT values; 0 runs OMP_WAIT_POLICY=PASSIVE")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--gmlp", default="build/gmlp")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--hogs", type=int, default=1, help="spinning processes in the busy runs")
    ap.add_argument("--out", default="bench/spin_sweep.json")
    args = ap.parse_args()
    try:
        spins = [int(s) for s in args.spins.split(",") if s]
    except ValueError:
        ap.error(f"--spins {args.spins}: expected comma-separated integers")
    if args.hogs < 1 or args.rounds < 1:
        ap.error("--hogs and --rounds must be at least 1")
    if not spins or min(spins) < 0:
        ap.error(f"--spins {args.spins}: expected non-negative integers")
    gmlp = ROOT / args.gmlp if not os.path.isabs(args.gmlp) else pathlib.Path(args.gmlp)
    if not gmlp.exists():
        ap.error(f"--gmlp {gmlp}: not found (bash scripts/build.sh)")
    base_env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "GMLP_OMP_WAIT")}
    meta = machine()
    records = []
    cases = [(c, m) for c in args.configs.split(",") if c for m in args.modes.split(",") if m]
    for r in range(args.rounds):
        for busy in (False, True):
            hogs = [subprocess.Popen([PYTHON, "-c", "while True: pass"]) for _ in range(args.hogs if busy else 0)]
            if hogs:
                time.sleep(0.5)
            try:
                for c, m in cases:
                    cmd = [str(gmlp), "--threads", str(args.threads), "bench", "--mode", m,
                           "--config", str(ROOT / "configs" / f"{c}.json"), "--warmup", "2",
                           "--repeats", str(args.repeats), "--json"]
                    for s in spins:
                        env = {**base_env, **({"OMP_WAIT_POLICY": "PASSIVE"} if s == 0 else {"GOMP_SPINCOUNT": str(s)})}
                        tag = {"config": c, "mode": m, "spins": s, "busy": busy, "round": r}
                        rec = run_one(cmd, env, args.timeout, tag)
                        records.append(rec)
                        shown = f"{rec['median_s'] * 1e3:.1f} ms" if ok(rec) else rec["error"]
                        print(f"  round {r} {'busy' if busy else 'idle'} {c} {m} {label(s)}: {shown}",
                              file=sys.stderr, flush=True)
            finally:
                for hog in hogs:
                    hog.kill()
                    hog.wait()

    def median(c: str, m: str, s: int, busy: bool) -> float | None:
        times = [x["median_s"] for x in records if ok(x) and (x["config"], x["mode"], x["spins"], x["busy"]) == (c, m, s, busy)]
        return statistics.median(times) if times else None

    head = ["config", "mode"] + [f"{label(s)} idle / busy" for s in spins]
    lines = [f"# OpenMP spin counts ({meta['date']})", "",
             f"- machine: {meta['cpu']} ({meta['flags']}), nproc {meta['nproc']}; threads {args.threads}; "
             f"busy = {args.hogs} other process(es) spinning, one core each",
             f"- gmlp {args.gmlp} at git {meta['git'] or '?'}; command: `{meta['command']}`",
             f"- each cell: median over {args.rounds} rounds of the median step time, in ms, idle / busy; "
             "in brackets its ratio to the fastest setting of the same column (1.00 = fastest)", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c, m in cases:
        idle = {s: median(c, m, s, False) for s in spins}
        busy = {s: median(c, m, s, True) for s in spins}
        best_i = min((v for v in idle.values() if v), default=None)
        best_b = min((v for v in busy.values() if v), default=None)
        cells = []
        for s in spins:
            i, b = idle[s], busy[s]
            fi = f"{i * 1e3:.1f} ({i / best_i:.2f})" if i else "—"
            fb = f"{b * 1e3:.1f} ({b / best_b:.2f})" if b else "—"
            cells.append(f"{fi} / {fb}")
        lines.append(f"| {c} | {m} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    out = ROOT / args.out if not os.path.isabs(args.out) else pathlib.Path(args.out)
    out.write_text(json.dumps({"meta": {**meta, "threads": args.threads}, "records": records}, indent=1) + "\n")
    print(f"\nraw records: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
