#!/usr/bin/python3
"""Self-checks of the PyTorch reference (run by hand: /usr/bin/python3 check_ref.py).

1. autograd gradients against central finite differences (float64);
2. the causal model ignores spatial.weight's upper triangle, and a token never affects
   earlier positions; a prefix gives the same logits as the full sequence;
3. the vectorized forward against a slow loop-by-loop transcription of docs/model.md §1–2;
4. the 10-step training against a hand-written AdamW + clip (the formulas the C++ side
   implements), and how far a float32 run drifts from the float64 fixture.
"""
from __future__ import annotations

import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))  # the gmlp package
from dump_fixtures import CASES, TRAIN_STEPS, build_model  # noqa: E402
from gmlp.reference import (GMLPLanguageModel, decays, learning_rate, make_optimizer,  # noqa: E402
                      param_dict, sinusoidal_pe, train_step)

FAILED = []


def check(ok: bool, what: str) -> None:
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        FAILED.append(what)


def case_model(name, dtype=torch.float64):
    seed, mcfg, B, T, tcfg = CASES[name]
    p32 = param_dict(build_model(seed, mcfg))
    model = GMLPLanguageModel(mcfg).to(dtype)
    model.load_state_dict({k: v.to(dtype) for k, v in p32.items()})
    gen = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(mcfg["vocab_size"], (B, T + 1), generator=gen)
    train_tokens = torch.randint(mcfg["vocab_size"], (TRAIN_STEPS, B, T + 1), generator=gen)
    return model, tokens, train_tokens, mcfg, tcfg


def fd_relative_error(flat, gflat, idx, loss_fn, h: float) -> float:
    """Worst |central difference - autograd| / max(1e-4, |autograd|) over the entries
    idx of one flattened parameter (float64, under no_grad; each entry is restored)."""
    worst = 0.0
    for i in idx:
        old = float(flat[i])
        flat[i] = old + h
        up = loss_fn()
        flat[i] = old - h
        down = loss_fn()
        flat[i] = old
        fd, ad = (up - down) / (2 * h), float(gflat[i])
        worst = max(worst, abs(fd - ad) / max(1e-4, abs(ad)))
    return worst


def finite_differences(name: str) -> None:
    model, tokens, _, _, _ = case_model(name)
    loss_fn = lambda: float(model.loss(model(tokens[:, :-1]), tokens[:, 1:]))  # noqa: E731
    model.zero_grad()
    model.loss(model(tokens[:, :-1]), tokens[:, 1:]).backward()
    gen = torch.Generator().manual_seed(7)
    worst, h = 0.0, 1e-5
    with torch.no_grad():
        for pname, p in model.named_parameters():
            flat, gflat = p.view(-1), p.grad.view(-1)
            idx = torch.randint(flat.numel(), (3,), generator=gen).tolist()
            if pname.endswith("spatial.weight"):  # a lower-triangle entry that is used
                idx.append(3 * p.shape[1] + 1)
            if pname == "embed.weight":  # a row the batch actually reads
                idx.append(int(tokens[0, 0]) * p.shape[1] + 2)
            worst = max(worst, fd_relative_error(flat, gflat, idx, loss_fn, h))
    check(worst < 1e-5, f"{name}: autograd vs finite differences, worst rel err {worst:.2e}")


def causality(name: str) -> None:
    model, tokens, _, mcfg, _ = case_model(name)
    x = tokens[:, :-1]
    T = x.shape[1]
    with torch.no_grad():
        ref = model(x)
        for blk in model.blocks:  # scribble over the strict upper triangle
            w = blk.sgu.spatial.weight
            w.add_(torch.triu(torch.full_like(w, 5.0), diagonal=1))
        check(torch.equal(model(x), ref), f"{name}: upper triangle of W has no effect")
        t = T // 2
        y = x.clone()
        y[:, t] = (y[:, t] + 1) % mcfg["vocab_size"]
        check(torch.equal(model(y)[:, :t], ref[:, :t]) and not torch.equal(model(y), ref),
              f"{name}: changing token {t} changes nothing before it")
        err = (model(x[:, :t]) - ref[:, :t]).abs().max().item()
        check(err < 1e-12, f"{name}: prefix of length {t} matches, max diff {err:.1e}")


