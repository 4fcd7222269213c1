#!/usr/bin/env python3
"""gmlp's CPU code paths side by side (docs/bench.md, "Which library multiplies").

Runs `gmlp bench` on each config and mode under each path, the paths alternating within
every round so that the machine's drift falls on all of them alike:

- fp32 on OpenBLAS (GMLP_CPU_GEMM=openblas), with the kernels OpenBLAS picks or the
  environment's OPENBLAS_CORETYPE sets;
- fp32 as gmlp chooses (oneDNN's SGEMM on AVX-512 CPUs where OpenBLAS runs narrower
  kernels, else OpenBLAS);
- bf16 products (--precision bf16) where the CPU has AVX512-BF16 or AMX; elsewhere the
  column says why not (the emulation measures nothing of bf16's speed).

Prints a Markdown table: each path's median step time over the rounds (of each run's
median), and each against fp32 on OpenBLAS.

    /usr/bin/python3 bench/cpu_paths.py [--configs tiny,small,annotated] [--modes train,infer] [--rounds 3]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bf16_accuracy import cpu_header  # noqa: E402

PLAN = {"annotated": (1, 3)}  # (warmup, repeats); others (2, 8)


def bench(exe, config, mode, threads, env_extra, precision):
    env = {k: v for k, v in os.environ.items() if k != "GMLP_CPU_GEMM"}
    env.update(env_extra)
    warmup, repeats = PLAN.get(config, (2, 8))
    cmd = [exe, "--threads", str(threads), "bench", "--config", str(REPO / "configs" / f"{config}.json"),
           "--mode", mode, "--warmup", str(warmup), "--repeats", str(repeats), "--precision", precision, "--json"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"cpu_paths: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="tiny,small,annotated")
    ap.add_argument("--modes", default="train,infer")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    exe = str(REPO / "build" / "gmlp")
    model, flags, bf16 = cpu_header()
    paths = [("fp32, OpenBLAS", {"GMLP_CPU_GEMM": "openblas"}, "fp32"), ("fp32, gmlp's choice", {}, "fp32")]
    if bf16:
        paths.append(("bf16", {}, "bf16"))
    cells = [(c, m) for c in a.configs.split(",") if c for m in a.modes.split(",") if m]
    times = {(c, m, p[0]): [] for c, m in cells for p in paths}
    notes = {}
    for k in range(a.rounds):
        for c, m in cells:
            print(f"[{c} {m}, round {k + 1} of {a.rounds}]", file=sys.stderr, flush=True)
            for name, env, precision in paths:
                rec = bench(exe, c, m, a.threads, env, precision)
                times[(c, m, name)].append(rec["median_s"])
                notes[name] = rec.get("cpu_gemm", "") if precision == "fp32" else "oneDNN bf16 (AVX512-BF16/AMX)"
    print(f"CPU: {model}; flags: {' '.join(flags)}; threads {a.threads}; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(not set)')}")
    for name, _, _ in paths:
        print(f"- {name}: {notes[name]}")
    if not bf16:
        print("- bf16: not run (no AVX512-BF16 or AMX on this CPU)")
    print(f"- each cell: median over {a.rounds} rounds of each run's median step time, ms; "
          "in brackets, fp32 on OpenBLAS's time / this path's (> 1: faster)\n")
    print("| config | mode | " + " | ".join(p[0] for p in paths) + " |")
    print("|---|---|" + "---|" * len(paths))
    for c, m in cells:
        base = median(times[(c, m, paths[0][0])])
        row = []
        for name, _, _ in paths:
            t = median(times[(c, m, name)])
            row.append(f"{1e3 * t:.1f}" + ("" if name == paths[0][0] else f" ({base / t:.2f}x)"))
        print(f"| {c} | {m} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
