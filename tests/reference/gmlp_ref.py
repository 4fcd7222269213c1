"""PyTorch reference for gmlp.cpp: the oracle for the C++ parity tests and the PyTorch
performance peer.

The model follows ../../../shared/SPEC.md sections 1, 2, 4 and 6 (causal language model
only). Activations inside the blocks are [seq, batch, channel], like the C++ engine, so
the spatial projection is a plain [T, T] x [T, B*C] matrix product.

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


# --------------------------------------------------------------------------------- model

class SpatialProj(nn.Module):
    """The SGU's token-mixing projection f(G)[i] = sum_{j<=i} W[i,j] G[j] + b[i]."""

    def __init__(self, n: int, init_scale: float):
        super().__init__()
        # Near-identity start (SPEC 2): W ~ 0 and b = 1 make s(Z) ~ Z1.
        self.weight = nn.Parameter(torch.empty(n, n).uniform_(-init_scale, init_scale))
        self.bias = nn.Parameter(torch.ones(n))

    def forward(self, g: torch.Tensor) -> torch.Tensor:  # g: [T, B, C]
        T, B, C = g.shape
        # Causal: the upper triangle is masked out, so its values (and gradients) are
        # irrelevant. tril keeps the autograd path through the lower triangle only.
        w = self.weight[:T, :T].tril()
        f = (w @ g.reshape(T, B * C)).view(T, B, C)
        return f + self.bias[:T, None, None]


class SpatialGatingUnit(nn.Module):
    def __init__(self, d_ffn: int, n: int, init_scale: float, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(d_ffn // 2, eps=eps)
        self.spatial = SpatialProj(n, init_scale)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        z1, z2 = z.chunk(2, dim=-1)  # z2 is the gate
        return z1 * self.spatial(self.norm(z2))


class GMLPBlock(nn.Module):
    def __init__(self, d: int, d_ffn: int, n: int, gelu: str, init_scale: float, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(d, eps=eps)
        self.proj_in = nn.Linear(d, d_ffn)
        self.sgu = SpatialGatingUnit(d_ffn, n, init_scale, eps)
        self.proj_out = nn.Linear(d_ffn // 2, d)
        self.approximate = "tanh" if gelu == "tanh" else "none"

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [T, B, d]
        z = F.gelu(self.proj_in(self.norm(x)), approximate=self.approximate)
        return x + self.proj_out(self.sgu(z))


def sinusoidal_pe(T: int, d: int, dtype=torch.float32) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same); [T, d]."""
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    freq = torch.pow(10000.0, -torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(T, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)[:, : d // 2]  # d odd: one fewer cos column
    return pe.to(dtype)


class GMLPLanguageModel(nn.Module):
    """Causal gMLP LM built from a ModelConfig JSON dict (include/gmlp/config.h)."""

    def __init__(self, cfg: dict):
        super().__init__()
        if cfg.get("task", "causal_lm") != "causal_lm":
            raise ValueError(f"task {cfg['task']!r}: only causal_lm is supported")
        if cfg["d_ffn"] % 2:
            raise ValueError(f"d_ffn {cfg['d_ffn']} must be even")
        if cfg.get("gelu", "erf") not in ("erf", "tanh"):
            raise ValueError(f"gelu {cfg['gelu']!r}: expected erf or tanh")
        if cfg.get("pos_embedding", "none") not in ("none", "sinusoidal"):
            raise ValueError(f"pos_embedding {cfg['pos_embedding']!r}")
        self.cfg = dict(cfg)
        d, n, eps = cfg["d_model"], cfg["seq_len"], cfg.get("norm_eps", 1e-5)
        self.seq_len = n
        self.sinusoidal = cfg.get("pos_embedding", "none") == "sinusoidal"
        self.embed = nn.Embedding(cfg["vocab_size"], d)  # default init N(0, 1)
        self.blocks = nn.ModuleList(
            GMLPBlock(d, cfg["d_ffn"], n, cfg.get("gelu", "erf"),
                      cfg.get("spatial_init", 0.01), eps)
            for _ in range(cfg["n_layers"]))
        self.norm = nn.LayerNorm(d, eps=eps)
        self.head = nn.Linear(d, cfg["vocab_size"])

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] int64, T <= seq_len -> logits [B, T, vocab]."""
        B, T = tokens.shape
        if T > self.seq_len:
            raise ValueError(f"sequence length {T} exceeds seq_len {self.seq_len}")
        x = self.embed(tokens.t())  # [T, B, d]; no sqrt(d) scaling
        if self.sinusoidal:
            x = x + sinusoidal_pe(T, x.shape[-1], x.dtype).to(x.device)[:, None, :]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)).transpose(0, 1)

    @staticmethod
    def loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross entropy over all B*T positions (nats)."""
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


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
    """Parameters under their SPEC 6 names (state_dict holds nothing else)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
