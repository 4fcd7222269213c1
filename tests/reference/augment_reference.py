#!/usr/bin/env python3
"""Pillow's image operations as timm's RandAugment and AutoAugment call them, for
ImageAugment.EachOperationIsPillows.

  /usr/bin/python3 tests/reference/augment_reference.py CASES.json IMAGES.bin OUT.bin

CASES.json is a list of cases, each {"offset", "c", "h", "w", "op", "arg", "bicubic",
"fill"}: an image of c x h x w bytes (channel-major, c 1 or 3) at byte `offset` of
IMAGES.bin, and one operation with its argument as timm's level functions make it. OUT.bin
receives each case's result, channel-major, one after another. Each operation is the
call timm's auto_augment.py makes (timm is not installed here; its calls are these).
"""
import json
import sys

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

cases = json.load(open(sys.argv[1]))
data = open(sys.argv[2], "rb").read()


def affine(img, matrix, case):
    resample = Image.BICUBIC if case["bicubic"] else Image.BILINEAR
    return img.transform(img.size, Image.AFFINE, matrix, resample=resample, fillcolor=fill_of(img, case))


def fill_of(img, case):
    return tuple(case["fill"]) if img.mode == "RGB" else case["fill"][0]


def solarize_add(img, add, thresh=128):
    lut = [min(255, i + add) if i < thresh else i for i in range(256)]
    return img.point(lut * len(img.getbands()))


def apply(img, case):
    op, arg = case["op"], case["arg"]
    if op == "auto_contrast":
        return ImageOps.autocontrast(img)
    if op == "equalize":
        return ImageOps.equalize(img)
    if op == "invert":
        return ImageOps.invert(img)
    if op == "posterize":
        return img if arg >= 8 else ImageOps.posterize(img, int(arg))
    if op == "solarize":
        return ImageOps.solarize(img, int(arg))
    if op == "solarize_add":
        return solarize_add(img, int(arg))
    if op == "color":
        return ImageEnhance.Color(img).enhance(arg)
    if op == "contrast":
        return ImageEnhance.Contrast(img).enhance(arg)
    if op == "brightness":
        return ImageEnhance.Brightness(img).enhance(arg)
    if op == "sharpness":
        return ImageEnhance.Sharpness(img).enhance(arg)
    if op == "rotate":
        resample = Image.BICUBIC if case["bicubic"] else Image.BILINEAR
        return img.rotate(arg, resample=resample, fillcolor=fill_of(img, case))
    if op == "shear_x":
        return affine(img, (1, arg, 0, 0, 1, 0), case)
    if op == "shear_y":
        return affine(img, (1, 0, 0, arg, 1, 0), case)
    if op == "translate_x":
        return affine(img, (1, 0, arg * img.size[0], 0, 1, 0), case)
    if op == "translate_y":
        return affine(img, (1, 0, 0, 0, 1, arg * img.size[1]), case)
    raise SystemExit("unknown operation " + op)


with open(sys.argv[3], "wb") as out:
    for case in cases:
        c, h, w, at = case["c"], case["h"], case["w"], case["offset"]
        planes = np.frombuffer(data, np.uint8, c * h * w, at).reshape(c, h, w)
        img = Image.fromarray(planes[0] if c == 1 else np.ascontiguousarray(planes.transpose(1, 2, 0)))
        result = np.asarray(apply(img, case))
        result = result[None] if c == 1 else result.transpose(2, 0, 1)
        out.write(np.ascontiguousarray(result).tobytes())
