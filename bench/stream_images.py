#!/usr/bin/env python3
"""Decoding an image folder: gmlp's streamed images against PyTorch's as users load them.

  /usr/bin/python3 bench/stream_images.py                     # ./build/gmlp, 512 images, two passes
  /usr/bin/python3 bench/stream_images.py --gmlp build-x/gmlp --images 1024

A streamed image folder (train.stream_images, docs/vision.md) decodes every image a
batch draws, so a training step costs its images' decoding, which on a GPU must hide
behind the step before. This measures that cost on photographs' sizes and compression:
a folder of JPEGs written here (seeded; ImageNet's common sizes, 500x375 and the like,
quality 90, a smooth random scene plus grain, which compresses as a photograph does:
about 80 KB an image), each brought to 224x224 colour, the input of gMLP-S/16.

Side by side, each pass in both orders:
- gmlp: `gmlp eval` over the folder's test split (streamed, always) with a model of one
  tiny layer at 224x224 (its forward a few percent of the time): images a second, on
  one thread and on the default (every core).
- PyTorch as users load images (torchvision's ImageFolder, without torchvision, which
  Debian lacks): a Dataset whose item is PIL's open, convert("RGB"), resize((224, 224),
  BILINEAR) and a tensor of its bytes, through a DataLoader of batches of 64, under its
  default (num_workers=0: decoding in the training process) and with a worker a core.
  No forward: PyTorch's side does strictly less than gmlp's.
- gmlp training, held against streamed: `gmlp train` of the same tiny model on the
  training split, batch 64; the trainer's images a second over the run, so the
  streamed run's lower rate is its decoding a step (the held run's load is outside it);
  and streamed with torchvision's default crops (area share from 0.08) and mirror
  images, each crop resampled from the file's own pixels.

Needs PIL (Debian's python3-pil) and torch (python3-torch) for /usr/bin/python3.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from host_side import ROOT, cpu_line  # noqa: E402

SIZES = [(375, 500), (500, 375), (333, 500), (500, 333), (400, 500), (500, 400)]  # (h, w)
SIDE = 224
CLASSES = 10


def write_set(root: pathlib.Path, n: int) -> float:
    """n JPEGs in each of train/ and test/, CLASSES folders; returns the mean file size in KB."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(2026)
    total = 0
    for split in ("train", "test"):
        for i in range(n):
            h, w = SIZES[i % len(SIZES)]
            coarse = (rng.random((h // 25 + 2, w // 25 + 2, 3)) * 255).astype(np.uint8)
            scene = np.asarray(Image.fromarray(coarse).resize((w, h), Image.BICUBIC), dtype=np.float32)
            scene += rng.normal(0.0, 12.0, (h, w, 3))
            folder = root / split / f"c{i % CLASSES}"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{i:05d}.jpg"
            Image.fromarray(np.clip(scene, 0, 255).astype(np.uint8)).save(path, quality=90)
            total += path.stat().st_size
    return total / (2 * n) / 1024


def run(cmd: list[str]) -> tuple[float, str]:
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"stream_images: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return wall, p.stdout + p.stderr


MODEL = ["--task", "vision", "--set", "model.image_channels=3", "--set", f"model.image_height={SIDE}",
         "--set", f"model.image_width={SIDE}", "--set", "model.patch_height=16", "--set", "model.patch_width=16",
         "--set", f"model.seq_len={(SIDE // 16) ** 2}", "--set", "model.d_model=8", "--set", "model.d_ffn=16",
         "--set", "model.n_layers=1", "--set", 'model.normalization={"mean":[0.5,0.5,0.5],"std":[0.25,0.25,0.25]}',
         "--no-progress"]


def gmlp_eval(gmlp: str, model: pathlib.Path, data: pathlib.Path, threads: int | None, n: int) -> float:
    cmd = [gmlp] + (["--threads", str(threads)] if threads else []) + ["eval", "--model", str(model),
                                                                       "--data", str(data)]
    wall, out = run(cmd)
    if f"({n} examples)" not in out:
        sys.exit(f"stream_images: gmlp eval scored other than {n} images:\n{out}")
    return n / wall


def gmlp_train(gmlp: str, data: pathlib.Path, out: pathlib.Path, stream: bool, steps: int,
               augment: bool = False) -> float:
    cmd = [gmlp, "train", "--data", str(data), "--out", str(out), "--steps", str(steps), "--batch-size", "64",
           "--eval-every", str(steps * 10), "--ckpt-every", str(steps * 10), "--overwrite"] + MODEL + \
          ["--set", f"train.stream_images={'true' if stream else 'false'}"] + \
          (["--set", "train.augment_crop=0.08", "--set", "train.augment_flip=true"] if augment else [])
    _, text = run(cmd)
    m = re.search(r"finished after .* ([0-9.]+) images/s", text)
    if not m:
        sys.exit(f"stream_images: no rate in gmlp train's output:\n{text}")
    return float(m.group(1))


def torch_rate(data: pathlib.Path, workers: int, n: int) -> float:
    import numpy as np
    import torch
    from PIL import Image

    files = sorted(str(p) for p in (data / "test").rglob("*.jpg"))

    class Folder(torch.utils.data.Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            with Image.open(files[i]) as im:
                im = im.convert("RGB").resize((SIDE, SIDE), Image.BILINEAR)
                return torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1), i % CLASSES

    loader = torch.utils.data.DataLoader(Folder(), batch_size=64, num_workers=workers)
    t = time.perf_counter()
    seen = sum(x.shape[0] for x, _ in loader)
    wall = time.perf_counter() - t
    assert seen == n
    return n / wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gmlp", default=str(ROOT / "build" / "gmlp"))
    ap.add_argument("--images", type=int, default=512, help="JPEGs in each split")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8, help="training steps of batch 64 for held against streamed")
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args()
    try:
        import PIL  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        sys.exit(f"stream_images: {e}: run it with /usr/bin/python3, with python3-pil and python3-torch installed")
    cores = os.cpu_count() or 1
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="gmlp_stream_") as tmp:
        root = pathlib.Path(tmp)
        data = root / "set"
        kb = write_set(data, a.images)
        model = root / "model"
        run([a.gmlp, "train", "--data", str(data), "--out", str(model), "--steps", "1", "--batch-size", "2",
             "--eval-every", "10"] + MODEL)
        cases = [
            ("gmlp eval, streamed, 1 thread", lambda: gmlp_eval(a.gmlp, model, data, 1, a.images)),
            (f"gmlp eval, streamed, default ({cores} threads)", lambda: gmlp_eval(a.gmlp, model, data, None, a.images)),
            ("PyTorch DataLoader + PIL, default (num_workers=0)", lambda: torch_rate(data, 0, a.images)),
            (f"PyTorch DataLoader + PIL, num_workers={cores}", lambda: torch_rate(data, cores, a.images)),
            ("gmlp train, held (batch 64)", lambda: gmlp_train(a.gmlp, data, root / "held", False, a.steps)),
            ("gmlp train, streamed (batch 64)", lambda: gmlp_train(a.gmlp, data, root / "streamed", True, a.steps)),
            ("gmlp train, streamed, crops (0.08) and mirror images",
             lambda: gmlp_train(a.gmlp, data, root / "cropped", True, a.steps, augment=True)),
        ]
        for p in range(a.passes):
            order = cases if p % 2 == 0 else cases[::-1]
            for name, fn in order:
                rows.setdefault(name, []).append(fn())
    print(f"CPU: {cpu_line()}; {a.images} JPEGs a split, {kb:.0f} KB mean, to {SIDE}x{SIDE}x3; "
          f"{a.passes} passes (images a second, each pass)")
    print()
    print("| what | images/s, each pass |")
    print("|---|---:|")
    for name, v in rows.items():
        print(f"| {name} | {' / '.join(f'{x:.0f}' for x in v)} |")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"cpu": cpu_line(), "images": a.images, "kb": kb,
                                                    "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
