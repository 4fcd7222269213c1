#!/usr/bin/python3
"""timm's vision gMLP, mirrored module for module, as the oracle of the timm interop
tests (tests/test_timm.cpp, docs/timm.md). timm itself is not installed here; this file
rebuilds its gMLP from timm/models/mlp_mixer.py and timm/layers (MlpMixer with
block_layer=SpatialGatingBlock, mlp_layer=GatedMlp, gate_layer=SpatialGatingUnit) with
the very module names, so state_dict() has timm's tensor names and shapes:

    stem.proj.weight [d, C, ph, pw]   stem.proj.bias [d]           (PatchEmbed, Conv2d)
    blocks.{i}.norm.*                 [d]                          (LayerNorm eps 1e-6)
    blocks.{i}.mlp_channels.fc1.*     [f, d], [f]                  (GatedMlp.fc1)
    blocks.{i}.mlp_channels.gate.norm.*  [f/2]                     (LayerNorm, eps 1e-5!)
    blocks.{i}.mlp_channels.gate.proj.*  [n, n], [n]               (nn.Linear(n, n))
    blocks.{i}.mlp_channels.fc2.*     [d, f/2], [d]
    norm.*                            [d]                          (LayerNorm eps 1e-6)
    head.*                            [k, d], [k]

timm's SpatialGatingUnit takes norm_layer=nn.LayerNorm (PyTorch's default eps 1e-5):
SpatialGatingBlock builds it as partial(SpatialGatingUnit, seq_len=...) without passing
its own norm_layer, so only blocks.{i}.norm and the final norm get eps 1e-6.

usage:
  timm_checkpoint.py write --out DIR
      For each case (main: 3x16x16 images, patch 4, n 16, d 16, d_ffn 32, 2 blocks,
      7 classes; wide: 2x12x16, patch 4, a 3x4 grid, n 12, d 8, d_ffn 12, 1 block,
      3 classes) writes
        DIR/<case>.timm.safetensors   the state_dict in timm's names (F32)
        DIR/<case>.case.safetensors   images [B, C, H, W]; logits [B, k] of timm's model;
                                      logits_eps_1e-06 [B, k] of the same weights with
                                      every LayerNorm at eps 1e-6
      and for main also the weights as F16, BF16 and F64 (main.{f16,bf16,f64}.timm...)
      with main.{f16,bf16}_as_f32.timm.safetensors: the same rounded values as F32.
  timm_checkpoint.py logits MODEL IMAGES OUT [--eps E]
      Builds timm's gMLP from MODEL's shapes (the image size from IMAGES), loads MODEL
      with strict=True (every timm name present, nothing extra, shapes equal) and writes
      OUT: logits [B, k] of timm's model and logits_eps [B, k] with every LayerNorm at
      eps E (default 1e-6). IMAGES holds `images` [B, C, H, W].
Forward passes run in float64 on the float32 weights; everything is seeded.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from functools import partial

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))  # the gmlp package
from gmlp.reference import load_safetensors, save_safetensors  # noqa: E402

TIMM_BLOCK_EPS = 1e-6  # MlpMixer's norm_layer=partial(nn.LayerNorm, eps=1e-6)
TIMM_GATE_EPS = 1e-5   # SpatialGatingUnit's norm_layer=nn.LayerNorm (PyTorch default)


# ------------------------------------------------------------------ timm's gMLP, mirrored

class PatchEmbed(nn.Module):
    """timm.layers.PatchEmbed (flatten=True, norm_layer=None): Conv2d, then [B, n, d]."""

    def __init__(self, img_size, patch_size, in_chans, embed_dim):
        super().__init__()
        self.img_size, self.patch_size = img_size, patch_size
        self.grid_size = (img_size[0] // patch_size[0], img_size[1] // patch_size[1])
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.norm = nn.Identity()

    def forward(self, x):
        if tuple(x.shape[-2:]) != tuple(self.img_size):
            raise ValueError(f"input size {tuple(x.shape[-2:])} != model {self.img_size}")
        x = self.proj(x).flatten(2).transpose(1, 2)  # NCHW -> NLC, row-major over the grid
        return self.norm(x)


class SpatialGatingUnit(nn.Module):
    def __init__(self, dim, seq_len, norm_layer=nn.LayerNorm):
        super().__init__()
        gate_dim = dim // 2
        self.norm = norm_layer(gate_dim)
        self.proj = nn.Linear(seq_len, seq_len)

    def forward(self, x):
        u, v = x.chunk(2, dim=-1)
        v = self.norm(v)
        v = self.proj(v.transpose(-1, -2))
        return u * v.transpose(-1, -2)


class GatedMlp(nn.Module):
    def __init__(self, in_features, hidden_features, act_layer=nn.GELU, gate_layer=None):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()  # nn.GELU(): exact erf
        self.drop1 = nn.Dropout(0.0)
        assert hidden_features % 2 == 0
        self.gate = gate_layer(hidden_features)
        self.norm = nn.Identity()
        self.fc2 = nn.Linear(hidden_features // 2, in_features)
        self.drop2 = nn.Dropout(0.0)

    def forward(self, x):
        x = self.drop1(self.act(self.fc1(x)))
        x = self.norm(self.gate(x))
        return self.drop2(self.fc2(x))


class SpatialGatingBlock(nn.Module):
    def __init__(self, dim, seq_len, mlp_ratio, norm_layer, gate_norm_layer):
        super().__init__()
        channel_dim = int(dim * mlp_ratio)
        self.norm = norm_layer(dim)
        sgu = partial(SpatialGatingUnit, seq_len=seq_len, norm_layer=gate_norm_layer)
        self.mlp_channels = GatedMlp(dim, channel_dim, gate_layer=sgu)
        self.drop_path = nn.Identity()

    def forward(self, x):
        return x + self.drop_path(self.mlp_channels(self.norm(x)))


class MlpMixer(nn.Module):
    """timm's MlpMixer as its gmlp_* factories build it (global_pool='avg')."""

    def __init__(self, num_classes, img_size, in_chans, patch_size, num_blocks, embed_dim,
                 mlp_ratio, block_eps=TIMM_BLOCK_EPS, gate_eps=TIMM_GATE_EPS):
        super().__init__()
        norm_layer = partial(nn.LayerNorm, eps=block_eps)
        gate_norm_layer = partial(nn.LayerNorm, eps=gate_eps)
        self.stem = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        self.blocks = nn.Sequential(*[
            SpatialGatingBlock(embed_dim, self.stem.num_patches, mlp_ratio, norm_layer, gate_norm_layer)
            for _ in range(num_blocks)])
        self.norm = norm_layer(embed_dim)
        self.head_drop = nn.Dropout(0.0)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, x):
        x = self.norm(self.blocks(self.stem(x)))
        return self.head(self.head_drop(x.mean(dim=1)))


