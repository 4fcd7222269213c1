#!/usr/bin/env python3
"""Side-by-side benchmark: `gmlp bench` against the PyTorch reference model
(bench/torch_bench.py) on the same configs, thread count and machine, in one run.

  /usr/bin/python3 bench/compare.py                       # tiny,small,annotated x 3 modes
  /usr/bin/python3 bench/compare.py --configs tiny --modes train --repeats 3

  /usr/bin/python3 bench/compare.py --busy                # the same with a core taken

Every (config, mode) runs each implementation in its own process, so peak RSS is per
mode. Each implementation runs first as a user gets it (its defaults: gmlp chooses how
OpenMP threads wait itself, PyTorch inherits libgomp's spinning), then in the other
OpenMP environments (gmlp: forced passive, forced spin; PyTorch: OMP_WAIT_POLICY=PASSIVE),
because on small virtual machines spinning workers are faster on an idle machine and far
slower on a busy one; where the environment sets OPENBLAS_CORETYPE, PyTorch also runs
without it (OpenBLAS's own choice of kernels, AVX-512 ones on an AVX-512 CPU). The
headline ratio is default against default; best against best follows. With --busy, another process spins on one core during every run. Prints a
Markdown report and writes the raw records. See docs/bench.md.
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
    flags = next((line.split(":", 1)[1].split() for line in sh(["lscpu"]).splitlines()
                  if line.startswith("Flags")), [])
    simd = [f for f in flags if f.startswith(("avx", "amx", "fma")) or f == "f16c"]
    return {"cpu": model, "flags": " ".join(simd) or "no AVX", "nproc": os.cpu_count(), "date": datetime.datetime.now().astimezone()
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
    if rec["mode"] in ("generate", "batchgen"):
        s = f"{rec['ms_per_token']:.2f} ms/tok"
        if rec["mode"] == "batchgen":
            s += f" ({rec['tokens_per_s']:,.0f} tok/s)"
        elif rec.get("ms_per_token_recompute") is not None:
            s += f" (recompute {rec['ms_per_token_recompute']:.2f})"
        return s
    return f"{rec['median_s'] * 1e3:.1f} ms ({rec['tokens_per_s']:,.0f} tok/s)"


def ok(rec: dict | None) -> bool:
    return bool(rec) and "error" not in rec


def cost(rec: dict) -> float:
    """What a row compares: seconds per step, or ms per generated token."""
    return rec["ms_per_token"] if rec["mode"] in ("generate", "batchgen") else rec["median_s"]


def ratio(g: dict | None, pt: dict | None) -> float | None:
    """PyTorch time / gmlp time (> 1: gmlp is faster); None when either failed."""
    return cost(pt) / cost(g) if ok(g) and ok(pt) else None


def speedup(g: dict | None, pt: dict | None) -> str:
    """Best PyTorch time / gmlp time (> 1: gmlp is faster)."""
    if not (ok(g) and ok(pt)):
        return "—"
    if g["mode"] not in ("generate", "batchgen"):
        return f"{ratio(g, pt):.2f}x"
    s = f"{ratio(g, pt):.2f}x"
    if g["mode"] == "generate" and g.get("ms_per_token_recompute"):  # like for like: both recompute the window
        s += f" (recompute {pt['ms_per_token'] / g['ms_per_token_recompute']:.2f}x)"
    return s


def best_of(*recs: dict | None) -> dict | None:
    return min((r for r in recs if ok(r)), key=lambda r: r["median_s"], default=None)


def table(rows: list[tuple]) -> str:
    out = ["| config | mode | gmlp (default) | gmlp (passive) | gmlp (spin) | pytorch (default) "
           "| pytorch (passive) | pytorch (own BLAS kernels) | speedup default vs default | speedup best vs best "
           "| gmlp default / gmlp best | peak RSS gmlp / pytorch (MB) | RSS ratio | gmlp MFU |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for gd, gp, gs, pd, pp, pk in rows:
        best = best_of(pd, pp, pk)
        g = best_of(gd, gp, gs)
        rss, ratio, mfu, own = "—", "—", "—", "—"
        if ok(gd) and ok(pd):
            rss = f"{gd['peak_rss_mb']:.0f} / {pd['peak_rss_mb']:.0f}"
            ratio = f"{gd['peak_rss_mb'] / pd['peak_rss_mb']:.2f}"
        if ok(gd) and gd.get("mfu") is not None:
            mfu = f"{100 * gd['mfu']:.1f}%"
        if ok(gd) and ok(g):
            own = f"{gd['median_s'] / g['median_s']:.2f}"
        mark = lambda r, b, group: fmt_time(r) + (" **best**" if r is b and all(map(ok, group)) else "")
        gmlp_group, torch_group = (gd, gp, gs), tuple(r for r in (pd, pp, pk) if r is not None)
        own_kernels = mark(pk, best, torch_group) if pk is not None else "—"
        out.append(f"| {pd['config']} | {pd['mode']} | {mark(gd, g, gmlp_group)} | {mark(gp, g, gmlp_group)} | "
                   f"{mark(gs, g, gmlp_group)} | {mark(pd, best, torch_group)} | {mark(pp, best, torch_group)} | "
                   f"{own_kernels} | {speedup(gd, pd)} | {speedup(g, best)} | {own} | {rss} | {ratio} | {mfu} |")
    return "\n".join(out)


def spread(values: list[float], fmt: str) -> str:
    """median (min–max) of the values that exist."""
    v = sorted(x for x in values if x is not None)
    if not v:
        return "—"
    med = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    return (fmt % med) + (f" ({fmt % v[0]}–{fmt % v[-1]})" if len(v) > 1 else "")


def summary(by_cell: dict) -> str:
    """One line per (config, mode) over the rounds: the spread of each round's ratios."""
    out = ["| config | mode | rounds | speedup default vs default | speedup best vs best "
           "| gmlp default / gmlp best | gmlp MFU |", "|---|---|---|---|---|---|---|"]
    for (config, mode), rows in by_cell.items():
        dd, bb, own, mfu = [], [], [], []
        for gd, gp, gs, pd, pp, pk in rows:
            g, best = best_of(gd, gp, gs), best_of(pd, pp, pk)
            dd.append(ratio(gd, pd))
            bb.append(ratio(g, best))
            own.append(cost(gd) / cost(g) if ok(gd) and ok(g) else None)
            mfu.append(100 * gd["mfu"] if ok(gd) and gd.get("mfu") is not None else None)
        out.append(f"| {config} | {mode} | {len(rows)} | {spread(dd, '%.2fx')} | {spread(bb, '%.2fx')} | "
                   f"{spread(own, '%.2f')} | {spread(mfu, '%.1f%%')} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description="gmlp bench vs the PyTorch reference model, "
                                 "side by side (see docs/bench.md)")
    ap.add_argument("--configs", default="tiny,small,annotated",
                    help="names under configs/ or paths to .json files")
    ap.add_argument("--modes", default="train,infer,generate,batchgen",
                    help="train, infer, generate (one prompt), batchgen (--streams prompts at once)")
    ap.add_argument("--streams", type=int, default=16, help="batchgen: prompts decoded together")
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
    ap.add_argument("--busy", action="store_true",
                    help="run another process spinning on one core during every run")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the whole sweep this many times; a table per round and the "
                         "spread of each row's ratios over the rounds")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds {args.rounds}: expected at least 1")
    modes = [m for m in args.modes.split(",") if m]
    if any(m not in ("train", "infer", "generate", "batchgen") for m in modes):
        ap.error(f"--modes {args.modes}: expected train, infer, generate and/or batchgen")

    gmlp = pathlib.Path(args.gmlp)
    if not gmlp.is_absolute():  # relative to the caller's directory, else to the repo
        gmlp = gmlp.resolve() if gmlp.exists() else ROOT / gmlp
    meta = machine()
    records, rounds = [], [[] for _ in range(args.rounds)]
    by_cell: dict = {}
    hog = None
    if args.busy:  # a plain spinning process: what "another job holds a core" means here
        hog = subprocess.Popen([PYTHON, "-c", "while True: pass"])
        time.sleep(0.5)
    paths = []
    for c in (c for c in args.configs.split(",") if c):
        path = pathlib.Path(c).resolve() if c.endswith(".json") else ROOT / "configs" / f"{c}.json"
        if not path.exists():
            ap.error(f"config {c}: {path} not found")
        paths.append(path)
    for k, path in ((k, p) for k in range(args.rounds) for p in paths):
        rows = rounds[k]
        plan = PLAN.get(path.stem, PLAN_DEFAULT)
        warmup = plan[0] if args.warmup is None else args.warmup
        repeats = plan[1] if args.repeats is None else args.repeats
        gen = plan[2] if args.gen_tokens is None else args.gen_tokens
        common = ["--config", str(path), "--warmup", str(warmup), "--repeats", str(repeats),
                  "--json"]
        for m in modes:
            print(f"[{path.stem} {m}" + (f", round {k + 1} of {args.rounds}]" if args.rounds > 1 else "]"),
                  file=sys.stderr, flush=True)
            tag = {"config": path.stem, "mode": m, "round": k + 1}
            # batchgen: generation with --streams prompts decoded together by both
            bench_mode = "generate" if m == "batchgen" else m
            streams = ["--streams", str(args.streams)] if m == "batchgen" else []
            gd = gp = gs = None
            if not args.skip_gmlp:
                # --threads is a global gmlp option. gmlp generates with its own default
                # of 2n tokens from an n/2 prompt, so its recompute runs on (nearly) full
                # windows like PyTorch's. Its default chooses the OpenMP wait policy
                # itself (include/gmlp/threads.h); the other two runs force one.
                gmlp_cmd = [str(gmlp), "--threads", str(args.threads), "bench", "--mode", bench_mode] + common + streams
                base_env = {k: v for k, v in os.environ.items()
                            if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "GMLP_OMP_WAIT")}
                gd = run_one(gmlp_cmd, base_env, args.timeout, {**tag, "impl": "gmlp", "env_label": "default"})
                cap = args.timeout
                if args.slow_cap > 0 and ok(gd):
                    cap = min(cap, max(30.0, args.slow_cap * gd["wall_s"]))
                gp = run_one(gmlp_cmd, {**base_env, "OMP_WAIT_POLICY": "PASSIVE"}, cap,
                             {**tag, "impl": "gmlp", "env_label": "passive"})
                gs = run_one(gmlp_cmd, {**base_env, "GOMP_SPINCOUNT": "300000"}, cap,
                             {**tag, "impl": "gmlp", "env_label": "spin"})
            torch_cmd = [PYTHON, str(ROOT / "bench" / "torch_bench.py"), "--mode", bench_mode,
                         "--threads", str(args.threads), "--gen-tokens", str(gen)] + common + streams
            pp = run_one(torch_cmd, {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}, args.timeout,
                         {**tag, "impl": "pytorch", "env_label": "passive"})
            # A default-environment run far slower than the passive one cannot be the best
            # PyTorch time; cap it so that spinning OpenMP workers cannot stall the run.
            cap = args.timeout
            if args.slow_cap > 0 and ok(pp):
                cap = min(cap, max(30.0, args.slow_cap * pp["wall_s"]))
            pd = run_one(torch_cmd, {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}, cap,
                         {**tag, "impl": "pytorch", "env_label": "default"})
            if cap < args.timeout and pd.get("error", "").startswith("timed out"):
                pd["error"] += f" (> {args.slow_cap:g}x the passive run)"
            # The environment's OPENBLAS_CORETYPE binds PyTorch's OpenBLAS (these machines
            # set Haswell: AVX2 on AVX-512 CPUs); without it OpenBLAS picks its own kernels.
            pk = None
            if os.environ.get("OPENBLAS_CORETYPE"):
                pk = run_one(torch_cmd, {k: v for k, v in os.environ.items()
                                         if k not in ("OMP_WAIT_POLICY", "OPENBLAS_CORETYPE")}, cap,
                             {**tag, "impl": "pytorch", "env_label": "own BLAS kernels"})
            records += [r for r in (gd, gp, gs, pd, pp, pk) if r]
            rows.append((gd, gp, gs, pd, pp, pk))
            by_cell.setdefault((path.stem, m), []).append((gd, gp, gs, pd, pp, pk))
            for r in (gd, gp, gs, pd, pp, pk):
                if r:
                    label = r["impl"] + (f" ({r['env_label']})" if "env_label" in r else "")
                    print(f"    {label}: {fmt_time(r)}", file=sys.stderr, flush=True)

    if hog:
        hog.kill()
        hog.wait()
    torch_version = next((r["torch_version"] for r in records if "torch_version" in r), "?")
    sgemm = next((r["sgemm_peak_gflops"] for r in records if r.get("sgemm_peak_gflops")), None)
    report = [f"# gmlp vs PyTorch ({meta['date']})", "",
              f"- machine: {meta['cpu']} ({meta['flags']}), nproc {meta['nproc']}; threads {args.threads}; "
              + ("**busy**: another process spins on one core throughout" if args.busy
                 else "idle (nothing else running)"),
              f"- PyTorch {torch_version} (fp32, python/gmlp/reference.py); "
              f"gmlp {args.gmlp} at git {meta['git'] or '?'}",
              f"- command: `{meta['command']}`"]
    if sgemm:
        report.append(f"- gmlp's measured SGEMM peak (MFU denominator): {sgemm:.1f} GFLOP/s")
    gmlp_choice = next((r["omp_wait"] for r in records if r.get("env_label") == "default" and "omp_wait" in r), None)
    if gmlp_choice:
        report.append(f"- gmlp's own choice of OpenMP waiting (default column), e.g.: {gmlp_choice}")
    gemm_choice = next((r["cpu_gemm"] for r in records if r.get("env_label") == "default" and "cpu_gemm" in r), None)
    if gemm_choice:
        report.append(f"- gmlp's fp32 products: {gemm_choice}")
    malloc = next((r["malloc"] for r in records if r.get("env_label") == "default" and "malloc" in r), None)
    if malloc:
        report.append(f"- gmlp's malloc: {malloc} (PyTorch's: glibc's, the interpreter's)")
    report.append("- BLAS environment: " + (f"OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']} (PyTorch's "
                  "default runs OpenBLAS on these kernels; the 'own BLAS kernels' column without it)"
                  if os.environ.get("OPENBLAS_CORETYPE") else "OPENBLAS_CORETYPE not set (OpenBLAS picks its kernels)"))
    report += ["- times: median per training step / inference step / generated token; "
               "speedup = PyTorch time / gmlp time (> 1: gmlp faster)"]
    if args.rounds == 1:
        report += ["", table(rounds[0])]
    else:
        for k, rows in enumerate(rounds):
            report += ["", f"Round {k + 1} of {args.rounds}:", "", table(rows)]
        report += ["", f"Over the {args.rounds} rounds, each row's ratio per round: median (min–max):", "",
                   summary(by_cell)]
    print("\n".join(report))
    out = ROOT / args.out if not os.path.isabs(args.out) else pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": {**meta, "threads": args.threads, "rounds": args.rounds,
                                        "torch_version": torch_version},
                               "records": records}, indent=1) + "\n")
    print(f"\nraw records: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
