#!/usr/bin/env python3
"""JPEGs and what PIL decodes them to, for ImageFile.AJpegDecodesToPilsBytes.

  /usr/bin/python3 tests/reference/jpeg_reference.py --out DIR

Writes DIR/<name>.jpg, written by PIL: colour with 4:2:0 chroma at odd sizes (the edges
of the upsampling), progressive 4:4:4, grey, a smooth photograph-like scene, CMYK; and
for each but the CMYK one DIR/<name>.raw, PIL's decoding (rows of interleaved bytes), with
DIR/manifest.json listing each name, mode and size. PIL decodes with libjpeg's defaults,
which gmlp's reader keeps, so the bytes must match exactly.
"""
import argparse
import json
import pathlib

import numpy as np
from PIL import Image, ImageFile

ImageFile.MAXBLOCK = 1 << 24  # a progressive file is written in one block

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
out = pathlib.Path(ap.parse_args().out)
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(7)


def noise(h, w, c=3):
    return (rng.random((h, w, c)) * 255).astype(np.uint8)


def scene(h, w):
    coarse = Image.fromarray(noise(h // 10 + 2, w // 10 + 2))
    a = np.asarray(coarse.resize((w, h), Image.BICUBIC), dtype=np.float32) + rng.normal(0, 10, (h, w, 3))
    return np.clip(a, 0, 255).astype(np.uint8)


images = {
    "c420_odd": (Image.fromarray(noise(37, 23)), dict(quality=85)),
    "c420_wide": (Image.fromarray(noise(17, 64)), dict(quality=75)),
    "c444_progressive": (Image.fromarray(noise(48, 64)), dict(quality=95, subsampling=0, progressive=True)),
    "grey": (Image.fromarray(noise(31, 29, 1)[:, :, 0]), dict(quality=90)),
    "scene": (Image.fromarray(scene(90, 120)), dict(quality=90)),
    "cmyk": (Image.fromarray(noise(16, 24)).convert("CMYK"), dict(quality=90)),
}
manifest = []
for name, (im, opts) in images.items():
    path = out / f"{name}.jpg"
    im.save(path, **opts)
    with Image.open(path) as back:
        if back.mode != "CMYK":
            (out / f"{name}.raw").write_bytes(np.asarray(back).tobytes())
        manifest.append({"name": name, "mode": back.mode, "width": back.width, "height": back.height})
(out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
