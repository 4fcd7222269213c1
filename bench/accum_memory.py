#!/usr/bin/env python3
"""Peak device memory of a `gmlp train` step taken in pieces (train.grad_accum), without a GPU.

  python3 bench/accum_memory.py                      # build-gpukit, every workload
  python3 bench/accum_memory.py --build build --workloads vision --pieces 1,4

Runs `gmlp train --device cuda` on the CUDA emulator under its host-only switch
(GMLP_CUDA_EMULATOR_HOST_ONLY=1: every launch and product checked and skipped, every
allocation made and counted), two steps and the run's final evaluation, for
bench/gpu_bench.py's three workloads at their batch (the annotated LM at 32, the
BERT-size masked LM at 32, gMLP-S/16 at 128, here on one-channel 224x224 images written
as an IDX set), and prints the run's peak device memory as its summary reports it (the
backend's count of what it holds, which a GPU run reports the same way: docs/gpu.md
"Memory") for each number of pieces a step. Nothing here is timed.
The text workloads read data/kjv.txt and data/kjv_groups/pretrain.txt
(scripts/fetch_data.sh).
"""
from __future__ import annotations

import argparse
import pathlib
import platform
import re
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from host_side import ROOT, host_only, write_idx_set  # noqa: E402

WORKLOADS = {
    "lm": (32, ["--config", "configs/annotated.json", "--data", "data/kjv.txt"]),
    "bert": (32, ["--config", "configs/mlm-kjv.json", "--data", "data/kjv_groups/pretrain.txt", "--set",
                  "model.d_model=768", "--set", "model.d_ffn=3072", "--set", "model.n_layers=12", "--set",
                  "model.seq_len=512"]),
    "vision": (128, ["--config", "configs/gmlp-s.json", "--set", "model.image_channels=1", "--set",
                     "model.n_classes=10"]),
}


def peak_mib(build: pathlib.Path, args: list, out: pathlib.Path) -> float:
    r = host_only(build, ["train", "--device", "cuda", "--steps", "2", "--no-progress", "--overwrite", "--out",
                          str(out)] + args)
    m = re.search(r"device memory: ([0-9.]+) MiB at the most", r.stdout + r.stderr)
    if not m:
        sys.exit(f"accum_memory: no peak in the summary of gmlp train {' '.join(args)}:\n{r.stdout}{r.stderr}")
    return float(m[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build-gpukit", help="a build with the CUDA emulator (default build-gpukit)")
    ap.add_argument("--workloads", default="lm,bert,vision")
    ap.add_argument("--pieces", default="1,2,4,8", help="train.grad_accum values (default 1,2,4,8)")
    ap.add_argument("--precisions", default="bf16,fp32")
    args = ap.parse_args()
    build = pathlib.Path(args.build if pathlib.Path(args.build).is_absolute() else ROOT / args.build)
    for f in ("gmlp", "libgmlp_cuda_emu.so"):
        if not (build / f).exists():
            sys.exit(f"accum_memory: {build / f} does not exist (a build with -DGMLP_CUDA_EMULATOR=ON)")
    for w in args.workloads.split(","):
        if w != "vision" and not (ROOT / WORKLOADS[w][1][3]).exists():
            sys.exit(f"accum_memory: {WORKLOADS[w][1][3]} is missing; run scripts/fetch_data.sh")
    pieces = [int(p) for p in args.pieces.split(",")]
    print(f"Host: {platform.processor() or platform.machine()}; `gmlp train --device cuda` on the CUDA emulator, "
          "host only (GMLP_CUDA_EMULATOR_HOST_ONLY=1): the backend's peak device memory, MiB")
    print()
    print("| workload | batch | precision | " + " | ".join(f"grad_accum {p}" for p in pieces) + " |")
    print("|---|---:|---|" + "---:|" * len(pieces))
    with tempfile.TemporaryDirectory() as tmp:
        images = pathlib.Path(tmp) / "images"
        write_idx_set(images, n=256)
        for w in args.workloads.split(","):
            batch, wargs = WORKLOADS[w]
            wargs = [str(ROOT / a) if a.startswith(("configs/", "data/")) else a for a in wargs]
            if w == "vision":
                wargs = wargs + ["--data", str(images)]
            for prec in args.precisions.split(","):
                peaks = [peak_mib(build, wargs + ["--precision", prec, "--batch-size", str(batch), "--grad-accum",
                                                  str(p)], pathlib.Path(tmp) / "run") for p in pieces]
                cells = [f"{m:,.1f}" + ("" if i == 0 else f" ({m / peaks[0]:.2f})") for i, m in enumerate(peaks)]
                print(f"| {w} | {batch} | {prec} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
