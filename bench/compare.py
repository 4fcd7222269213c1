#!/usr/bin/env python3
"""Side-by-side benchmark: `gmlp bench` against the PyTorch reference model
(bench/torch_bench.py) on the same configs, thread count and machine, in one run.

  /usr/bin/python3 bench/compare.py                       # tiny,small,annotated x 3 modes
  /usr/bin/python3 bench/compare.py --configs tiny --modes train --repeats 3

Every (config, mode) runs each implementation in its own process, so peak RSS is per
mode. Each implementation runs in two OpenMP environments, because on small virtual
machines spinning OpenMP workers are faster on an idle machine and far slower on a busy
one: PyTorch with the inherited environment (libgomp spins) and with
OMP_WAIT_POLICY=PASSIVE; gmlp with its default (it sets PASSIVE itself) and with
GOMP_SPINCOUNT=30000. The headline ratio is best against best; passive against passive
is shown too. Prints a Markdown report and writes the raw records.
See docs/bench.md.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import shlex
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
# (warmup, repeats, gen_tokens) per config when --warmup/--repeats/--gen-tokens are not
# given: the annotated config's PyTorch training step takes seconds on 2 cores.
PLAN = {"tiny": (2, 5, 32), "small": (2, 5, 32), "annotated": (1, 3, 16)}
PLAN_DEFAULT = (2, 5, 32)


def sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in sh(["lscpu"]).splitlines()
                  if line.startswith("Model name")), "unknown")
    rev = sh(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = sh(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"])
    return {"cpu": model, "nproc": os.cpu_count(), "date": datetime.datetime.now().astimezone()
            .isoformat(timespec="seconds"), "git": rev + ("-dirty" if dirty else ""),
            "command": shlex.join([PYTHON] + sys.argv)}


def run_one(cmd: list[str], env: dict, timeout: float, tag: dict) -> dict:
    """Runs a bench process; returns its JSON record (last stdout line) or an error one."""
    print(f"  $ {shlex.join(cmd)}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**tag, "error": f"timed out after {timeout:.0f} s"}
    except OSError as e:
        return {**tag, "error": str(e)}
    wall = time.perf_counter() - t0
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        err = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return {**tag, "error": f"exit {p.returncode}: {err}"}
    try:
        rec = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {**tag, "error": f"not JSON: {lines[-1][:120]}"}
    return {**rec, **tag, "wall_s": wall}


def fmt_time(rec: dict | None) -> str:
    if not rec:
        return "—"
    if "error" in rec:
        return f"error ({rec['error']})"
    if rec["mode"] == "generate":
        s = f"{rec['ms_per_token']:.2f} ms/tok"
        if rec.get("ms_per_token_recompute") is not None:
            s += f" (recompute {rec['ms_per_token_recompute']:.2f})"
        return s
    return f"{rec['median_s'] * 1e3:.1f} ms ({rec['tokens_per_s']:,.0f} tok/s)"


def ok(rec: dict | None) -> bool:
    return bool(rec) and "error" not in rec


def speedup(g: dict | None, pt: dict | None) -> str:
    """Best PyTorch time / gmlp time (> 1: gmlp is faster)."""
    if not (ok(g) and ok(pt)):
        return "—"
    if g["mode"] != "generate":
        return f"{pt['median_s'] / g['median_s']:.2f}x"
    s = f"{pt['ms_per_token'] / g['ms_per_token']:.2f}x"
    if g.get("ms_per_token_recompute"):  # like for like: both recompute the window
        s += f" (recompute {pt['ms_per_token'] / g['ms_per_token_recompute']:.2f}x)"
    return s


def best_of(*recs: dict | None) -> dict | None:
    return min((r for r in recs if ok(r)), key=lambda r: r["median_s"], default=None)


def table(rows: list[tuple[dict | None, dict | None, dict, dict]]) -> str:
    out = ["| config | mode | gmlp (passive) | gmlp (spin) | pytorch (default env) | pytorch (passive) "
           "| speedup best vs best | speedup passive vs passive | peak RSS gmlp / pytorch (MB) "
           "| RSS ratio | gmlp MFU |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for gp, gs, pd, pp in rows:
        best = best_of(pd, pp)
        g = best_of(gp, gs)
        rss, ratio, mfu = "—", "—", "—"
        if ok(g) and ok(best):
            rss = f"{g['peak_rss_mb']:.0f} / {best['peak_rss_mb']:.0f}"
            ratio = f"{g['peak_rss_mb'] / best['peak_rss_mb']:.2f}"
        elif ok(best):
            rss = f"— / {best['peak_rss_mb']:.0f}"
        if ok(g) and g.get("mfu") is not None:
            mfu = f"{100 * g['mfu']:.1f}%"
        mark = lambda r, b, pair: fmt_time(r) + (" **best**" if r is b and all(map(ok, pair)) else "")
        out.append(f"| {pd['config']} | {pd['mode']} | {mark(gp, g, (gp, gs))} | {mark(gs, g, (gp, gs))} | "
                   f"{mark(pd, best, (pd, pp))} | {mark(pp, best, (pd, pp))} | {speedup(g, best)} | "
                   f"{speedup(gp, pp)} | {rss} | {ratio} | {mfu} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description="gmlp bench vs the PyTorch reference model, "
                                 "side by side (see docs/bench.md)")
    ap.add_argument("--configs", default="tiny,small,annotated",
                    help="names under configs/ or paths to .json files")
    ap.add_argument("--modes", default="train,infer,generate")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gmlp", default="build/gmlp")
    ap.add_argument("--warmup", type=int, help="untimed steps; per-config defaults of "
                    "(warmup, repeats, gen tokens): %s" % PLAN)
    ap.add_argument("--repeats", type=int, help="timed steps (default per config)")
    ap.add_argument("--gen-tokens", type=int,
                    help="tokens PyTorch generates (default per config; gmlp: its own 2n)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per process")
    ap.add_argument("--slow-cap", type=float, default=5.0,
                    help="stop a default-env PyTorch run after this many times the passive "
                         "run's wall time (0: no cap)")
    ap.add_argument("--out", default="bench/results.json")
    ap.add_argument("--skip-gmlp", action="store_true", help="PyTorch side only")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if any(m not in ("train", "infer", "generate") for m in modes):
        ap.error(f"--modes {args.modes}: expected train, infer and/or generate")

    gmlp = pathlib.Path(args.gmlp)
    if not gmlp.is_absolute():  # relative to the caller's directory, else to the repo
        gmlp = gmlp.resolve() if gmlp.exists() else ROOT / gmlp
    meta = machine()
    records, rows = [], []
    for c in (c for c in args.configs.split(",") if c):
        path = pathlib.Path(c).resolve() if c.endswith(".json") else ROOT / "configs" / f"{c}.json"
        if not path.exists():
            ap.error(f"config {c}: {path} not found")
        plan = PLAN.get(path.stem, PLAN_DEFAULT)
        warmup = plan[0] if args.warmup is None else args.warmup
        repeats = plan[1] if args.repeats is None else args.repeats
        gen = plan[2] if args.gen_tokens is None else args.gen_tokens
        common = ["--config", str(path), "--warmup", str(warmup), "--repeats", str(repeats),
                  "--json"]
        for m in modes:
            print(f"[{path.stem} {m}]", file=sys.stderr, flush=True)
            tag = {"config": path.stem, "mode": m}
            gp = gs = None
            if not args.skip_gmlp:
                # --threads is a global gmlp option. gmlp generates with its own default
                # of 2n tokens from an n/2 prompt, so its recompute runs on (nearly) full
                # windows like PyTorch's; it sets OMP_WAIT_POLICY=PASSIVE itself unless
                # GOMP_SPINCOUNT or OMP_WAIT_POLICY is set.
                gmlp_cmd = [str(gmlp), "--threads", str(args.threads), "bench", "--mode", m] + common
                base_env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
                gp = run_one(gmlp_cmd, base_env, args.timeout, {**tag, "impl": "gmlp", "env_label": "passive"})
                cap = args.timeout
                if args.slow_cap > 0 and ok(gp):
                    cap = min(cap, max(30.0, args.slow_cap * gp["wall_s"]))
                gs = run_one(gmlp_cmd, {**base_env, "GOMP_SPINCOUNT": "30000"}, cap,
                             {**tag, "impl": "gmlp", "env_label": "spin"})
            torch_cmd = [PYTHON, str(ROOT / "bench" / "torch_bench.py"), "--mode", m,
                         "--threads", str(args.threads), "--gen-tokens", str(gen)] + common
            pp = run_one(torch_cmd, {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}, args.timeout,
                         {**tag, "impl": "pytorch", "env_label": "passive"})
            # A default-environment run far slower than the passive one cannot be the best
            # PyTorch time; cap it so that spinning OpenMP workers cannot stall the run.
            cap = args.timeout
            if args.slow_cap > 0 and ok(pp):
                cap = min(cap, max(30.0, args.slow_cap * pp["wall_s"]))
            pd = run_one(torch_cmd, dict(os.environ), cap,
                         {**tag, "impl": "pytorch", "env_label": "default"})
            if cap < args.timeout and pd.get("error", "").startswith("timed out"):
                pd["error"] += f" (> {args.slow_cap:g}x the passive run)"
            records += [r for r in (gp, gs, pd, pp) if r]
            rows.append((gp, gs, pd, pp))
            for r in (gp, gs, pd, pp):
                if r:
                    label = r["impl"] + (f" ({r['env_label']})" if "env_label" in r else "")
                    print(f"    {label}: {fmt_time(r)}", file=sys.stderr, flush=True)

    torch_version = next((r["torch_version"] for r in records if "torch_version" in r), "?")
    sgemm = next((r["sgemm_peak_gflops"] for r in records if r.get("sgemm_peak_gflops")), None)
    report = [f"# gmlp vs PyTorch ({meta['date']})", "",
              f"- machine: {meta['cpu']}, nproc {meta['nproc']}; threads {args.threads}",
              f"- PyTorch {torch_version} (fp32, python/gmlp/reference.py); "
              f"gmlp {args.gmlp} at git {meta['git'] or '?'}",
              f"- command: `{meta['command']}`"]
    if sgemm:
        report.append(f"- gmlp's measured SGEMM peak (MFU denominator): {sgemm:.1f} GFLOP/s")
    report += ["- times: median per training step / inference step / generated token; "
               "speedup = best PyTorch time / gmlp time (> 1: gmlp faster)", "",
               table(rows)]
    print("\n".join(report))
    out = ROOT / args.out if not os.path.isabs(args.out) else pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": {**meta, "threads": args.threads,
                                        "torch_version": torch_version},
                               "records": records}, indent=1) + "\n")
    print(f"\nraw records: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
