#!/usr/bin/python3
"""Loads a checkpoint written by gmlp.cpp into the PyTorch reference and writes the
logits and loss it computes for given inputs: proves PyTorch can read our files.

usage: logits_of_checkpoint.py MODEL.safetensors INPUTS.safetensors OUT.safetensors
INPUTS holds the inputs under the fixture names of dump_fixtures.py: causal_lm `tokens`
(I32 [B, T+1]; targets are tokens shifted by one); mlm / classify `tokens` (I32 [B, T]) and
`targets` (I32 [B, T] or [B]); vision `images` (F32 [B, C, H, W]) and `targets` (I32 [B]);
optional `lengths` (I32 [B]) and `keep` (F32 [L, B]).
OUT gets `logits` (F32 [B, T, V] or [B, n_classes]) and `loss` (F32 [1]).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))  # the gmlp package
from gmlp.reference import GMLP, load_safetensors, save_safetensors  # noqa: E402


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    model_path, inputs_path, out_path = sys.argv[1:]
    params, meta = load_safetensors(model_path)
    model = GMLP(json.loads(meta["gmlp.config"])).double()
    # strict=True: every name of docs/checkpoint.md present, nothing extra, shapes equal.
    model.load_state_dict({k: v.double() for k, v in params.items()}, strict=True)
    inp = load_safetensors(inputs_path)[0]
    tokens = inp["tokens"].long() if "tokens" in inp else None
    targets = inp["targets"].long() if "targets" in inp else None
    if model.task == "causal_lm":
        tokens, targets = tokens[:, :-1], tokens[:, 1:]
    images = inp["images"].double() if "images" in inp else None
    keep = inp["keep"].double() if "keep" in inp else None
    with torch.no_grad():
        logits = model(tokens=tokens, images=images, lengths=inp.get("lengths"), keep=keep)
        loss = model.loss(logits, targets)
    save_safetensors(out_path, {"logits": logits.float(), "loss": loss.float().reshape(1)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