def slow_forward(sd: dict, cfg: dict, tokens: torch.Tensor) -> torch.Tensor:
    """docs/model.md §1–2 written out position by position, sharing no code with gmlp.reference."""
    eps = cfg["norm_eps"]

    def ln(v, w, b):
        mu = v.mean()
        return (v - mu) / torch.sqrt(((v - mu) ** 2).mean() + eps) * w + b

    def gelu(v):
        if cfg["gelu"] == "tanh":
            return 0.5 * v * (1 + torch.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
        return 0.5 * v * (1 + torch.erf(v / math.sqrt(2)))

    B, T = tokens.shape
    d, half = cfg["d_model"], cfg["d_ffn"] // 2
    out = torch.empty(B, T, cfg["vocab_size"], dtype=torch.float64)
    for b in range(B):
        x = [sd["embed.weight"][tokens[b, i]].clone() for i in range(T)]
        if cfg["pos_embedding"] == "sinusoidal":
            for i in range(T):
                for k in range(d):
                    ang = i / 10000 ** ((k - k % 2) / d)
                    x[i][k] += math.sin(ang) if k % 2 == 0 else math.cos(ang)
        for L in range(cfg["n_layers"]):
            p = lambda n: sd[f"blocks.{L}.{n}"]  # noqa: E731
            z = [gelu(p("proj_in.weight") @ ln(x[i], p("norm.weight"), p("norm.bias"))
                      + p("proj_in.bias")) for i in range(T)]
            g = [ln(z[i][half:], p("sgu.norm.weight"), p("sgu.norm.bias")) for i in range(T)]
            W, bias = p("sgu.spatial.weight"), p("sgu.spatial.bias")
            for i in range(T):
                f = bias[i] + sum(W[i, j] * g[j] for j in range(i + 1))
                x[i] = x[i] + p("proj_out.weight") @ (z[i][:half] * f) + p("proj_out.bias")
        for i in range(T):
            out[b, i] = sd["head.weight"] @ ln(x[i], sd["norm.weight"], sd["norm.bias"]) \
                + sd["head.bias"]
    return out


def against_slow(name: str) -> None:
    model, tokens, _, mcfg, _ = case_model(name)
    with torch.no_grad():
        err = (model(tokens[:, :-1]) - slow_forward(param_dict(model), mcfg,
                                                    tokens[:, :-1])).abs().max().item()
    check(err < 1e-10, f"{name}: vectorized vs loop forward, max diff {err:.1e}")


def manual_training(name: str) -> dict:
    """AdamW + global-norm clip written out; returns final params (float64)."""
    model, _, train_tokens, mcfg, tc = case_model(name)
    params = dict(model.named_parameters())
    m = {k: torch.zeros_like(p) for k, p in params.items()}
    v = {k: torch.zeros_like(p) for k, p in params.items()}
    for s in range(1, TRAIN_STEPS + 1):
        model.zero_grad()
        tok = train_tokens[s - 1]
        model.loss(model(tok[:, :-1]), tok[:, 1:]).backward()
        norm = math.sqrt(sum(float((p.grad ** 2).sum()) for p in params.values()))
        scale = min(1.0, tc["clip"] / (norm + 1e-6)) if tc["clip"] > 0 else 1.0
        lr = learning_rate(tc, mcfg["d_model"], s)
        with torch.no_grad():
            for k, p in params.items():
                g = p.grad * scale
                if decays(k):
                    p.mul_(1 - lr * tc["weight_decay"])
                m[k] = tc["beta1"] * m[k] + (1 - tc["beta1"]) * g
                v[k] = tc["beta2"] * v[k] + (1 - tc["beta2"]) * g * g
                mhat = m[k] / (1 - tc["beta1"] ** s)
                vhat = v[k] / (1 - tc["beta2"] ** s)
                p.sub_(lr * mhat / (vhat.sqrt() + tc["eps"]))
    return param_dict(model)


def training(name: str) -> None:
    model, _, train_tokens, mcfg, tc = case_model(name)
    opt = make_optimizer(model, tc)
    for s in range(1, TRAIN_STEPS + 1):
        train_step(model, opt, tc, s, train_tokens[s - 1])
    ref = param_dict(model)
    man = manual_training(name)
    err = max((ref[k] - man[k]).abs().max().item() for k in ref)
    check(err < 1e-9, f"{name}: torch AdamW vs hand-written AdamW, max diff {err:.1e}")

    # float32 run from the same start: a guide for the C++ tolerances.
    m32, _, _, _, _ = case_model(name, torch.float32)
    opt = make_optimizer(m32, tc)
    for s in range(1, TRAIN_STEPS + 1):
        train_step(m32, opt, tc, s, train_tokens[s - 1])
    drift = max((m32.state_dict()[k].double() - ref[k]).abs().max().item() for k in ref)
    print(f"info  {name}: float32 torch training drifts {drift:.1e} (max abs) from float64")


def schedules() -> None:
    tc = {"schedule": "cosine", "lr": 1.0, "min_lr": 0.1, "warmup": 4, "steps": 14}
    got = [learning_rate(tc, 0, s) for s in (1, 4, 9, 14)]
    want = [0.25, 1.0, 0.1 + 0.45 * (1 + math.cos(math.pi * 0.5)), 0.1]
    check(all(abs(a - b) < 1e-12 for a, b in zip(got, want)), f"cosine schedule {got}")
    tc = {"schedule": "noam", "lr": 0, "noam_factor": 2.0, "warmup": 4}
    got = [learning_rate(tc, 16, s) for s in (1, 4, 16)]
    want = [2 * 0.25 * 1 / 8, 2 * 0.25 * 0.5, 2 * 0.25 * 0.25]
    check(all(abs(a - b) < 1e-12 for a, b in zip(got, want)), f"noam schedule {got}")
    pe = sinusoidal_pe(3, 5, torch.float64)
    check(abs(pe[2, 2] - math.sin(2 / 10000 ** 0.4)) < 1e-15
          and abs(pe[2, 3] - math.cos(2 / 10000 ** 0.4)) < 1e-15, "sinusoidal PE values")


def main() -> int:
    torch.set_num_threads(1)
    schedules()
    for name in CASES:
        finite_differences(name)
        causality(name)
        training(name)
    against_slow("tiny")
    against_slow("odd")
    print(f"{len(FAILED)} failure(s)" if FAILED else "all checks passed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
