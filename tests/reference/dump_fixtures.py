#!/usr/bin/python3
"""Writes the parity fixtures that the C++ tests compare against.

usage: dump_fixtures.py --out DIR

For each case, DIR/<case>.model.safetensors holds the float32 parameters (the tensor names of docs/checkpoint.md,
metadata gmlp.config) and DIR/<case>.case.safetensors holds inputs and the expected
results: forward logits and loss, the gradient of every parameter, and (the causal-LM
cases of CASES only) a 10-step AdamW run (per-step tokens, lrs, losses, pre-clip grad
norms, final parameters).

Case-file keys (float32 unless said otherwise; every name is optional unless the case
needs it):
  tokens        I32 [B, T+1] for causal_lm (input tokens[:, :-1], targets tokens[:, 1:]);
                I32 [B, T] for mlm and classify (the exact input, padding included)
  targets       I32 [B, T] for mlm (-1 = no target: unchosen or padded positions);
                I32 [B] for classify and vision (class labels)
  images        [B, C, H, W] (vision)
  lengths       I32 [B]: real lengths, positions t >= lengths[b] are padding
  keep          [L, B]: stochastic-depth multipliers, x += keep[l, b] * branch
  dropout_seed  [1] int64: the step's dropout seed (its bits as uint64)
  drop          [L, T, B, d]: the dropout masks of the branches it gives, x += keep[l, b] *
                drop[l] * branch (made by the reference's copy of the engine's generator)
  head_drop     [B, d]: the dropout mask it gives the classifier's pooled input
  logits        [B, T, V] (causal_lm, mlm; padded rows follow the contract: their keys
                are masked, they are not) or [B, n_classes] (classify, vision)
  loss          [1]: mean cross entropy over targets >= 0, or over the B labels
  grad.<param>  d loss / d param, for every parameter in checkpoint order
  train.*, final.*   the 10-step AdamW run (only the four CASES)

The references are computed in float64 from the very float32 values stored in the model
file, so they are the exact answer up to float64 rounding; the C++ float32 results are
compared against them with tolerances. Everything is seeded: reruns give identical bytes.
Each file is written atomically (temp file in DIR, fsync, rename), so several dumpers may
write the same DIR at once and a reader never sees a half-written file.
"""
from __future__ import annotations

import argparse
import json
import os
import string
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))  # the gmlp package
from gmlp.reference import (GMLP, GMLPLanguageModel, full_config, load_safetensors,  # noqa: E402
                     dropout_mask, make_optimizer, param_dict, param_shapes, save_safetensors,
                     survival_probs, train_step)

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


