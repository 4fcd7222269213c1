#!/usr/bin/python3
"""Loads a checkpoint written by gmlp.cpp into the PyTorch reference and writes the
logits and loss it computes for given tokens: proves PyTorch can read our files.

usage: logits_of_checkpoint.py MODEL.safetensors TOKENS.safetensors OUT.safetensors
TOKENS holds `tokens` (I32 [B, T+1]); OUT gets `logits` (F32 [B, T, V]) and `loss` (F32 [1]).
"""
import json
import sys

import torch

from gmlp_ref import GMLPLanguageModel, load_safetensors, save_safetensors


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    model_path, tokens_path, out_path = sys.argv[1:]
    params, meta = load_safetensors(model_path)
    model = GMLPLanguageModel(json.loads(meta["gmlp.config"])).double()
    # strict=True: every SPEC name present, nothing extra, shapes equal.
    model.load_state_dict({k: v.double() for k, v in params.items()}, strict=True)
    tokens = load_safetensors(tokens_path)[0]["tokens"].long()
    with torch.no_grad():
        logits = model(tokens[:, :-1])
        loss = model.loss(logits, tokens[:, 1:])
    save_safetensors(out_path, {"logits": logits.float(), "loss": loss.float().reshape(1)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
