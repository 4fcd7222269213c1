#!/usr/bin/env python3
"""PyTorch's losses for OpsCrossEntropy.SoftTargetsArePyTorchsLosses.

  /usr/bin/python3 tests/reference/soft_targets_reference.py IN.json OUT.json

IN holds logits [M][V], targets [M] (-1: ignored), and optionally second [M] and weight
[M] (a mixed row: weight of targets' class, the rest of second's) and smoothing. OUT gets
the mean loss over the rows with a target and its gradient with respect to the logits:
label smoothing as torch.nn.functional.cross_entropy(label_smoothing=) computes it, a
mixed row as timm's mixup criterion does, weight * loss(a) + (1 - weight) * loss(b).
"""
import json
import sys

import torch
import torch.nn.functional as F

spec = json.load(open(sys.argv[1]))
logits = torch.tensor(spec["logits"], dtype=torch.float64, requires_grad=True)
targets = torch.tensor(spec["targets"], dtype=torch.int64)
eps = float(spec.get("smoothing", 0.0))
keep = targets >= 0
a = F.cross_entropy(logits, targets.clamp(min=0), reduction="none", label_smoothing=eps)
if "second" in spec:
    b = F.cross_entropy(logits, torch.tensor(spec["second"], dtype=torch.int64), reduction="none",
                        label_smoothing=eps)
    w = torch.tensor(spec["weight"], dtype=torch.float64)
    rows = w * a + (1 - w) * b
else:
    rows = a
loss = (rows * keep).sum() / keep.sum()
loss.backward()
json.dump({"loss": loss.item(), "dlogits": logits.grad.tolist()}, open(sys.argv[2], "w"))
