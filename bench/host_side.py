#!/usr/bin/env python3
"""The host's side of a GPU training step, measured without a GPU: gmlp's own work for
each op (its checks, bookkeeping and uploads), with every launch, product, fill and
device copy counted and skipped by the CUDA emulator (GMLP_CUDA_EMULATOR_HOST_ONLY=1,
tests/cuda_emu/README.md). A GPU waits for this work between steps and wherever the
host falls behind; the CUDA runtime's own cost per launch comes on top, and only a GPU
shows it (docs/gpu.md, "The host's side of a step").

  python3 bench/host_side.py                          # ./build, the three workloads, two passes
  python3 bench/host_side.py --builds old=/tmp/a new=build   # two builds side by side, pass by pass
  python3 bench/host_side.py --workloads vision-files  # `gmlp train` on image files instead
  python3 bench/host_side.py --workloads vision-files,vision-files-mix,vision-files-deit   # and DeiT's recipe
  python3 bench/host_side.py --builds old=/tmp/a new=build --kernels   # and each kernel's launches a step

The workloads are bench/gpu_bench.py's, in bf16 (its --print-gmlp-command gives the
command lines). Per build and workload: the host's milliseconds per training step (the
median of `gmlp bench`'s timed steps) and the launches and matrix products a step
issues, and how often a step the device would wait for the host (from each wait for the
device's work: a read-back, an upload from pageable memory, a synchronisation, to the
next work queued): the emulator's counts of two runs, repeats R and 2R, differenced.

`vision-files` is `gmlp train` of gMLP-S/16 (one channel, batch 64, bf16) on 512
random 224x224 images in an IDX folder written for it: a run from files draws, shifts
and uploads each batch, which the bench, with its batch kept on the device, never does.
Per build: the host's milliseconds a step (the trainer's own images/s over the run's
second half); how often a step the device would sit idle waiting for the host (the
emulator's count of the stretches from a wait for the device's work to the next work
queued for it, over runs of S and 2S steps, differenced); and the median of those
stretches (a run's few set-up waits aside, a step's), which is what a GPU that had
finished its step loses to the host before the next. The emulator with these counts
came in session 44: an older build is measured with the new emulator's files copied in.
`vision-files-mix` is the same run with DeiT's mixing: mirror images, mixup (alpha 0.8)
or CutMix (alpha 1) each batch, label smoothing 0.1 (train.mixup and the rest,
docs/vision.md); `vision-files-deit` adds its RandAugment (rand-m9-mstd0.5-inc1, bicubic) and
its random erasing of a quarter of the images.
Both send their batches up as floats, four times the bytes.
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


def host_only(build: pathlib.Path, cmd: list) -> subprocess.CompletedProcess:
    """build's gmlp running cmd (its arguments) on the emulator under its host-only switch; exits on failure."""
    cmd = [str(build / "gmlp")] + cmd
    env = dict(os.environ, GMLP_CUDA_EMULATOR=str(build / "libgmlp_cuda_emu.so"), GMLP_CUDA_EMULATOR_HOST_ONLY="1",
               OMP_NUM_THREADS="2")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"host_side: {shlex.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r


def by_kernel(stderr: str) -> dict:
    """The emulator's launches by kernel (its name at the launch site), from its host-only report."""
    return {m[2]: int(m[1]) for m in re.finditer(r"host only\): (\d+) launches of (.+)", stderr)}


def run(build: pathlib.Path, cmd: list, repeats: int) -> tuple[float, int, int, int, dict, float]:
    """gmlp bench under the emulator's host-only switch: (median step s, launches, products, the device's waits for
    the host, launches by kernel, the pipelined loop's mean step s or 0). A build of session 47 or later times
    `repeats` steps a step at a time and as many again as `gmlp train` takes them (pipelined_s): the counts are
    both loops'."""
    cmd = cmd[1:]
    cmd[cmd.index("--repeats") + 1] = str(repeats)
    r = host_only(build, cmd)
    counts = re.search(r"host only\): (\d+) launches(?: and|,) (\d+) matrix products", r.stderr)
    if not counts:
        sys.exit(f"host_side: {build}'s emulator has no host-only switch:\n{r.stderr}")
    waits = re.search(r"the device waited for the host (\d+) times", r.stderr)
    result = json.loads(r.stdout.strip().splitlines()[-1])
    return (result["median_s"], int(counts[1]), int(counts[2]), int(waits[1]) if waits else -1, by_kernel(r.stderr),
            result.get("pipelined_s", 0.0))


