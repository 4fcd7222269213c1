"""gmlp.reference: gMLP in PyTorch. It is the module gmlp.torch hands out, the oracle
of the C++ parity tests (tests/reference/) and the PyTorch performance peer (bench/).
It needs torch and numpy, not the compiled engine.

The model follows docs/model.md, docs/checkpoint.md and docs/variants.md (the contract for every
variant: causal LM, masked LM, sentence and image classification; multi-head, Toeplitz
and s(Z)-ablation SGUs; aMLP tiny attention; padding; stochastic depth). Activations
inside the blocks are [seq, batch, channel], like the C++ engine, so the spatial
projection is a plain [T, T] x [T, B*C] matrix product.

Also here: a dependency-free safetensors reader/writer (no `safetensors` package is
available), the learning-rate schedules and the AdamW training step with exactly the
semantics that the C++ trainer must reproduce.
"""
from __future__ import annotations

import json
import math
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# --------------------------------------------------------------------------- safetensors

_DTYPES = {"F32": (torch.float32, np.float32), "F64": (torch.float64, np.float64),
           "I32": (torch.int32, np.int32), "I64": (torch.int64, np.int64)}
_NAMES = {t: name for name, (t, _) in _DTYPES.items()}


def load_safetensors(path: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Returns ({name: tensor}, metadata). Tensors are copies (writable, CPU)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {info['dtype']}")
        tdtype, npdtype = _DTYPES[info["dtype"]]
        b, e = info["data_offsets"]
        shape = list(info["shape"])
        count = math.prod(shape)
        if not (0 <= b <= e <= len(data)) or e - b != count * np.dtype(npdtype).itemsize:
            raise ValueError(f"{path}: tensor {name}: bad data_offsets {[b, e]} for {shape}")
        arr = np.frombuffer(data[b:e], dtype=np.dtype(npdtype).newbyteorder("<"), count=count)
        tensors[name] = torch.from_numpy(arr.astype(npdtype).reshape(shape))  # astype copies
    return tensors, meta


def save_safetensors(path: str, tensors: dict[str, torch.Tensor],
                     metadata: dict[str, str] | None = None) -> None:
    """Writes tensors (F32/F64/I32/I64, any device) in insertion order."""
    header: dict = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks, offset = [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        if t.dtype not in _NAMES:
            raise ValueError(f"tensor {name}: unsupported dtype {t.dtype}")
        raw = t.numpy().astype(t.numpy().dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * (-len(hbytes) % 8)  # pad so the data section is 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for raw in chunks:
            f.write(raw)


# --------------------------------------------------------------------------------- config

TASKS = ("causal_lm", "mlm", "classify", "vision")
SGU_KINDS = ("split", "none", "linear", "additive", "multiplicative")

# Every key of the `model` section (docs/variants.md) with its default. `vocab_size`
# and `tokenizer` only concern token tasks; `vision` has vocab_size 0 and no tokenizer.
CONFIG_DEFAULTS = {
    "task": "causal_lm", "vocab_size": 256, "n_classes": 0,
    "d_model": 128, "d_ffn": 512, "n_layers": 4, "seq_len": 128,
    "gelu": "erf", "pos_embedding": "none", "spatial_init": 0.01, "norm_eps": 1e-5,
    "sgu_norm_eps": 1e-5, "sgu": "split", "sgu_heads": 1, "spatial": "full", "d_attn": 0, "survival_prob": 1.0,
    "dropout": 0.0, "head_dropout": 0.0, "long_text": "head", "text_window": 0,
    "image_channels": 0, "image_height": 0, "image_width": 0,
    "patch_height": 0, "patch_width": 0,
    "tokenizer": {"kind": "byte"},
}
# Keys a checkpoint may carry that describe data, not the network: accepted and ignored.
METADATA_KEYS = ("class_names", "normalization")


def full_config(cfg: dict) -> dict:
    """cfg with every absent key set to its default, checked against docs/variants.md.
    Raises ValueError naming the offending key."""
    c = dict(CONFIG_DEFAULTS)
    if cfg.get("task") == "vision":
        c["vocab_size"] = 0
        del c["tokenizer"]
    unknown = set(cfg) - set(CONFIG_DEFAULTS) - set(METADATA_KEYS)
    if unknown:
        raise ValueError(f"unknown config key(s) {sorted(unknown)}")
    c.update(cfg)

    def need(ok: bool, key: str, why: str) -> None:
        if not ok:
            raise ValueError(f"{key} {c[key]!r}: {why}")

    need(c["task"] in TASKS, "task", f"expected one of {TASKS}")
    need(c["sgu"] in SGU_KINDS, "sgu", f"expected one of {SGU_KINDS}")
    need(c["spatial"] in ("full", "toeplitz"), "spatial", "expected full or toeplitz")
    need(c["gelu"] in ("erf", "tanh"), "gelu", "expected erf or tanh")
    need(c["pos_embedding"] in ("none", "sinusoidal"), "pos_embedding",
         "expected none or sinusoidal")
    for k in ("d_model", "d_ffn", "n_layers", "seq_len", "sgu_heads"):
        need(int(c[k]) >= 1, k, "must be >= 1")
    need(c["d_ffn"] % 2 == 0, "d_ffn", "must be even")
    gate = c["d_ffn"] // 2 if c["sgu"] == "split" else c["d_ffn"]
    need(gate % c["sgu_heads"] == 0, "sgu_heads", f"must divide the {gate} gate channels")
    need(c["sgu"] != "none" or c["sgu_heads"] == 1, "sgu_heads", "sgu none has no heads")
    need(c["d_attn"] >= 0, "d_attn", "must be >= 0")
    need(c["d_attn"] == 0 or c["sgu"] == "split", "d_attn", "tiny attention needs sgu split")
    need(0.0 < c["survival_prob"] <= 1.0, "survival_prob", "must be in (0, 1]")
    need(0.0 <= c["dropout"] < 1.0, "dropout", "must be in [0, 1)")
    need(0.0 <= c["head_dropout"] < 1.0, "head_dropout", "must be in [0, 1)")
    need(c["head_dropout"] == 0 or c["task"] in ("classify", "vision"), "head_dropout",
         "only a classifier has a head input to drop")
    if c["task"] in ("classify", "vision"):
        need(c["n_classes"] >= 2, "n_classes", f"task {c['task']} needs >= 2 classes")
    else:
        need(c["n_classes"] == 0, "n_classes", f"task {c['task']} needs 0")
        need(c["vocab_size"] >= 1, "vocab_size", "token tasks need a vocabulary")
    if c["task"] == "vision":
        for k in ("image_channels", "image_height", "image_width", "patch_height",
                  "patch_width"):
            need(c[k] >= 1, k, "vision needs it >= 1")
        need(c["image_height"] % c["patch_height"] == 0, "patch_height",
             "must divide image_height")
        need(c["image_width"] % c["patch_width"] == 0, "patch_width",
             "must divide image_width")
        grid = (c["image_height"] // c["patch_height"]) * (c["image_width"] // c["patch_width"])
        need(c["seq_len"] == grid, "seq_len", f"vision needs seq_len = patch count {grid}")
    return c


def param_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape, in checkpoint order (docs/checkpoint.md),
    derived from the config alone (no model is built)."""
    c = full_config(cfg)
    d, C, n, h, da = c["d_model"], c["d_ffn"], c["seq_len"], c["sgu_heads"], c["d_attn"]
    split = c["sgu"] == "split"
    gate = C // 2 if split else C          # LayerNorm / spatial channels
    branch = C // 2 if split else C        # S channels, proj_out's input
    causal = c["task"] == "causal_lm"
    if c["spatial"] == "full":
        wshape = (n, n)
    else:
        wshape = (n,) if causal else (2 * n - 1,)
    heads = () if h == 1 else (h,)
    s: dict[str, tuple[int, ...]] = {}
    if c["task"] == "vision":
        s["patch.weight"] = (d, c["image_channels"] * c["patch_height"] * c["patch_width"])
        s["patch.bias"] = (d,)
    else:
        s["embed.weight"] = (c["vocab_size"], d)
    for i in range(c["n_layers"]):
        p = f"blocks.{i}."
        s[p + "norm.weight"] = s[p + "norm.bias"] = (d,)
        s[p + "proj_in.weight"], s[p + "proj_in.bias"] = (C, d), (C,)
        if c["sgu"] != "none":
            s[p + "sgu.norm.weight"] = s[p + "sgu.norm.bias"] = (gate,)
            s[p + "sgu.spatial.weight"] = heads + wshape
            s[p + "sgu.spatial.bias"] = heads + (n,)
        if da > 0:
            s[p + "attn.qkv.weight"], s[p + "attn.qkv.bias"] = (3 * da, d), (3 * da,)
            s[p + "attn.out.weight"], s[p + "attn.out.bias"] = (C // 2, da), (C // 2,)
        s[p + "proj_out.weight"], s[p + "proj_out.bias"] = (d, branch), (d,)
    out = c["vocab_size"] if c["task"] in ("causal_lm", "mlm") else c["n_classes"]
    s["norm.weight"] = s["norm.bias"] = (d,)
    s["head.weight"], s["head.bias"] = (out, d), (out,)
    return s


def param_count(cfg: dict) -> int:
    """Number of trainable scalars of the model that cfg describes."""
    return sum(math.prod(shape) for shape in param_shapes(cfg).values())


def survival_probs(n_layers: int, p_last: float) -> list[float]:
    """Stochastic depth: block l = 1..L survives with p_l = 1 - (l/L)(1 - p_L)."""
    return [1.0 - (l / n_layers) * (1.0 - p_last) for l in range(1, n_layers + 1)]


_MIX1, _MIX2, _GOLDEN = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)


def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser over uint64 (wrapping, as in C)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def dropout_mask(seed: int, stream: int, p: float, B: int, T: int, d: int,
                 row_offset: int = 0) -> torch.Tensor:
    """The engine's dropout mask [T, B, d] (src/ops/dropout_mask.h): 0 where the counter's
    24-bit draw u satisfies u / 2^24 < p, else 1/(1-p) (float32); stream l is block l's
    branch, L the classifier's input; row b is row row_offset + b of the global batch."""
    key = _mix64(np.uint64(seed) ^ _mix64(np.uint64(stream + 1)))
    t = np.arange(T, dtype=np.uint64)[:, None]
    b = np.arange(row_offset, row_offset + B, dtype=np.uint64)[None, :]
    rows = _mix64(key ^ ((b << np.uint64(32)) | t))                      # [T, B]
    c = np.arange(1, d + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        u = _mix64(rows[:, :, None] + c * _GOLDEN) >> np.uint64(40)  # [T, B, d]
    pf = np.float32(p)  # the engine's config holds p as a float
    keep = u.astype(np.float64) / 16777216.0 >= np.float64(pf)
    return torch.from_numpy(np.where(keep, np.float32(1.0) / (np.float32(1.0) - pf), np.float32(0.0)))


def draw_keep(n_layers: int, batch: int, p_last: float,
              generator: torch.Generator | None = None) -> torch.Tensor:
    """A training-time keep mask [L, B]: keep[l, b] = 1/p_l with probability p_l, else 0
    (float32, as the C++ side holds it). The trainer draws its own; tests pass one."""
    p = torch.tensor(survival_probs(n_layers, p_last), dtype=torch.float32)[:, None]
    alive = torch.rand(n_layers, batch, generator=generator) < p
    return torch.where(alive, 1.0 / p, torch.zeros(()))


# --------------------------------------------------------------------------------- model
#
# Activations inside the blocks are [T, B, C] (position, batch row, channel) like the C++
# engine. `key_mask` is a float [T, B] tensor, 1 at real positions and 0 at padding (None
# when there is no padding): it zeroes padded keys in the spatial product and sets padded
# keys' attention scores to -inf. Queries are never masked.


class SpatialProj(nn.Module):
    """The SGU's token mixing f(G)[i] = sum_j W_k[i, j] G[j] + b_k[i], k the head of the
    channel. Parameter shapes (h = 1 drops the leading head axis):
      full      weight [h, n, n]                     bias [h, n]
      toeplitz  weight [h, 2n-1] (W[i,j] = w[i-j+n-1]) or, causal, [h, n] (W[i,j] = w[i-j])
    Causal models use only j <= i. Full W needs T <= n (it uses W[:T, :T], b[:T]);
    Toeplitz runs at any T: |i - j| >= n weigh 0 and rows i >= n use b[n-1]."""

    def __init__(self, n: int, init_scale: float, heads: int = 1, toeplitz: bool = False,
                 causal: bool = True):
        super().__init__()
        self.n, self.heads, self.toeplitz, self.causal = n, heads, toeplitz, causal
        lead = () if heads == 1 else (heads,)
        wlen = (n if causal else 2 * n - 1) if toeplitz else None
        wshape = lead + ((wlen,) if toeplitz else (n, n))
        # Near-identity start (docs/model.md §2): W ~ 0 and b = 1 make s(Z) ~ Z1.
        self.weight = nn.Parameter(torch.empty(wshape).uniform_(-init_scale, init_scale))
        self.bias = nn.Parameter(torch.ones(lead + (n,)))

    def matrix(self, T: int) -> torch.Tensor:
        """The effective [h, T, T] mixing matrix, causal mask and Toeplitz reach applied."""
        n = self.n
        w = self.weight if self.heads > 1 else self.weight[None]
        if not self.toeplitz:
            if T > n:
                raise ValueError(f"sequence length {T} exceeds seq_len {n} (full spatial W)")
            m = w[:, :T, :T]
            return m.tril() if self.causal else m
        off = torch.arange(T)[:, None] - torch.arange(T)[None, :]  # i - j
        if self.causal:
            valid = (off >= 0) & (off < n)
            idx = off.clamp(0, n - 1)
        else:
            valid = off.abs() < n
            idx = (off + n - 1).clamp(0, 2 * n - 2)
        return torch.where(valid, w[:, idx], torch.zeros((), dtype=w.dtype))

    def bias_rows(self, T: int) -> torch.Tensor:
        """[h, T]: b[i], and b[n-1] for rows i >= n (Toeplitz only)."""
        b = self.bias if self.heads > 1 else self.bias[None]
        if T <= self.n:
            return b[:, :T]
        if not self.toeplitz:
            raise ValueError(f"sequence length {T} exceeds seq_len {self.n} (full spatial W)")
        return b[:, torch.arange(T).clamp(max=self.n - 1)]

    def forward(self, g: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        T, B, C = g.shape  # g: [T, B, C]
        W, bias = self.matrix(T), self.bias_rows(T)
        if key_mask is not None:
            g = g * key_mask[:, :, None].to(g.dtype)  # padded keys contribute nothing
        if self.heads == 1:
            # One [T, T] x [T, B*C] product.
            f = (W[0] @ g.reshape(T, B * C)).view(T, B, C)
            return f + bias[0][:, None, None]
        h = self.heads
        f = torch.einsum("kij,jbkc->ibkc", W, g.reshape(T, B, h, C // h))
        return (f + bias.t()[:, None, :, None]).reshape(T, B, C)


class SpatialGatingUnit(nn.Module):
    """s(Z) of docs/variants.md. split: Z1 * (f(LN(Z2)) + A); linear: f(LN(Z));
    additive: Z + f(LN(Z)); multiplicative: Z * f(LN(Z)). (`none` has no SGU module.)"""

    def __init__(self, d_ffn: int, n: int, init_scale: float, eps: float, kind: str = "split",
                 heads: int = 1, toeplitz: bool = False, causal: bool = True):
        super().__init__()
        self.kind = kind
        self.norm = nn.LayerNorm(d_ffn // 2 if kind == "split" else d_ffn, eps=eps)
        self.spatial = SpatialProj(n, init_scale, heads, toeplitz, causal)

    def forward(self, z: torch.Tensor, key_mask: torch.Tensor | None = None,
                attn: torch.Tensor | None = None) -> torch.Tensor:
        if self.kind == "split":
            z1, z2 = z.chunk(2, dim=-1)  # z2 is the gate
            f = self.spatial(self.norm(z2), key_mask)
            if attn is not None:
                f = f + attn
            return z1 * f
        f = self.spatial(self.norm(z), key_mask)
        if self.kind == "linear":
            return f
        if self.kind == "additive":
            return z + f
        return z * f  # multiplicative


class TinyAttention(nn.Module):
    """aMLP's single-head attention on the block's normalised input H [T, B, d]:
    [Q K Vv] = H Wqkv^T + bqkv; P = softmax(Q K^T / sqrt(d_attn), causal / padded keys
    masked); A = (P Vv) Wo^T + bo, of d_out = d_ffn/2 channels."""

    def __init__(self, d: int, d_attn: int, d_out: int):
        super().__init__()
        self.d_attn = d_attn
        self.qkv = nn.Linear(d, 3 * d_attn)
        self.out = nn.Linear(d_attn, d_out)

    def forward(self, h: torch.Tensor, causal: bool,
                key_mask: torch.Tensor | None = None) -> torch.Tensor:
        T = h.shape[0]
        q, k, v = self.qkv(h).chunk(3, dim=-1)  # each [T, B, d_attn]
        scores = torch.einsum("ibc,jbc->bij", q, k) / math.sqrt(self.d_attn)
        allowed = torch.ones(T, T, dtype=torch.bool)
        if causal:
            allowed = allowed.tril()
        allowed = allowed[None].expand(h.shape[1], T, T)
        if key_mask is not None:
            allowed = allowed & (key_mask.t()[:, None, :] > 0)
        p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        return self.out(torch.einsum("bij,jbc->ibc", p, v))


class GMLPBlock(nn.Module):
    """x + keep * proj_out(s(GELU(proj_in(LN(x))))), pre-norm and residual (docs/model.md §1)."""

    def __init__(self, d: int, d_ffn: int, n: int, gelu: str, init_scale: float, eps: float,
                 sgu: str = "split", heads: int = 1, toeplitz: bool = False,
                 causal: bool = True, d_attn: int = 0, sgu_eps: float | None = None):
        super().__init__()
        self.causal = causal
        # Registration order = checkpoint order: norm, proj_in, sgu, attn, proj_out.
        self.norm = nn.LayerNorm(d, eps=eps)
        self.proj_in = nn.Linear(d, d_ffn)
        if sgu != "none":
            # The gate's LayerNorm has its own eps (timm's gMLP: 1e-5 there, 1e-6 elsewhere).
            self.sgu = SpatialGatingUnit(d_ffn, n, init_scale, eps if sgu_eps is None else sgu_eps,
                                         sgu, heads, toeplitz, causal)
        else:
            self.sgu = None
        self.attn = TinyAttention(d, d_attn, d_ffn // 2) if d_attn > 0 else None
        self.proj_out = nn.Linear(d_ffn // 2 if sgu == "split" else d_ffn, d)
        self.approximate = "tanh" if gelu == "tanh" else "none"

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None,
                keep: torch.Tensor | None = None,
                drop: torch.Tensor | None = None) -> torch.Tensor:  # x: [T, B, d]
        h = self.norm(x)
        z = F.gelu(self.proj_in(h), approximate=self.approximate)
        a = self.attn(h, self.causal, key_mask) if self.attn is not None else None
        s = self.sgu(z, key_mask, a) if self.sgu is not None else z
        y = self.proj_out(s)
        if drop is not None:
            y = y * drop.to(y.dtype)  # dropout on the branch, drop: [T, B, d] of 0 or 1/(1-p)
        if keep is None:
            return x + y
        return x + keep[None, :, None].to(y.dtype) * y  # stochastic depth, keep: [B]


def sinusoidal_pe(T: int, d: int, dtype=torch.float32) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same); [T, d]."""
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    freq = torch.pow(10000.0, -torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(T, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)[:, : d // 2]  # d odd: one fewer cos column
    return pe.to(dtype)


def patchify(images: torch.Tensor, ph: int, pw: int) -> torch.Tensor:
    """[B, C, H, W] -> [T, B, C*ph*pw]: patch t = gy*(W/pw) + gx, feature
    f = c*ph*pw + py*pw + px (a Conv2d(C, d, kernel=stride=(ph, pw)) weight flattened)."""
    B, C, H, W = images.shape
    gh, gw = H // ph, W // pw
    x = images.reshape(B, C, gh, ph, gw, pw).permute(2, 4, 0, 1, 3, 5)  # gy gx B C py px
    return x.reshape(gh * gw, B, C * ph * pw)


class GMLP(nn.Module):
    """Every gMLP variant of docs/variants.md, built from a `model` config dict.

    Parameters are registered in checkpoint order, so state_dict() names and orders them
    exactly as a gmlp.cpp checkpoint does (see param_shapes)."""

    def __init__(self, cfg: dict):
        super().__init__()
        c = full_config(cfg)
        self.cfg = c
        self.task = c["task"]
        self.causal = self.task == "causal_lm"
        d, n, eps = c["d_model"], c["seq_len"], c["norm_eps"]
        self.seq_len = n
        self.toeplitz = c["spatial"] == "toeplitz"
        self.sinusoidal = c["pos_embedding"] == "sinusoidal"
        if self.task == "vision":
            self.patch = nn.Linear(c["image_channels"] * c["patch_height"] * c["patch_width"], d)
        else:
            self.embed = nn.Embedding(c["vocab_size"], d)  # default init N(0, 1)
        self.blocks = nn.ModuleList(
            GMLPBlock(d, c["d_ffn"], n, c["gelu"], c["spatial_init"], eps, c["sgu"],
                      c["sgu_heads"], self.toeplitz, self.causal, c["d_attn"], c["sgu_norm_eps"])
            for _ in range(c["n_layers"]))
        self.norm = nn.LayerNorm(d, eps=eps)
        out = c["vocab_size"] if self.task in ("causal_lm", "mlm") else c["n_classes"]
        self.head = nn.Linear(d, out)

    def forward(self, tokens: torch.Tensor | None = None, images: torch.Tensor | None = None,
                lengths: torch.Tensor | None = None,
                keep: torch.Tensor | None = None, drop: torch.Tensor | None = None,
                head_drop: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [B, T] int (token tasks) or images [B, C, H, W] float (vision);
        lengths [B] int: real lengths, positions t >= lengths[b] are padding (keys masked
        in the spatial product and the attention; classify pools real positions only);
        keep [L, B] float: stochastic-depth multipliers (None = 1 everywhere);
        drop [L, T, B, d] float: dropout masks of the blocks' branches, head_drop [B, d]:
        of the classifier's pooled input (0 or 1/(1-p); None = no dropout, as at evaluation).
        The masks are inputs, as in the C++ engine, whose trainer draws them from its RNG.
        Returns logits [B, T, vocab] (causal_lm, mlm) or [B, n_classes] (classify, vision)."""
        c = self.cfg
        if self.task == "vision":
            if images is None or tokens is not None:
                raise ValueError("task vision takes images, not tokens")
            x = self.patch(patchify(images, c["patch_height"], c["patch_width"]))
        else:
            if tokens is None or images is not None:
                raise ValueError(f"task {self.task} takes tokens, not images")
            x = self.embed(tokens.t())  # [T, B, d]; no sqrt(d) scaling
        T, B = x.shape[0], x.shape[1]
        if T > self.seq_len and not self.toeplitz:
            raise ValueError(f"sequence length {T} exceeds seq_len {self.seq_len}")
        if self.sinusoidal:
            x = x + sinusoidal_pe(T, x.shape[-1], x.dtype).to(x.device)[:, None, :]
        key_mask = None
        if lengths is not None:
            lengths = torch.as_tensor(lengths).long()
            if lengths.shape != (B,) or lengths.min() < 1 or lengths.max() > T:
                raise ValueError(f"lengths {lengths.tolist()}: need B={B} values in 1..{T}")
            key_mask = (torch.arange(T)[:, None] < lengths[None, :]).to(x.dtype)  # [T, B]
        if keep is not None and tuple(keep.shape) != (len(self.blocks), B):
            raise ValueError(f"keep {tuple(keep.shape)}: expected {(len(self.blocks), B)}")
        for l, block in enumerate(self.blocks):
            x = block(x, key_mask, None if keep is None else keep[l],
                      None if drop is None else drop[l])
        y = self.norm(x)  # [T, B, d]
        if self.task in ("causal_lm", "mlm"):
            return self.head(y).transpose(0, 1)
        if key_mask is None:
            pooled = y.mean(dim=0)
        else:
            pooled = (y * key_mask[:, :, None]).sum(dim=0) / lengths[:, None].to(y.dtype)
        if head_drop is not None:
            pooled = pooled * head_drop.to(pooled.dtype)
        return self.head(pooled)

    @staticmethod
    def loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross entropy (nats). Per-token logits [B, T, V]: over the targets >= 0
        (-1 = no target: MLM's unchosen positions, padding). Class logits [B, k]: over
        the B labels."""
        if logits.dim() == 2:
            return F.cross_entropy(logits, targets.long())
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               targets.reshape(-1).long(), ignore_index=-1)


# The causal LM of the first parity tests: the same class (its config defaults to
# task causal_lm); model(tokens) -> logits [B, T, vocab].
GMLPLanguageModel = GMLP


# ------------------------------------------------------------------------------ training

def learning_rate(tc: dict, d_model: int, s: int) -> float:
    """LR of update s (1-based); mirrors gmlp::learning_rate."""
    sched, lr, warmup = tc["schedule"], tc["lr"], tc["warmup"]
    if sched == "constant":
        return lr
    if sched == "cosine":
        if s <= warmup:
            return lr * s / warmup
        p = (s - warmup) / max(1, tc["steps"] - warmup)
        return tc["min_lr"] + 0.5 * (lr - tc["min_lr"]) * (1.0 + math.cos(math.pi * p))
    if sched == "noam":
        return tc["noam_factor"] * d_model ** -0.5 * min(s ** -0.5, s * warmup ** -1.5)
    raise ValueError(f"schedule {sched!r}: expected constant, cosine or noam")


def decays(name: str) -> bool:
    """Weight decay applies to matrices and embeddings (incl. the spatial W), never to
    biases, LayerNorm parameters or the spatial bias."""
    return name.endswith("weight") and "norm" not in name


def make_optimizer(model: nn.Module, tc: dict) -> torch.optim.AdamW:
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if decays(n)], "weight_decay": tc["weight_decay"]},
        {"params": [p for n, p in named if not decays(n)], "weight_decay": 0.0},
    ]
    # torch's AdamW (decoupled): p *= 1 - lr*wd; m, v updated; bias-corrected step
    # p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
    return torch.optim.AdamW(groups, lr=tc["lr"], betas=(tc["beta1"], tc["beta2"]),
                             eps=tc["eps"])


def train_step(model: GMLPLanguageModel, opt: torch.optim.Optimizer, tc: dict, step: int,
               tokens: torch.Tensor) -> tuple[float, float, float]:
    """One update (step is 1-based) on tokens [B, T+1]: input tokens[:, :-1], targets
    tokens[:, 1:]. Returns (loss before the update, pre-clip global grad norm, lr)."""
    opt.zero_grad(set_to_none=True)
    loss = model.loss(model(tokens[:, :-1]), tokens[:, 1:])
    loss.backward()
    params = [p for p in model.parameters() if p.grad is not None]
    if tc["clip"] > 0:
        # torch scales every grad by min(1, clip / (norm + 1e-6)).
        norm = float(torch.nn.utils.clip_grad_norm_(params, tc["clip"]))
    else:
        norm = float(torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(p.grad) for p in params])))
    lr = learning_rate(tc, model.cfg["d_model"], step)
    for g in opt.param_groups:
        g["lr"] = lr
    opt.step()
    return float(loss), norm, lr


def param_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters under the names of docs/checkpoint.md (state_dict holds nothing else)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
