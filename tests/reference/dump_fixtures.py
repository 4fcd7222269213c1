#!/usr/bin/python3
"""Writes the parity fixtures that the C++ tests compare against.

usage: dump_fixtures.py --out DIR

For each case, DIR/<case>.model.safetensors holds the float32 parameters (SPEC 6 names,
metadata gmlp.config) and DIR/<case>.case.safetensors holds inputs and the expected
results: forward logits and loss, the gradient of every parameter, and a 10-step AdamW
run (per-step tokens, lrs, losses, pre-clip grad norms, final parameters).

The references are computed in float64 from the very float32 values stored in the model
file, so they are the exact answer up to float64 rounding; the C++ float32 results are
compared against them with tolerances. Everything is seeded: reruns give identical bytes.
Each file is written atomically (temp file in DIR, fsync, rename), so several dumpers may
write the same DIR at once and a reader never sees a half-written file.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import string
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gmlp_ref import (GMLPLanguageModel, load_safetensors, make_optimizer,  # noqa: E402
                     param_dict, save_safetensors, train_step)

TRAIN_STEPS = 10
SHAKESPEARE = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # 65 chars
# 94 visible ASCII characters + space, tab, newline = 97.
PRINTABLE_97 = string.digits + string.ascii_letters + string.punctuation + " \t\n"
PRINTABLE_50 = PRINTABLE_97[:50]  # 0-9, a-z, A-N: 50 distinct printable chars


def model_cfg(vocab, d, d_ffn, layers, n, gelu, pos, tokenizer):
    return {"task": "causal_lm", "vocab_size": vocab, "d_model": d, "d_ffn": d_ffn,
            "n_layers": layers, "seq_len": n, "gelu": gelu, "pos_embedding": pos,
            "spatial_init": 0.01, "norm_eps": 1e-5, "tokenizer": tokenizer}


def train_cfg(batch, schedule, lr=1e-3, min_lr=0.0, warmup=0, noam_factor=1.0,
              weight_decay=0.0, beta1=0.9, beta2=0.999, eps=1e-8, clip=0.0):
    return {"batch_size": batch, "steps": TRAIN_STEPS, "schedule": schedule, "lr": lr,
            "min_lr": min_lr, "warmup": warmup, "noam_factor": noam_factor,
            "weight_decay": weight_decay, "beta1": beta1, "beta2": beta2, "eps": eps,
            "clip": clip}


# name -> (seed, model config, B, T, train config)
CASES = {
    "tiny": (1001, model_cfg(256, 16, 32, 2, 8, "erf", "none", {"kind": "byte"}), 3, 8,
             train_cfg(3, "cosine", lr=3e-3, min_lr=3e-4, warmup=3, weight_decay=0.1,
                       beta1=0.9, beta2=0.95, eps=1e-8, clip=1.0)),
    # T < seq_len: only W[:11, :11] and b[:11] are used (their tails get zero gradient).
    "odd": (2002, model_cfg(65, 24, 50, 3, 13, "tanh", "sinusoidal",
                            {"kind": "char", "chars": SHAKESPEARE}), 2, 11,
            train_cfg(2, "noam", lr=1e-3, warmup=4, noam_factor=1.0, weight_decay=0.01,
                      beta1=0.9, beta2=0.98, eps=1e-9, clip=0.5)),
    "deep": (3003, model_cfg(97, 40, 96, 5, 37, "erf", "none",
                             {"kind": "char", "chars": PRINTABLE_97}), 4, 37,
             train_cfg(4, "constant", lr=1e-3, weight_decay=0.05, beta1=0.9, beta2=0.999,
                       eps=1e-8, clip=0.0)),
    # T = 70 > 64: the window crosses the C++ spatial op's 64-row block boundary.
    "long": (4004, model_cfg(50, 16, 24, 2, 70, "erf", "none",
                             {"kind": "char", "chars": PRINTABLE_50}), 2, 70,
             train_cfg(2, "cosine", lr=2e-3, min_lr=2e-4, warmup=2, weight_decay=0.1,
                       beta1=0.9, beta2=0.95, eps=1e-8, clip=1.0)),
}


def build_model(seed: int, cfg: dict) -> GMLPLanguageModel:
    """SPEC init, then perturbed so that every parameter matters to the test: LayerNorm
    params and the spatial bias move off 1/0, and the spatial weight gets large values
    over the whole n x n matrix (a causal model must ignore the upper triangle)."""
    torch.manual_seed(seed)
    model = GMLPLanguageModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("spatial.bias"):
                p.add_(torch.randn_like(p) * 0.02)
            elif name.endswith("spatial.weight"):
                p.uniform_(-0.3, 0.3)
    return model


def write_atomic(path: str, tensors: dict, metadata: dict, want_cfg: dict) -> None:
    """Writes a safetensors file so that a reader never sees it half-written, even with
    several dumpers writing the same directory at once: the bytes go to a temp file in
    the same directory, are synced and read back, then renamed onto path in one step."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        save_safetensors(tmp, tensors, metadata)
        with open(tmp, "rb") as f:
            f.flush()
            os.fsync(f.fileno())
        # Read back: the file must hold exactly what was computed.
        got, meta = load_safetensors(tmp)
        if list(got) != list(tensors) or any(not torch.equal(got[k], tensors[k])
                                             for k in tensors):
            raise RuntimeError(f"{path}: read-back differs from what was written")
        if json.loads(meta["gmlp.config"]) != want_cfg:
            raise RuntimeError(f"{path}: gmlp.config metadata does not round-trip")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def run_case(name: str, out_dir: str) -> str:
    seed, mcfg, B, T, tcfg = CASES[name]
    assert len(mcfg["tokenizer"].get("chars", "x" * mcfg["vocab_size"])) == mcfg["vocab_size"]
    model32 = build_model(seed, mcfg)
    params32 = param_dict(model32)
    gen = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(mcfg["vocab_size"], (B, T + 1), generator=gen)
    train_tokens = torch.randint(mcfg["vocab_size"], (TRAIN_STEPS, B, T + 1), generator=gen)

    # float64 copy of the same float32 values.
    model = GMLPLanguageModel(mcfg).double()
    model.load_state_dict({k: v.double() for k, v in params32.items()})

    logits = model(tokens[:, :-1])
    loss = model.loss(logits, tokens[:, 1:])
    loss.backward()
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()}

    opt = make_optimizer(model, tcfg)
    losses, norms, lrs = [], [], []
    for s in range(1, TRAIN_STEPS + 1):
        l, g, lr = train_step(model, opt, tcfg, s, train_tokens[s - 1])
        losses.append(l), norms.append(g), lrs.append(lr)
    final = param_dict(model)

    f32 = lambda t: t.detach().to(torch.float32).contiguous()  # noqa: E731
    case = {"tokens": tokens.to(torch.int32), "logits": f32(logits),
            "loss": f32(loss.reshape(1))}
    case.update({f"grad.{k}": f32(v) for k, v in grads.items()})
    case["train.tokens"] = train_tokens.to(torch.int32)
    case["train.lrs"] = torch.tensor(lrs, dtype=torch.float32)
    case["train.losses"] = torch.tensor(losses, dtype=torch.float32)
    case["train.grad_norms"] = torch.tensor(norms, dtype=torch.float32)
    case.update({f"final.{k}": f32(v) for k, v in final.items()})

    for k, v in case.items():
        if v.is_floating_point() and not torch.isfinite(v).all():
            raise RuntimeError(f"case {name}: tensor {k} has non-finite values")
    mjson = json.dumps(mcfg)
    model_path = os.path.join(out_dir, f"{name}.model.safetensors")
    case_path = os.path.join(out_dir, f"{name}.case.safetensors")
    write_atomic(model_path, params32, {"gmlp.config": mjson}, mcfg)
    write_atomic(case_path, case, {"gmlp.config": mjson, "gmlp.train": json.dumps(tcfg)}, mcfg)

    clipped = sum(n > tcfg["clip"] for n in norms) if tcfg["clip"] > 0 else 0
    nparams = sum(v.numel() for v in params32.values())
    return (f"{name}: {nparams} params, B={B} T={T}, loss {float(loss):.6f}, "
            f"train losses {losses[0]:.4f} -> {losses[-1]:.4f}, "
            f"grad norms {min(norms):.3f}..{max(norms):.3f}, clipped {clipped}/{TRAIN_STEPS}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for the fixture files")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # fixed reduction order: identical bytes on every run
    try:
        os.makedirs(args.out, exist_ok=True)
        t0 = time.time()
        for name in CASES:
            print(run_case(name, args.out), flush=True)
        print(f"wrote {2 * len(CASES)} files to {args.out} in {time.time() - t0:.1f}s")
    except Exception as e:  # one clear line, non-zero exit
        print(f"dump_fixtures.py: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