def build_model(seed: int, cfg: dict) -> GMLP:
    """the init of docs/model.md §2, then perturbed so that every parameter matters to the test: LayerNorm
    params and the spatial bias move off 1/0, and the spatial weight gets large values
    over the whole matrix (a causal model must ignore the upper triangle, a padded one
    the masked columns); aMLP's attention is sharpened so its gradients matter."""
    torch.manual_seed(seed)
    model = GMLP(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("spatial.bias"):
                p.add_(torch.randn_like(p) * 0.02)
            elif name.endswith("spatial.weight"):
                p.uniform_(-0.3, 0.3)
            elif name.endswith("attn.qkv.weight"):
                p.mul_(2.0)
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


# ------------------------------------------------------------------- variant fixtures
#
# Forward + loss + every gradient (no training run) for every variant of docs/variants.md.
# Configs carry every key of the `model` section (gmlp.reference.CONFIG_DEFAULTS order).

BYTE_SPECIALS = {"kind": "byte", "specials": ["[PAD]", "[MASK]"]}              # 258: PAD 256
CHAR_SPECIALS = {"kind": "char", "chars": PRINTABLE_50, "specials": ["[PAD]", "[MASK]"]}  # 52
SHAKESPEARE_TOK = {"kind": "char", "chars": SHAKESPEARE}                      # 65


def vcfg(task: str, d: int, d_ffn: int, layers: int, n: int, **kw) -> dict:
    """A complete model config (every key written out) for a variant case."""
    tok = kw.pop("tokenizer", None)
    cfg = {"task": task, "d_model": d, "d_ffn": d_ffn, "n_layers": layers, "seq_len": n,
           **kw}
    if task != "vision":
        tok = tok or ({"kind": "byte"} if task == "causal_lm" else BYTE_SPECIALS)
        base = len(tok["chars"]) if tok["kind"] == "char" else 256
        cfg["tokenizer"] = tok
        cfg["vocab_size"] = base + len(tok.get("specials", []))
    return full_config(cfg)


def vision_cfg(layers: int, **kw) -> dict:
    """Image 3 x 8 x 12 (non-square) cut into 4 x 3 patches (non-square): grid 2 x 4."""
    return vcfg("vision", 16, 32, layers, 8, n_classes=5, image_channels=3, image_height=8,
                image_width=12, patch_height=4, patch_width=3, **kw)


# name -> (seed, config, B, T, lengths or None, survive pattern [L][B] or None)
# T is the sequence length (patch count for vision). Padded cases take T < seq_len where
# W is full, so that check_variants.py can re-run them padded to a longer T.
VARIANT_CASES = {
    "mlm_bidir": (5001, vcfg("mlm", 16, 32, 2, 12), 3, 12, None, None),
    "mlm_pad": (5002, vcfg("mlm", 16, 32, 2, 16), 3, 14, [14, 9, 3], None),
    "classify_pad": (5003, vcfg("classify", 16, 40, 2, 20, n_classes=6,
                                tokenizer=CHAR_SPECIALS), 4, 17, [17, 12, 5, 1], None),
    "heads_causal": (5004, vcfg("causal_lm", 16, 32, 2, 12, sgu_heads=2,
                                tokenizer=SHAKESPEARE_TOK), 2, 10, None, None),
    "heads_bidir_pad": (5005, vcfg("mlm", 12, 36, 2, 14, sgu_heads=3), 3, 13, [13, 8, 4],
                        None),
    # T = 16 > n = 10: offsets >= n weigh 0, rows >= n use b[n-1].
    "toeplitz_causal": (5006, vcfg("causal_lm", 16, 32, 2, 10, spatial="toeplitz",
                                   tokenizer=SHAKESPEARE_TOK), 2, 16, None, None),
    "toeplitz_bidir": (5007, vcfg("mlm", 16, 32, 2, 16, spatial="toeplitz"), 3, 12,
                       [12, 7, 3], None),
    "toeplitz_heads": (5008, vcfg("causal_lm", 16, 48, 2, 8, spatial="toeplitz", sgu_heads=2,
                                  tokenizer=SHAKESPEARE_TOK), 2, 11, None, None),
    "amlp_causal": (5009, vcfg("causal_lm", 16, 32, 2, 12, d_attn=8,
                               tokenizer=SHAKESPEARE_TOK), 2, 12, None, None),
    "amlp_bidir_pad": (5010, vcfg("mlm", 16, 32, 2, 14, d_attn=8), 3, 12, [12, 7, 2], None),
    "sgu_none": (5011, vcfg("causal_lm", 16, 32, 2, 10, sgu="none",
                            tokenizer=SHAKESPEARE_TOK), 2, 9, None, None),
    "sgu_linear": (5012, vcfg("causal_lm", 16, 32, 2, 10, sgu="linear",
                              tokenizer=SHAKESPEARE_TOK), 2, 9, None, None),
    "sgu_additive": (5013, vcfg("causal_lm", 16, 32, 2, 10, sgu="additive",
                                tokenizer=SHAKESPEARE_TOK), 2, 9, None, None),
    "sgu_multiplicative": (5014, vcfg("causal_lm", 16, 32, 2, 10, sgu="multiplicative",
                                      tokenizer=SHAKESPEARE_TOK), 2, 9, None, None),
    "sgu_linear_bidir_pad": (5015, vcfg("mlm", 16, 24, 2, 12, sgu="linear"), 3, 11,
                             [11, 6, 4], None),
    # timm's eps: 1e-6 in the block and final norms, 1e-5 in the gate's.
    "vision": (5016, vision_cfg(2, norm_eps=1e-6, sgu_norm_eps=1e-5), 3, 8, None, None),
    # keep[l, b] = survive[l][b] / p_l, p_l = 1 - (l/L)(1 - 0.6): every block is dropped for
    # some sample and kept for others.
    "vision_drop": (5017, vision_cfg(3, survival_prob=0.6), 4, 8, None,
                    [[1, 0, 1, 1], [0, 1, 1, 0], [1, 1, 0, 1]]),
    "vision_amlp_heads": (5018, vision_cfg(2, d_attn=8, sgu_heads=2), 3, 8, None, None),
    # Dropout (a seed passed to both sides; the masks made here by the reference's copy of
    # the engine's generator, and checked against the engine's): on the branches and the
    # pooled input of a padded classifier; on the branches of a masked LM; with
    # stochastic depth.
    "classify_dropout": (5019, vcfg("classify", 16, 40, 2, 20, n_classes=4, dropout=0.3,
                                    head_dropout=0.5, tokenizer=CHAR_SPECIALS),
                         4, 15, [15, 9, 4, 2], None),
    "mlm_dropout": (5020, vcfg("mlm", 16, 32, 2, 12, dropout=0.2), 3, 12, [12, 7, 5], None),
    "vision_drop_dropout": (5021, vision_cfg(3, survival_prob=0.6, dropout=0.25, head_dropout=0.1),
                            4, 8, None, [[1, 0, 1, 1], [0, 1, 1, 0], [1, 1, 0, 1]]),
}

MLM_RATE = 0.3  # fraction of real positions chosen as MLM targets (fixtures only)


def variant_inputs(name: str) -> tuple[GMLP, dict]:
    """(float32 model, case inputs) of a variant case; the inputs are seeded, so
    check_variants.py rebuilds exactly what the fixtures hold."""
    seed, cfg, B, T, lengths, survive = VARIANT_CASES[name]
    model = build_model(seed, cfg)
    gen = torch.Generator().manual_seed(seed + 1)
    task, inputs = cfg["task"], {}
    if task == "causal_lm":
        inputs["tokens"] = torch.randint(cfg["vocab_size"], (B, T + 1), generator=gen)
    elif task == "vision":
        inputs["images"] = torch.randn(B, cfg["image_channels"], cfg["image_height"],
                                       cfg["image_width"], generator=gen)
        inputs["targets"] = torch.randint(cfg["n_classes"], (B,), generator=gen)
    else:
        specials = cfg["tokenizer"]["specials"]
        base = cfg["vocab_size"] - len(specials)
        pad, mask = base + specials.index("[PAD]"), base + specials.index("[MASK]")
        lens = torch.tensor(lengths if lengths else [T] * B)
        real = torch.arange(T)[None, :] < lens[:, None]                       # [B, T]
        tokens = torch.randint(base, (B, T), generator=gen)
        if task == "mlm":
            chosen = (torch.rand(B, T, generator=gen) < MLM_RATE) & real
            chosen[torch.arange(B), (lens - 1).clamp(min=0)] |= ~chosen.any(dim=1)
            targets = torch.where(chosen, tokens, torch.full_like(tokens, -1))
            u = torch.rand(B, T, generator=gen)  # BERT: 80% [MASK], 10% random, 10% kept
            rnd = torch.randint(base, (B, T), generator=gen)
            tokens = torch.where(chosen & (u < 0.8), torch.full_like(tokens, mask), tokens)
            tokens = torch.where(chosen & (u >= 0.8) & (u < 0.9), rnd, tokens)
        else:
            targets = torch.randint(cfg["n_classes"], (B,), generator=gen)
        inputs["tokens"] = torch.where(real, tokens, torch.full_like(tokens, pad))
        inputs["targets"] = targets
    if lengths is not None:
        inputs["lengths"] = torch.tensor(lengths)
    if survive is not None:
        p = survival_probs(cfg["n_layers"], cfg["survival_prob"])
        keep = torch.tensor([[s / p[l] for s in row] for l, row in enumerate(survive)])
        inputs["keep"] = keep.to(torch.float32)
    if cfg["dropout"] > 0 or cfg["head_dropout"] > 0:
        dseed = (seed * 0x9E3779B97F4A7C15) % 2**64  # all 64 bits in play
        inputs["dropout_seed"] = torch.tensor([dseed - 2**64 if dseed >= 2**63 else dseed])  # int64's bits
        L, d = cfg["n_layers"], cfg["d_model"]
        if cfg["dropout"] > 0:
            inputs["drop"] = torch.stack([dropout_mask(dseed, l, cfg["dropout"], B, T, d) for l in range(L)])
        if cfg["head_dropout"] > 0:
            inputs["head_drop"] = dropout_mask(dseed, L, cfg["head_dropout"], B, 1, d)[0]
    return model, inputs


def variant_forward(model: GMLP, inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, loss) of a case; float inputs are cast to the model's dtype."""
    dtype = next(model.parameters()).dtype
    tokens, targets = inputs.get("tokens"), inputs.get("targets")
    if model.task == "causal_lm":
        tokens, targets = tokens[:, :-1], tokens[:, 1:]
    images = inputs["images"].to(dtype) if "images" in inputs else None
    keep = inputs["keep"].to(dtype) if "keep" in inputs else None
    drops = {k: inputs[k].to(dtype) for k in ("drop", "head_drop") if k in inputs}
    logits = model(tokens=tokens, images=images, lengths=inputs.get("lengths"), keep=keep, **drops)
    return logits, model.loss(logits, targets)


def unused_regions(cfg: dict, T: int) -> dict[str, torch.Tensor]:
    """Boolean masks of parameter entries that cannot influence a length-T forward (so
    their gradient must be exactly zero): spatial W rows/cols >= T and the causal upper
    triangle (full), Toeplitz offsets beyond |i - j| < min(T, n), spatial b rows >= T."""
    n, causal, out = cfg["seq_len"], cfg["task"] == "causal_lm", {}
    for name, shape in param_shapes(cfg).items():
        m = None
        if name.endswith("spatial.weight"):
            if cfg["spatial"] == "full":
                i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
                m = (i >= T) | (j >= T) | ((j > i) if causal else torch.zeros((), dtype=bool))
            else:
                reach = min(T, n)
                off = torch.arange(shape[-1]) - (0 if causal else n - 1)  # offset i - j
                m = off.abs() >= reach
        elif name.endswith("spatial.bias"):
            m = torch.arange(n) >= T
        if m is not None:
            out[name] = m.expand(shape)
    return out


def run_variant(name: str, out_dir: str) -> str:
    seed, cfg, B, T, lengths, survive = VARIANT_CASES[name]
    model32, inputs = variant_inputs(name)
    params32 = param_dict(model32)
    shapes = param_shapes(cfg)
    if list(params32) != list(shapes) or any(tuple(params32[k].shape) != shapes[k]
                                             for k in shapes):
        raise RuntimeError(f"case {name}: model parameters differ from param_shapes")
    model = GMLP(cfg).double()
    model.load_state_dict({k: v.double() for k, v in params32.items()})
    logits, loss = variant_forward(model, inputs)
    loss.backward()
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()}

    f32 = lambda t: t.detach().to(torch.float32).contiguous()  # noqa: E731
    case = {}
    for k in ("tokens", "targets", "lengths"):
        if k in inputs:
            case[k] = inputs[k].to(torch.int32)
    if "dropout_seed" in inputs:
        case["dropout_seed"] = inputs["dropout_seed"].to(torch.int64)
    for k in ("keep", "images", "drop", "head_drop"):
        if k in inputs:
            case[k] = f32(inputs[k])
    case["logits"] = f32(logits)
    case["loss"] = f32(loss.reshape(1))
    case.update({f"grad.{k}": f32(v) for k, v in grads.items()})

    for k, v in case.items():
        if v.is_floating_point() and not torch.isfinite(v).all():
            raise RuntimeError(f"case {name}: tensor {k} has non-finite values")
    for k, g in grads.items():
        if not g.ne(0).any():
            raise RuntimeError(f"case {name}: gradient of {k} is identically zero")
    partial = []
    for k, m in unused_regions(cfg, T).items():
        if g := grads[k][m].abs().max().item() if m.any() else 0.0:
            raise RuntimeError(f"case {name}: {k} has gradient {g} where it is unused")
        if m.any():
            partial.append(f"{k.split('.', 2)[-1]} {int(m.sum())}/{m.numel()}")
    mjson = json.dumps(cfg)
    write_atomic(os.path.join(out_dir, f"{name}.model.safetensors"), params32,
                 {"gmlp.config": mjson}, cfg)
    write_atomic(os.path.join(out_dir, f"{name}.case.safetensors"), case,
                 {"gmlp.config": mjson}, cfg)
    nparams = sum(v.numel() for v in params32.values())
    zero = f", unused (zero grad): {'; '.join(sorted(set(partial)))}" if partial else ""
    return f"{name}: {nparams} params, B={B} T={T}, loss {float(loss):.6f}{zero}"


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
        for name in VARIANT_CASES:
            print(run_variant(name, args.out), flush=True)
        nfiles = 2 * (len(CASES) + len(VARIANT_CASES))
        print(f"wrote {nfiles} files to {args.out} in {time.time() - t0:.1f}s")
    except Exception as e:  # one clear line, non-zero exit
        print(f"dump_fixtures.py: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
