#!/usr/bin/python3
"""Self-checks of the PyTorch reference's variants (run by hand:
/usr/bin/python3 check_variants.py). Each check tests the reference against a fact that
does not come from its own code:

1. parameter names, order and shapes against the checkpoint layout of docs/checkpoint.md +
   docs/variants.md (written out here again), and the variant fixtures' configs carry
   every config key;
2. the vectorized forward against a slow position-by-position transcription of
   docs/variants.md (every variant case: heads, Toeplitz, attention, padding, pooling,
   patches, stochastic depth);
3. autograd gradients against central finite differences (float64);
4. padding: a real token's output is the same (1e-12) when the batch is padded further
   with garbage tokens, and the same as the row run alone, unpadded;
5. Toeplitz: the materialised W equals w[i-j+n-1] (w[i-j] causal) with zeros beyond the
   reach n and bias rows b[min(i, n-1)], at T < n, T = n and T > n; a Toeplitz model
   equals a full-W model holding that W;
6. causality: a causal model's output at t does not change when later tokens change
   (and the upper triangle of W is ignored); bidirectional models do see later tokens;
   sgu "none" mixes no tokens at all;
7. stochastic depth: keep = 1 equals no keep (bit for bit), keep = 0 for (l, b) equals
   removing block l for sample b, keep = c equals a block whose proj_out is scaled by c;
8. vision patches equal a strided Conv2d with the weight viewed [d, C, ph, pw];
9. MLM / classification losses against hand-written cross entropies;
10. parameter counts of gMLP-Ti/S/B (docs/model.md §5 / the paper: 5.87M / 19.42M / 73.08M): exactly
    5,867,328 / 19,422,656 / 73,075,392 by the layout of docs/checkpoint.md, both from param_shapes
    and from a built model. (73,081,576, a figure once quoted for B, is 6,184 more: no
    layout that gives Ti and S exactly can give it; 73,075,392 rounds to the paper's 73.08M.)
"""
from __future__ import annotations

import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))  # the gmlp package
from check_ref import fd_relative_error  # noqa: E402
from dump_fixtures import VARIANT_CASES, variant_forward, variant_inputs  # noqa: E402
from gmlp.reference import (CONFIG_DEFAULTS, GMLP, param_count, param_dict,  # noqa: E402
                      param_shapes, survival_probs)

FAILED = []


def check(ok: bool, what: str) -> None:
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        FAILED.append(what)


def case64(name: str) -> tuple[GMLP, dict, dict]:
    """The float64 model of a variant case (from its float32 parameters) and its inputs."""
    cfg = VARIANT_CASES[name][1]
    m32, inputs = variant_inputs(name)
    model = GMLP(cfg).double()
    model.load_state_dict({k: v.double() for k, v in param_dict(m32).items()})
    return model, inputs, cfg


def run(model: GMLP, inputs: dict, **override) -> torch.Tensor:
    """Logits of the case's inputs (causal: tokens[:, :-1]) with some inputs replaced."""
    inp = {**inputs, **override}
    tokens = inp.get("tokens")
    if model.task == "causal_lm" and "tokens" not in override and tokens is not None:
        tokens = tokens[:, :-1]
    images = inp["images"].double() if inp.get("images") is not None else None
    keep = inp["keep"].double() if inp.get("keep") is not None else None
    with torch.no_grad():
        return model(tokens=tokens, images=images, lengths=inp.get("lengths"), keep=keep)


# ------------------------------------------------------------------- 1. layout

BLOCK_ORDER = ["norm.weight", "norm.bias", "proj_in.weight", "proj_in.bias",
               "sgu.norm.weight", "sgu.norm.bias", "sgu.spatial.weight", "sgu.spatial.bias",
               "attn.qkv.weight", "attn.qkv.bias", "attn.out.weight", "attn.out.bias",
               "proj_out.weight", "proj_out.bias"]


