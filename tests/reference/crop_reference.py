#!/usr/bin/env python3
"""torchvision's random-resized crops, for ImageFile.CropsAreDistributedAsTorchvisions.

  /usr/bin/python3 tests/reference/crop_reference.py OUT.json N MIN_AREA WxH [WxH ...]

Draws N boxes of torchvision.transforms.RandomResizedCrop.get_params(scale=(MIN_AREA, 1),
ratio=(3/4, 4/3)) for an image of each size and writes, per size, the mean and standard
deviation of the box's top, left, height and width, and the share of boxes that are the
central crop its ten failed tries fall back to.
"""
import json
import sys

import torch
from torchvision.transforms import RandomResizedCrop

out, n, min_area = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
torch.manual_seed(0)
result = {}
for size in sys.argv[4:]:
    w, h = (int(v) for v in size.split("x"))
    img = torch.zeros(1, h, w)
    boxes = torch.tensor([RandomResizedCrop.get_params(img, [min_area, 1.0], [3 / 4, 4 / 3]) for _ in range(n)],
                         dtype=torch.float64)
    in_ratio = w / h
    fw, fh = w, h
    if in_ratio < 3 / 4:
        fh = int(round(w / (3 / 4)))
    elif in_ratio > 4 / 3:
        fw = int(round(h * (4 / 3)))
    fallback = torch.tensor([(h - fh) // 2, (w - fw) // 2, fh, fw], dtype=torch.float64)
    result[size] = {"mean": boxes.mean(0).tolist(), "sd": boxes.std(0).tolist(),
                    "fallback": (boxes == fallback).all(1).double().mean().item()}
json.dump(result, open(out, "w"))