def build(shapes: dict, img_size, block_eps=TIMM_BLOCK_EPS, gate_eps=TIMM_GATE_EPS) -> MlpMixer:
    """timm's gMLP for a state_dict's shapes (like gmlp::timm_gmlp_config)."""
    d, C, ph, pw = shapes["stem.proj.weight"]
    L = 1 + max(int(k.split(".")[1]) for k in shapes if k.startswith("blocks."))
    f = shapes["blocks.0.mlp_channels.fc1.weight"][0]
    k = shapes["head.weight"][0]
    return MlpMixer(k, tuple(img_size), C, (ph, pw), L, d, f / d, block_eps, gate_eps)


# ------------------------------------------------------------------------------- writing

CASES = {
    "main": dict(C=3, H=16, W=16, p=4, d=16, f=32, L=2, k=7, B=3),
    "wide": dict(C=2, H=12, W=16, p=4, d=8, f=12, L=1, k=3, B=2),
}


def random_model(c: dict, seed: int) -> MlpMixer:
    torch.manual_seed(seed)
    m = MlpMixer(c["k"], (c["H"], c["W"]), c["C"], (c["p"], c["p"]), c["L"], c["d"], c["f"] / c["d"])
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("gate.proj.weight"):  # timm inits ~0; make the mixing matter
                p.uniform_(-0.3, 0.3)
            elif name.endswith("gate.proj.bias"):
                p.copy_(1.0 + torch.empty_like(p).uniform_(-0.3, 0.3))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + torch.empty_like(p).uniform_(-0.3, 0.3))
            elif "norm" in name and name.endswith("bias"):
                p.uniform_(-0.2, 0.2)
            elif name.startswith("head."):  # timm zero-inits the head; ours must matter
                p.uniform_(-0.5, 0.5)
            # every other tensor keeps PyTorch's default (Kaiming-uniform) init
    return m.float()