def layout(name: str) -> None:
    cfg = VARIANT_CASES[name][1]
    sd = GMLP(cfg).state_dict()
    d, C, n, h, da = cfg["d_model"], cfg["d_ffn"], cfg["seq_len"], cfg["sgu_heads"], cfg["d_attn"]
    causal, split = cfg["task"] == "causal_lm", cfg["sgu"] == "split"
    want = ["patch.weight", "patch.bias"] if cfg["task"] == "vision" else ["embed.weight"]
    for i in range(cfg["n_layers"]):
        want += [f"blocks.{i}.{k}" for k in BLOCK_ORDER
                 if not (k.startswith("sgu.") and cfg["sgu"] == "none")
                 and not (k.startswith("attn.") and da == 0)]
    want += ["norm.weight", "norm.bias", "head.weight", "head.bias"]
    ok = list(sd) == want and list(param_shapes(cfg)) == want
    # Shapes, spelled out from the contract's table.
    wlen = {"full": None, "toeplitz": n if causal else 2 * n - 1}[cfg["spatial"]]
    spatial_w = (n, n) if wlen is None else (wlen,)
    shapes = {"blocks.0.proj_in.weight": (C, d),
              "blocks.0.proj_out.weight": (d, C // 2 if split else C),
              "head.weight": (cfg["vocab_size"] if cfg["task"] in ("causal_lm", "mlm")
                              else cfg["n_classes"], d)}
    if cfg["sgu"] != "none":
        shapes["blocks.0.sgu.norm.weight"] = (C // 2 if split else C,)
        shapes["blocks.0.sgu.spatial.weight"] = spatial_w if h == 1 else (h,) + spatial_w
        shapes["blocks.0.sgu.spatial.bias"] = (n,) if h == 1 else (h, n)
    if da:
        shapes.update({"blocks.0.attn.qkv.weight": (3 * da, d),
                       "blocks.0.attn.qkv.bias": (3 * da,),
                       "blocks.0.attn.out.weight": (C // 2, da),
                       "blocks.0.attn.out.bias": (C // 2,)})
    if cfg["task"] == "vision":
        shapes["patch.weight"] = (d, cfg["image_channels"] * cfg["patch_height"]
                                  * cfg["patch_width"])
    ok &= all(tuple(sd[k].shape) == v for k, v in shapes.items())
    keys = set(CONFIG_DEFAULTS) - ({"tokenizer"} if cfg["task"] == "vision" else set())
    ok &= set(cfg) == keys
    check(ok, f"{name}: parameter names, order and shapes; config has every key")


# ------------------------------------------------------------------- 2. slow forward

def slow_forward(sd: dict, cfg: dict, tokens=None, images=None, lengths=None, keep=None):
    """docs/variants.md written out position by position (float64), sharing no code with
    gmlp.reference. Returns [B, T, V] or [B, k]."""
    eps, n, h, da = cfg["norm_eps"], cfg["seq_len"], cfg["sgu_heads"], cfg["d_attn"]
    geps = cfg["sgu_norm_eps"]
    C, d, kind = cfg["d_ffn"], cfg["d_model"], cfg["sgu"]
    causal, task = cfg["task"] == "causal_lm", cfg["task"]

    def ln(v, w, b, e=None):
        mu = v.mean()
        return (v - mu) / torch.sqrt(((v - mu) ** 2).mean() + (eps if e is None else e)) * w + b

    def gelu(v):
        if cfg["gelu"] == "tanh":
            return 0.5 * v * (1 + torch.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
        return 0.5 * v * (1 + torch.erf(v / math.sqrt(2)))

    def W(l, k, i, j):  # W_k[i, j] of block l
        if causal and j > i:
            return 0.0
        w = sd[f"blocks.{l}.sgu.spatial.weight"]
        w = w[k] if h > 1 else w
        if cfg["spatial"] == "full":
            return w[i, j]
        off = i - j
        if abs(off) >= n:
            return 0.0
        return w[off] if causal else w[off + n - 1]

    def bias(l, k, i):
        b = sd[f"blocks.{l}.sgu.spatial.bias"]
        b = b[k] if h > 1 else b
        return b[min(i, n - 1)] if cfg["spatial"] == "toeplitz" else b[i]

    if task == "vision":
        B, Cimg, H, Wd = images.shape
        ph, pw = cfg["patch_height"], cfg["patch_width"]
        gw = Wd // pw
        T = (H // ph) * gw
    else:
        B, T = tokens.shape
    outs = []
    for b in range(B):
        lb = int(lengths[b]) if lengths is not None else T
        if task == "vision":
            x = []
            for t in range(T):
                gy, gx = divmod(t, gw)
                feat = torch.zeros(Cimg * ph * pw, dtype=torch.float64)
                for c in range(Cimg):
                    for py in range(ph):
                        for px in range(pw):
                            feat[c * ph * pw + py * pw + px] = images[b, c, gy * ph + py,
                                                                      gx * pw + px]
                x.append(sd["patch.weight"] @ feat + sd["patch.bias"])
        else:
            x = [sd["embed.weight"][tokens[b, t]].clone() for t in range(T)]
        if cfg["pos_embedding"] == "sinusoidal":
            for t in range(T):
                for k in range(d):
                    ang = t / 10000 ** ((k - k % 2) / d)
                    x[t][k] += math.sin(ang) if k % 2 == 0 else math.cos(ang)
        for l in range(cfg["n_layers"]):
            p = lambda s: sd[f"blocks.{l}.{s}"]  # noqa: E731
            hn = [ln(x[t], p("norm.weight"), p("norm.bias")) for t in range(T)]
            z = [gelu(p("proj_in.weight") @ hn[t] + p("proj_in.bias")) for t in range(T)]
            keys = [j for j in range(lb)]  # real positions only
            if da:
                qkv = [p("attn.qkv.weight") @ hn[t] + p("attn.qkv.bias") for t in range(T)]
                att = []
                for i in range(T):
                    js = [j for j in keys if not (causal and j > i)]
                    sc = torch.stack([qkv[i][:da] @ qkv[j][da:2 * da] / math.sqrt(da)
                                      for j in js])
                    pr = torch.exp(sc - sc.max())
                    pr = pr / pr.sum()
                    o = sum(pr[m] * qkv[j][2 * da:] for m, j in enumerate(js))
                    att.append(p("attn.out.weight") @ o + p("attn.out.bias"))
            if kind != "none":
                gate = [z[j][C // 2:] if kind == "split" else z[j] for j in range(T)]
                g = [ln(gate[j], p("sgu.norm.weight"), p("sgu.norm.bias"), geps) for j in range(T)]
                width = g[0].shape[0] // h  # channels per head
            nxt = []
            for i in range(T):
                if kind == "none":
                    s = z[i]
                else:
                    f = torch.cat([bias(l, k, i) + sum(W(l, k, i, j) * g[j][k * width:
                                                                             (k + 1) * width]
                                                       for j in keys)
                                   for k in range(h)])  # head k owns its channel slice
                    if kind == "split":
                        s = z[i][:C // 2] * (f + (att[i] if da else 0.0))
                    elif kind == "linear":
                        s = f
                    elif kind == "additive":
                        s = z[i] + f
                    else:
                        s = z[i] * f
                y = p("proj_out.weight") @ s + p("proj_out.bias")
                nxt.append(x[i] + (y if keep is None else keep[l, b] * y))
            x = nxt
        yn = [ln(x[t], sd["norm.weight"], sd["norm.bias"]) for t in range(T)]
        if task in ("causal_lm", "mlm"):
            outs.append(torch.stack([sd["head.weight"] @ v + sd["head.bias"] for v in yn]))
        else:
            m = lb if task == "classify" else T
            pooled = sum(yn[t] for t in range(m)) / m
            outs.append(sd["head.weight"] @ pooled + sd["head.bias"])
    return torch.stack(outs)


def against_slow(name: str) -> None:
    model, inputs, cfg = case64(name)
    ref = run(model, inputs)
    tokens = inputs.get("tokens")
    if cfg["task"] == "causal_lm":
        tokens = tokens[:, :-1]
    images = inputs["images"].double() if "images" in inputs else None
    keep = inputs["keep"].double() if "keep" in inputs else None
    with torch.no_grad():
        slow = slow_forward(param_dict(model), cfg, tokens, images, inputs.get("lengths"), keep)
    err = (ref - slow).abs().max().item()
    check(err < 1e-10, f"{name}: vectorized vs loop forward, max diff {err:.1e}")


# ------------------------------------------------------------------- 3. finite differences

def finite_differences(name: str) -> None:
    model, inputs, cfg = case64(name)
    loss_fn = lambda: float(variant_forward(model, inputs)[1])  # noqa: E731
    model.zero_grad()
    variant_forward(model, inputs)[1].backward()
    gen = torch.Generator().manual_seed(11)
    worst, h = 0.0, 1e-5
    with torch.no_grad():
        for pname, p in model.named_parameters():
            flat, gflat = p.view(-1), p.grad.view(-1)
            idx = torch.randint(flat.numel(), (2,), generator=gen).tolist()
            nz = gflat.nonzero().view(-1)  # plus two entries that do matter
            idx += nz[torch.randint(nz.numel(), (2,), generator=gen)].tolist()
            worst = max(worst, fd_relative_error(flat, gflat, idx, loss_fn, h))
    check(worst < 1e-5, f"{name}: autograd vs finite differences, worst rel err {worst:.2e}")


# ------------------------------------------------------------------- 4. padding

def padding(name: str) -> None:
    """Real outputs at T1 (the case) = at T2 > T1 with garbage in every padded slot =
    each row alone, unpadded."""
    model, inputs, cfg = case64(name)
    tokens, lengths = inputs["tokens"], inputs["lengths"]
    B, T1 = tokens.shape
    T2 = cfg["seq_len"] if cfg["spatial"] == "full" else T1 + 9  # Toeplitz: past n too
    gen = torch.Generator().manual_seed(99)
    garbage = torch.randint(cfg["vocab_size"], (B, T2), generator=gen)
    real = torch.arange(T2)[None, :] < lengths[:, None]
    long = torch.where(real, torch.cat([tokens, garbage[:, T1:]], 1), garbage)
    a = run(model, inputs)
    b = run(model, inputs, tokens=long)
    alone = [run(model, inputs, tokens=tokens[r:r + 1, :int(lengths[r])], lengths=None)
             for r in range(B)]
    if cfg["task"] == "classify":
        e1 = (a - b).abs().max().item()
        e2 = max((a[r] - alone[r][0]).abs().max().item() for r in range(B))
    else:
        e1 = max((a[r, :lengths[r]] - b[r, :lengths[r]]).abs().max().item() for r in range(B))
        e2 = max((a[r, :lengths[r]] - alone[r][0]).abs().max().item() for r in range(B))
    check(e1 < 1e-12 and e2 < 1e-12,
          f"{name}: real outputs padded to T={T1} vs T={T2} (garbage pads) {e1:.1e}, "
          f"vs each row alone {e2:.1e}")


def no_padding_lengths(name: str) -> None:
    model, inputs, cfg = case64(name)
    B, T = inputs["tokens"].shape[0], inputs["tokens"].shape[1] - (cfg["task"] == "causal_lm")
    e = (run(model, inputs) - run(model, inputs, lengths=torch.full((B,), T))).abs().max()
    check(float(e) < 1e-12, f"{name}: lengths all T equals no lengths, {float(e):.1e}")


# ------------------------------------------------------------------- 5. Toeplitz

def toeplitz_matrix() -> None:
    from gmlp.reference import SpatialProj
    ok = True
    for causal in (True, False):
        for heads in (1, 2):
            n = 5
            torch.manual_seed(3)
            sp = SpatialProj(n, 1.0, heads, toeplitz=True, causal=causal).double()
            with torch.no_grad():
                sp.bias.uniform_(-1, 1)
            w = sp.weight.detach() if heads > 1 else sp.weight.detach()[None]
            b = sp.bias.detach() if heads > 1 else sp.bias.detach()[None]
            ok &= w.shape[-1] == (n if causal else 2 * n - 1)
            for T in (3, n, n + 4):
                M, bias = sp.matrix(T).detach(), sp.bias_rows(T).detach()
                for k in range(heads):
                    for i in range(T):
                        ok &= bool(bias[k, i] == b[k, min(i, n - 1)])
                        for j in range(T):
                            if causal:
                                want = w[k, i - j] if 0 <= i - j < n else 0.0
                            else:
                                want = w[k, i - j + n - 1] if abs(i - j) < n else 0.0
                            ok &= bool(M[k, i, j] == want)
    check(ok, "Toeplitz W[i,j] = w[i-j+n-1] (causal w[i-j]), 0 beyond reach n, "
              "bias b[min(i,n-1)], T < n, = n, > n, 1 and 2 heads")


def toeplitz_vs_full(name: str) -> None:
    """A Toeplitz model = a full-W model whose W is the materialised Toeplitz matrix."""
    model, inputs, cfg = case64(name)
    full = GMLP({**cfg, "spatial": "full"}).double()
    sd = param_dict(model)
    n = cfg["seq_len"]
    for k in list(sd):
        if k.endswith("spatial.weight"):
            blk = model.blocks[int(k.split(".")[1])]
            M = blk.sgu.spatial.matrix(n).detach()
            sd[k] = M if cfg["sgu_heads"] > 1 else M[0]
    full.load_state_dict(sd)
    T = (inputs["tokens"].shape[1] - (cfg["task"] == "causal_lm"))
    Tm = min(T, n)
    tok = inputs["tokens"][:, :Tm]
    lengths = inputs.get("lengths")
    if lengths is not None:
        lengths = lengths.clamp(max=Tm)
    e = (run(model, inputs, tokens=tok, lengths=lengths)
         - run(full, inputs, tokens=tok, lengths=lengths)).abs().max().item()
    check(e < 1e-12, f"{name}: Toeplitz model = full model with materialised W (T={Tm}), {e:.1e}")


# ------------------------------------------------------------------- 6. causality

def causality(name: str) -> None:
    model, inputs, cfg = case64(name)
    x = inputs["tokens"][:, :-1]
    T = x.shape[1]
    ref = run(model, inputs, tokens=x)
    t = T // 2
    y = x.clone()
    y[:, t] = (y[:, t] + 1) % cfg["vocab_size"]
    out = run(model, inputs, tokens=y)
    ok = torch.equal(out[:, :t], ref[:, :t]) and not torch.equal(out[:, t:], ref[:, t:])
    if cfg["sgu"] == "none":  # no token mixing at all
        ok &= torch.equal(out[:, t + 1:], ref[:, t + 1:])
    else:
        ok &= not torch.equal(out[:, t + 1:], ref[:, t + 1:])
    if cfg["spatial"] == "full" and cfg["sgu"] != "none":
        with torch.no_grad():
            for blk in model.blocks:
                w = blk.sgu.spatial.weight
                w.add_(torch.triu(torch.full_like(w, 5.0), diagonal=1))
        ok &= torch.equal(run(model, inputs, tokens=x), ref)
    err = (run(model, inputs, tokens=x[:, :t]) - ref[:, :t]).abs().max().item()
    ok &= err < 1e-12
    what = "only position t" if cfg["sgu"] == "none" else "nothing before it"
    check(ok, f"{name}: changing token {t} changes {what}; W's upper triangle ignored; "
              f"prefix matches ({err:.1e})")


def bidirectional(name: str) -> None:
    model, inputs, cfg = case64(name)
    x = inputs["tokens"]
    lengths = inputs.get("lengths")
    t = int(lengths.min()) - 1 if lengths is not None else x.shape[1] - 1
    y = x.clone()
    y[:, t] = (y[:, t] + 1) % (cfg["vocab_size"] - 2)
    a, b = run(model, inputs), run(model, inputs, tokens=y)
    ok = not torch.equal(a[:, 0], b[:, 0])
    check(ok, f"{name}: bidirectional: changing the last real token {t} changes position 0")


# ------------------------------------------------------------------- 7. stochastic depth

def stochastic_depth(name: str) -> None:
    model, inputs, cfg = case64(name)
    L, B = cfg["n_layers"], inputs["images"].shape[0]
    base = run(model, inputs, keep=None)
    ok = torch.equal(base, run(model, inputs, keep=torch.ones(L, B)))
    # keep 0 for (l, b) == sample b through a model without block l.
    l, b = 1, 2
    keep = torch.ones(L, B)
    keep[l, b] = 0
    got = run(model, inputs, keep=keep)
    sub = GMLP({**cfg, "n_layers": L - 1}).double()
    sd = {}
    for k, v in param_dict(model).items():
        if k.startswith("blocks."):
            i = int(k.split(".")[1])
            if i == l:
                continue
            k = f"blocks.{i - (i > l)}." + k.split(".", 2)[2]
        sd[k] = v
    sub.load_state_dict(sd)
    e1 = (got[b] - run(sub, {**inputs, "images": inputs["images"][b:b + 1]}, keep=None)[0])
    e1 = e1.abs().max().item()
    ok &= torch.equal(got[:b], base[:b])
    # keep c == the branch's output layer scaled by c.
    c = float(torch.tensor(1.0 / survival_probs(L, 0.6)[l], dtype=torch.float32))  # as stored
    keep = torch.ones(L, B)
    keep[l, :] = c
    got = run(model, inputs, keep=keep)
    with torch.no_grad():
        model.blocks[l].proj_out.weight.mul_(c)
        model.blocks[l].proj_out.bias.mul_(c)
    e2 = (got - run(model, inputs, keep=None)).abs().max().item()
    check(ok and e1 < 1e-12 and e2 < 1e-12,
          f"{name}: keep=1 == no keep (bitwise); keep[{l},{b}]=0 == block {l} removed "
          f"({e1:.1e}); keep={c:.4f} == proj_out scaled ({e2:.1e})")
    p = survival_probs(30, 0.8)
    check(abs(p[0] - (1 - 0.2 / 30)) < 1e-15 and abs(p[-1] - 0.8) < 1e-15,
          f"survival_probs(30, 0.8): p_1 {p[0]:.6f}, p_30 {p[-1]:.6f}")


# ------------------------------------------------------------------- 8. patches, 9. losses

def patches(name: str) -> None:
    model, inputs, cfg = case64(name)
    from gmlp.reference import patchify
    img = inputs["images"].double()
    d, C = cfg["d_model"], cfg["image_channels"]
    ph, pw = cfg["patch_height"], cfg["patch_width"]
    with torch.no_grad():
        conv = F.conv2d(img, model.patch.weight.view(d, C, ph, pw), model.patch.bias,
                        stride=(ph, pw))  # [B, d, gh, gw]
        want = conv.flatten(2).permute(2, 0, 1)  # [gh*gw, B, d], row-major over the grid
        got = model.patch(patchify(img, ph, pw))
    e = (got - want).abs().max().item()
    check(e < 1e-12, f"{name}: patch embedding = Conv2d(kernel=stride=({ph},{pw})), {e:.1e}")


def losses() -> None:
    model, inputs, cfg = case64("mlm_pad")
    logits, loss = variant_forward(model, inputs)
    tgt = inputs["targets"]
    terms = [-torch.log_softmax(logits[b, t], -1)[tgt[b, t]]
             for b in range(tgt.shape[0]) for t in range(tgt.shape[1]) if tgt[b, t] >= 0]
    e1 = abs(float(loss) - float(sum(terms) / len(terms)))
    model, inputs, cfg = case64("classify_pad")
    logits, loss = variant_forward(model, inputs)
    tgt = inputs["targets"]
    e2 = abs(float(loss) - float(sum(-torch.log_softmax(logits[b], -1)[tgt[b]]
                                     for b in range(len(tgt))) / len(tgt)))
    check(e1 < 1e-12 and e2 < 1e-12,
          f"MLM loss = mean CE over {len(terms)} chosen positions ({e1:.1e}); "
          f"classify loss = mean CE over labels ({e2:.1e})")


# ------------------------------------------------------------------- 10. param counts

def vision_cfg(d, d_ffn, p_last):
    return {"task": "vision", "n_classes": 1000, "d_model": d, "d_ffn": d_ffn,
            "n_layers": 30, "seq_len": 196, "image_channels": 3, "image_height": 224,
            "image_width": 224, "patch_height": 16, "patch_width": 16,
            "survival_prob": p_last}


def param_counts() -> None:
    for name, (d, d_ffn, p_last), want, paper in (
            ("gMLP-Ti", (128, 768, 1.0), 5_867_328, 5.87),
            ("gMLP-S", (256, 1536, 0.95), 19_422_656, 19.42),
            ("gMLP-B", (512, 3072, 0.8), 73_075_392, 73.08)):
        cfg = vision_cfg(d, d_ffn, p_last)
        got = param_count(cfg)
        built = sum(p.numel() for p in GMLP(cfg).parameters())
        check(got == want and built == want and round(got / 1e6, 2) == paper,
              f"{name} param count {got:,} (built model {built:,}), expected {want:,} "
              f"(paper {paper}M)")
    for name, cfg in (
            ("annotated LM (vocab 65)", {"vocab_size": 65, "d_model": 512, "d_ffn": 2048,
                                         "n_layers": 6, "seq_len": 256}),
            ("gMLP base NLP (vocab 32000, untied)",
             {"task": "mlm", "vocab_size": 32000, "d_model": 512, "d_ffn": 3072,
              "n_layers": 48, "seq_len": 512}),
            ("aMLP base NLP (vocab 32000, untied)",
             {"task": "mlm", "vocab_size": 32000, "d_model": 512, "d_ffn": 3072,
              "n_layers": 36, "seq_len": 512, "d_attn": 64})):
        print(f"info  {name}: {param_count(cfg):,} params")


def main() -> int:
    torch.set_num_threads(1)
    for name in VARIANT_CASES:
        layout(name)
    for name in VARIANT_CASES:
        against_slow(name)
    for name in VARIANT_CASES:
        finite_differences(name)
    for name, (_, cfg, *_rest) in VARIANT_CASES.items():
        lengths = _rest[2]
        if lengths is not None:
            padding(name)
        elif cfg["task"] == "mlm":
            no_padding_lengths(name)
        if cfg["task"] == "causal_lm":
            causality(name)
        elif cfg["task"] in ("mlm", "classify"):
            bidirectional(name)
        if cfg["spatial"] == "toeplitz":
            toeplitz_vs_full(name)
        if cfg["task"] == "vision":
            patches(name)
    toeplitz_matrix()
    stochastic_depth("vision_drop")
    losses()
    param_counts()
    print(f"{len(FAILED)} failure(s)" if FAILED else "all checks passed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