VISION_STEPS, VISION_BATCH = 100, 64


def write_idx_set(folder: pathlib.Path, n: int = 512, side: int = 224, classes: int = 10) -> None:
    import random
    rnd = random.Random(1)
    folder.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", n), ("t10k", 16)):
        pixels = rnd.randbytes(count * side * side)
        labels = bytes(rnd.randrange(classes) for _ in range(count))
        (folder / f"{split}-images-idx3-ubyte").write_bytes(
            b"\0\0\x08\x03" + b"".join(v.to_bytes(4, "big") for v in (count, side, side)) + pixels)
        (folder / f"{split}-labels-idx1-ubyte").write_bytes(b"\0\0\x08\x01" + count.to_bytes(4, "big") + labels)


def write_image_folder(folder: pathlib.Path, n: int = 512, side: int = 224, classes: int = 10) -> None:
    """Random colour images as an image folder (train/ and test/, a subfolder a class, PPM
    files): the RGB counterpart of write_idx_set, three times its bytes an image."""
    import random
    rnd = random.Random(1)
    for split, count in (("train", n), ("test", 16)):
        for i in range(count):
            d = folder / split / f"c{i % classes}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{i:05d}.ppm").write_bytes(f"P6 {side} {side} 255\n".encode() + rnd.randbytes(3 * side * side))


# The vision-files runs: as they were, with DeiT's mixing (mirror images, mixup or CutMix
# each batch, smoothed targets; docs/vision.md), and with its RandAugment and random
# erasing too; mixup and erasing send each batch up as floats.
VISION_RECIPES = {
    "vision-files": [],
    "vision-files-mix": ["train.augment_flip=true", "train.mixup=0.8", "train.cutmix=1", "train.label_smoothing=0.1"],
    "vision-files-deit": ["train.augment_flip=true", "train.auto_augment=rand-m9-mstd0.5-inc1",
                          "train.random_erase=0.25", "train.mixup=0.8", "train.cutmix=1", "train.label_smoothing=0.1"],
}


def train_vision(build: pathlib.Path, data: pathlib.Path, out: pathlib.Path, steps: int,
                 sets: list) -> tuple[float, int, float, int]:
    """gmlp train on image files, host only: (host ms a step over the second half, the device's waits for the host,
    the median wait in ms, uploads beside)."""
    extra = [a for kv in sets for a in ("--set", kv)]
    r = host_only(build, ["train", "--device", "cuda", "--precision", "bf16", "--config",
                          str(ROOT / "configs" / "gmlp-s.json"), "--data", str(data), "--set", "model.image_channels=1",
                          "--set", "model.n_classes=10", "--set", "train.warmup=10", "--batch-size", str(VISION_BATCH),
                          "--steps", str(steps), "--log-every", str(steps // 2), "--eval-every", str(10 * steps),
                          "--ckpt-every", str(10 * steps), "--no-progress", "--out", str(out)] + extra)
    waits = re.search(r"(\d+) uploads beside skipped; the device waited for the host (\d+) times, [0-9.]+ ms in all, "
                      r"([0-9.]+) ms the median wait", r.stderr)
    if not waits:
        sys.exit(f"host_side: {build}'s emulator does not count the device's waits for the host:\n{r.stderr}")
    lines = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if l.strip()]
    per_s = [l["images_per_s"] for l in lines if "images_per_s" in l][-1]
    return 1e3 * VISION_BATCH / per_s, int(waits[2]), float(waits[3]), int(waits[1])


