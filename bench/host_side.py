#!/usr/bin/env python3
"""The host's side of a GPU training step, measured without a GPU: gmlp's own work for
each op (its checks, bookkeeping and uploads), with every launch, product, fill and
device copy counted and skipped by the CUDA emulator (GMLP_CUDA_EMULATOR_HOST_ONLY=1,
tests/cuda_emu/README.md). A GPU waits for this work between steps and wherever the
host falls behind; the CUDA runtime's own cost per launch comes on top, and only a GPU
shows it (docs/gpu.md, "The host's side of a step").

  python3 bench/host_side.py                          # ./build, the three workloads, two passes
  python3 bench/host_side.py --builds old=/tmp/a new=build   # two builds side by side, pass by pass

The workloads are bench/gpu_bench.py's, in bf16 (its --print-gmlp-command gives the
command lines). Per build and workload: the host's milliseconds per training step (the
median of `gmlp bench`'s timed steps) and the launches and matrix products a step
issues (the emulator's counts of two runs, repeats R and 2R, differenced).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
REPEATS = {"lm": 200, "bert": 100, "vision": 50}


def cpu_line() -> str:
    model, flags = "?", set()
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name") and model == "?":
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags") and not flags:
            flags = set(line.split(":", 1)[1].split())
    shown = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{model}, {os.cpu_count()} CPUs ({', '.join(shown) or 'no AVX2'})"


def commands(workloads: str) -> dict:
    # gpu_bench.py imports torch: Debian's python3 has it (python3-torch) where this one may not.
    python = "/usr/bin/python3" if pathlib.Path("/usr/bin/python3").exists() else sys.executable
    out = subprocess.run([python, str(ROOT / "bench" / "gpu_bench.py"), "--print-gmlp-command", "bf16",
                          "--workloads", workloads], check=True, capture_output=True, text=True).stdout
    return dict(zip(workloads.split(","), (shlex.split(line) for line in out.splitlines())))


def run(build: pathlib.Path, cmd: list, repeats: int) -> tuple[float, int, int]:
    """gmlp bench under the emulator's host-only switch: (median step s, launches, products)."""
    cmd = [str(build / "gmlp")] + cmd[1:]
    cmd[cmd.index("--repeats") + 1] = str(repeats)
    env = dict(os.environ, GMLP_CUDA_EMULATOR=str(build / "libgmlp_cuda_emu.so"), GMLP_CUDA_EMULATOR_HOST_ONLY="1",
               OMP_NUM_THREADS="2")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"host_side: {shlex.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    counts = re.search(r"host only\): (\d+) launches and (\d+) matrix products", r.stderr)
    if not counts:
        sys.exit(f"host_side: {build}'s emulator has no host-only switch:\n{r.stderr}")
    result = json.loads(r.stdout.strip().splitlines()[-1])
    return result["median_s"], int(counts[1]), int(counts[2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builds", nargs="+", default=["build"], metavar="[NAME=]DIR",
                    help="build directories holding gmlp and libgmlp_cuda_emu.so (default: build)")
    ap.add_argument("--workloads", default="lm,bert,vision")
    ap.add_argument("--passes", type=int, default=2)
    args = ap.parse_args()
    builds = []
    for b in args.builds:
        name, _, d = b.rpartition("=")
        path = pathlib.Path(d if pathlib.Path(d).is_absolute() else ROOT / d)
        for f in ("gmlp", "libgmlp_cuda_emu.so"):
            if not (path / f).exists():
                sys.exit(f"host_side: {path / f} does not exist (a build with the CUDA emulator)")
        builds.append((name or d, path))
    cmds = commands(args.workloads)
    print(f"CPU: {cpu_line()}; bf16 training steps, `gmlp bench` under GMLP_CUDA_EMULATOR_HOST_ONLY=1\n")
    print("| workload | build | host ms a step, pass by pass | launches a step | matrix products a step |")
    print("|---|---|---|---:|---:|")
    for w, cmd in cmds.items():
        rows = {name: [] for name, _ in builds}
        counts = {}
        for _ in range(args.passes):
            for name, path in builds:  # the builds side by side within each pass
                s, launches, products = run(path, cmd, 2 * REPEATS[w])
                rows[name].append(s)
                if name not in counts:
                    _, l1, p1 = run(path, cmd, REPEATS[w])
                    counts[name] = ((launches - l1) / REPEATS[w], (products - p1) / REPEATS[w])
        for name, _ in builds:
            times = ", ".join(f"{1e3 * s:.3f}" for s in rows[name])
            print(f"| {w} | {name} | {times} | {counts[name][0]:.0f} | {counts[name][1]:.0f} |")


if __name__ == "__main__":
    main()