def logits_of(state: dict, images: torch.Tensor, block_eps: float, gate_eps: float) -> torch.Tensor:
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    m = build(shapes, images.shape[-2:], block_eps, gate_eps).double()
    m.load_state_dict({k: v.double() for k, v in state.items()}, strict=True)
    m.eval()
    with torch.no_grad():
        return m(images.double())


def save_any(path: str, tensors: dict, dtype: str) -> None:
    """safetensors with every tensor as F16, BF16 or F64 (gmlp.reference's writer: F32/F64/I32/I64)."""
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        if dtype == "F16":
            raw = t.to(torch.float16).numpy().astype("<f2").tobytes()
        elif dtype == "BF16":
            raw = t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            raw = t.to(torch.float64).numpy().astype("<f8").tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    write_atomic(path, struct.pack("<Q", len(h)) + h + b"".join(chunks))


def write_atomic(path: str, blob: bytes) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(blob)
    os.replace(tmp, path)


def save_atomic(path: str, tensors: dict, metadata=None) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    save_safetensors(tmp, tensors, metadata)
    os.replace(tmp, path)


def write(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    for seed, (case, c) in enumerate(CASES.items()):
        m = random_model(c, 1000 + seed)
        state = {k: v.detach().clone() for k, v in m.state_dict().items()}
        g = torch.Generator().manual_seed(2000 + seed)
        images = torch.randn(c["B"], c["C"], c["H"], c["W"], generator=g)
        save_atomic(os.path.join(out, f"{case}.timm.safetensors"), state, {"format": "pt"})
        save_atomic(os.path.join(out, f"{case}.case.safetensors"), {
            "images": images,
            "logits": logits_of(state, images, TIMM_BLOCK_EPS, TIMM_GATE_EPS).float(),
            "logits_eps_1e-06": logits_of(state, images, 1e-6, 1e-6).float(),
        })
        if case == "main":
            for dt, tdt in (("F16", torch.float16), ("BF16", torch.bfloat16)):
                save_any(os.path.join(out, f"main.{dt.lower()}.timm.safetensors"), state, dt)
                save_atomic(os.path.join(out, f"main.{dt.lower()}_as_f32.timm.safetensors"),
                            {k: v.to(tdt).float() for k, v in state.items()})
            save_any(os.path.join(out, "main.f64.timm.safetensors"), state, "F64")


def logits_main(model: str, images_path: str, out: str, eps: float) -> None:
    state, _ = load_safetensors(model)
    images = load_safetensors(images_path)[0]["images"]
    save_atomic(out, {
        "logits": logits_of(state, images, TIMM_BLOCK_EPS, TIMM_GATE_EPS).float(),
        "logits_eps": logits_of(state, images, eps, eps).float(),
    })


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    w = sub.add_parser("write")
    w.add_argument("--out", required=True)
    lg = sub.add_parser("logits")
    lg.add_argument("model")
    lg.add_argument("images")
    lg.add_argument("out")
    lg.add_argument("--eps", type=float, default=1e-6)
    a = ap.parse_args()
    if a.mode == "write":
        write(a.out)
    else:
        logits_main(a.model, a.images, a.out, a.eps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