def vision_files(builds: list, passes: int, recipes: list) -> None:
    import tempfile
    print("\n| workload | build | host ms a step, pass by pass | the device's waits for the host a step "
          "| median wait, ms, pass by pass | uploads beside a step |")
    print("|---|---|---|---:|---|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        data = pathlib.Path(tmp) / "images"
        write_idx_set(data)
        runs = [(recipe, name, path) for recipe in recipes for name, path in builds]
        host = {(r, n): [] for r, n, _ in runs}
        median = {(r, n): [] for r, n, _ in runs}
        per_step = {}  # (recipe, name): (waits, uploads beside) a step, from the last pass
        for p in range(passes):
            for recipe, name, path in runs:  # the builds and recipes side by side within each pass
                sets = VISION_RECIPES[recipe]
                out = pathlib.Path(tmp) / f"{recipe}-{name}{p}"
                _, waits1, _, up1 = train_vision(path, data, pathlib.Path(f"{out}a"), VISION_STEPS, sets)
                ms, waits2, med, up2 = train_vision(path, data, pathlib.Path(f"{out}b"), 2 * VISION_STEPS, sets)
                host[recipe, name].append(ms)
                median[recipe, name].append(med)
                per_step[recipe, name] = ((waits2 - waits1) / VISION_STEPS, (up2 - up1) / VISION_STEPS)
        for recipe, name, _ in runs:
            k = (recipe, name)
            print(f"| {recipe} | {name} | {', '.join(f'{h:.2f}' for h in host[k])} | {per_step[k][0]:.0f} | "
                  f"{', '.join(f'{m:.4f}' for m in median[k])} | {per_step[k][1]:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builds", nargs="+", default=["build"], metavar="[NAME=]DIR",
                    help="build directories holding gmlp and libgmlp_cuda_emu.so (default: build)")
    ap.add_argument("--workloads", default="lm,bert,vision")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--kernels", action="store_true",
                    help="and, per workload, each kernel's launches a step in each build (an emulator of session 46 "
                         "or later; names as at the launch sites, where the emulator's own LayerNorm choices differ "
                         "from a GPU's)")
    args = ap.parse_args()
    builds = []
    for b in args.builds:
        name, _, d = b.rpartition("=")
        path = pathlib.Path(d if pathlib.Path(d).is_absolute() else ROOT / d)
        for f in ("gmlp", "libgmlp_cuda_emu.so"):
            if not (path / f).exists():
                sys.exit(f"host_side: {path / f} does not exist (a build with the CUDA emulator)")
        builds.append((name or d, path))
    wanted = args.workloads.split(",")
    print(f"CPU: {cpu_line()}; bf16 training steps under GMLP_CUDA_EMULATOR_HOST_ONLY=1")
    bench_workloads = [w for w in wanted if w not in VISION_RECIPES]
    recipes = [w for w in wanted if w in VISION_RECIPES]
    if recipes:
        vision_files(builds, args.passes, recipes)
    if not bench_workloads:
        return
    cmds = commands(",".join(bench_workloads))
    print("\n`gmlp bench`:\n")
    print("| workload | build | host ms a step, pass by pass (pipelined) | launches a step | matrix products a step "
          "| the device's waits for the host a step (with a pipelined loop: a step alone and a pipelined one) |")
    print("|---|---|---|---:|---:|---|")
    kernels = {}  # workload: {build: {kernel: launches a step}}
    for w, cmd in cmds.items():
        rows = {name: [] for name, _ in builds}
        piped = {name: [] for name, _ in builds}
        counts = {}
        for _ in range(args.passes):
            for name, path in builds:  # the builds side by side within each pass
                s, launches, products, waits, k2, p2 = run(path, cmd, 2 * REPEATS[w])
                rows[name].append(s)
                piped[name].append(p2)
                if name not in counts:
                    _, l1, p1, w1, k1, _ = run(path, cmd, REPEATS[w])
                    # With a pipelined loop each repeat is two steps, one taken alone and one pipelined: the
                    # waits are the pair's.
                    n = REPEATS[w] * (2 if p2 else 1)
                    dw = (waits - w1) / REPEATS[w] if waits >= 0 and w1 >= 0 else float("nan")
                    wait_cell = f"{dw:.2f} the pair" if p2 else f"{dw:.0f}"
                    counts[name] = ((launches - l1) / n, (products - p1) / n, wait_cell)
                    kernels.setdefault(w, {})[name] = {k: (n_k - k1.get(k, 0)) / n for k, n_k in k2.items()}
        for name, _ in builds:
            times = ", ".join(f"{1e3 * s:.3f}" for s in rows[name])
            if any(piped[name]):
                times += " (" + ", ".join(f"{1e3 * p:.3f}" for p in piped[name]) + ")"
            print(f"| {w} | {name} | {times} | {counts[name][0]:.0f} | {counts[name][1]:.0f} | {counts[name][2]} |")
    if args.kernels:
        names = [name for name, _ in builds]
        for w, per in kernels.items():
            every = sorted({k for d in per.values() for k, n in d.items() if n > 0},
                           key=lambda k: -max(d.get(k, 0) for d in per.values()))
            if not any(per[n] for n in names):
                print(f"\n{w}: no launches by kernel (an emulator older than session 46)")
                continue
            print(f"\n{w}, launches a step by kernel:\n")
            print("| kernel | " + " | ".join(names) + " |")
            print("|---|" + "---:|" * len(names))
            for k in every:
                print(f"| `{k}` | " + " | ".join(f"{per[n].get(k, 0):g}" for n in names) + " |")


if __name__ == "__main__":
    main()
