#!/usr/bin/env python3
"""The fastest a bf16 training step of gmlp's design could run on a GPU, and the MFU
that allows: every matrix product at the GPU's measured bf16 product ceiling, every
other pass at its measured copy ceiling, nothing else (no launch gaps, no host time).

  python3 bench/step_bound.py                       # the bench's three workloads, H100 ceilings
  python3 bench/step_bound.py --layers bert         # also each pass of one layer of a workload
  python3 bench/step_bound.py --measured bench/gpu_results/2026-11-27-h100-5-94c1cdf.json

The passes are the ones `gmlp bench --device cuda --precision bf16` makes, as
src/model/block.cpp and src/model/model.cpp call them (docs/bench-gpu.md, "How far the
design can go"): for each, the bytes it must read and write, from the tensors' shapes. A
product's time is its FLOPs at the product ceiling or its bytes at the copy ceiling,
whichever is longer. The bound is a model, not a measurement: it says what no kernel of
this design can beat, and so whether a target is within its reach.

The ceilings default to what session 42 measured on an H100 80GB HBM3 with
bench/gpu_ceilings.py: 2.98 TB/s copied, 786 TFLOP/s for a large bf16 product (under
--precision bf16 every product is one, the heads' included). MFU is against the
datasheet's dense bf16 peak, 989 TFLOP/s, as bench/gpu_bench.py reports it. The
conclusions hold at these measured ceilings: give the datasheet's (--copy-tbs 3.35
--bf16-tflops 989) for the bound no kernel could reach.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "python"))
from gpu_bench import WORKLOADS, flops_per_step, model_config  # noqa: E402
from gmlp import reference as gmlp_ref  # noqa: E402

BF16, F32 = 2, 4


class Step:
    """A step's passes (bytes) and products (FLOPs, bytes), each named, in order."""

    def __init__(self):
        self.items: list[tuple[str, str, float, float]] = []  # (kind, name, flops, bytes)

    def pass_(self, name: str, nbytes: float) -> None:
        self.items.append(("pass", name, 0.0, nbytes))

    def product(self, name: str, flops: float, nbytes: float = 0.0) -> None:
        self.items.append(("product", name, flops, nbytes))

    @staticmethod
    def seconds(item, bw: float, peak: float) -> float:
        _, _, flops, nbytes = item
        return max(flops / peak, nbytes / bw)


def layer(s: Step, c: dict, B: int, first: bool, last: bool, fused: bool) -> None:
    """One block's passes, forward and backward (block.cpp's bf16 path: an SGU split in
    two, one head, no attention). Stochastic depth (survival_prob < 1) leaves the
    residual to the next block's LayerNorm (residual_keep_layernorm_bf16)."""
    T, d, f = c["seq_len"], c["d_model"], c["d_ffn"]
    g, M = f // 2, T * B
    keep = c["survival_prob"] < 1.0
    causal = c["task"] == "causal_lm"
    mix = (T * (T + 1) if causal else 2 * T * T) * g * B  # the useful FLOPs of one spatial product
    # The forward.
    if keep and not first:  # x = x_before + keep h, written back, and its LayerNorm
        s.pass_("residual + block LayerNorm forward", M * d * (3 * F32 + BF16))
    else:
        s.pass_("block LayerNorm forward", M * d * (F32 + BF16))
    s.product("in-projection U = h W1^T", 2 * M * d * f, M * (d + f) * BF16)
    s.pass_("gate LayerNorm forward (GELU on read)", 2 * M * g * BF16)
    if fused:  # GMLP_CUDA_SPATIAL_COMBINE=on (mix_tiles.cuh): the product writes F and S, reading G and U1
        s.product("spatial product + bias + combine (one kernel)", mix, 4 * M * g * BF16)
    else:
        s.product("spatial product F = W G", mix, 2 * M * g * BF16)
        s.pass_("bias + combine (U1, F read; S written)", 3 * M * g * BF16)
    # x read and x + the branch written; under stochastic depth the branch alone written.
    s.product("out-projection (+ residual, unless kept)", 2 * M * g * d, M * g * BF16 + M * d * (1 if keep else 2) * F32)
    if keep and last:
        s.pass_("the last block's residual", 3 * M * d * F32)
    # The backward.
    s.pass_("dY rounded, the out-projection's bias summed", M * d * (F32 + BF16))
    s.product("dS = dY V", 2 * M * d * g, M * (d + g) * BF16)
    s.pass_("gate pass (dS, U1, F read; S, dF, dU1 written)", 6 * M * g * BF16)
    s.product("dV = dY^T S", 2 * M * d * g, M * (d + g) * BF16)
    s.pass_("spatial bias gradient (dF read)", M * g * BF16)
    s.product("dG = W^T dF", mix, 2 * M * g * BF16)
    s.product("dW = dF G^T", mix, 2 * M * g * BF16)
    s.pass_("gate LayerNorm backward (dG, U2 read; dU2 written)", 3 * M * g * BF16)
    s.product("dh = dU W1", 2 * M * f * d, M * f * BF16 + M * d * F32)
    s.product("dW1 += dU^T h", 2 * M * f * d, M * (f + d) * BF16)
    s.pass_("block LayerNorm backward (dh, x read; dx read and written)", 4 * M * d * F32)


def params(c: dict) -> int:
    T, d, f = c["seq_len"], c["d_model"], c["d_ffn"]
    g = f // 2
    per_layer = 2 * d + d * f + f + 2 * g + T * T + T + g * d + d
    n = c["n_layers"] * per_layer + 2 * d
    if c["task"] == "vision":
        p = c["image_channels"] * c["patch_height"] * c["patch_width"]
        return n + p * d + d + d * c["n_classes"] + c["n_classes"]
    V = c["vocab_size"]
    return n + V * d + d * V + V


def step(mc: dict, B: int, fused: bool = False) -> tuple[Step, Step, int]:
    """The whole step's passes, and one middle layer's alone."""
    c = gmlp_ref.full_config(mc)
    T, d, L = c["seq_len"], c["d_model"], c["n_layers"]
    M = T * B
    s, one = Step(), Step()
    if c["task"] == "vision":
        p = c["image_channels"] * c["patch_height"] * c["patch_width"]
        pixels = B * c["image_channels"] * c["image_height"] * c["image_width"]
        s.pass_("patches cut into bf16", pixels * F32 + M * p * BF16)
        s.product("patch embedding", 2 * M * p * d, M * p * BF16 + M * d * F32)
    else:  # the rows written (the table's few hundred KB stay in L2)
        s.pass_("embedding", M * d * F32)
    for i in range(L):
        layer(s, c, B, i == 0, i == L - 1, fused)
    layer(one, c, B, False, False, fused)
    s.pass_("final LayerNorm forward", 2 * M * d * F32)
    if c["task"] == "vision":
        s.pass_("mean pool, forward and backward", 2 * M * d * F32)
        s.product("head", 3 * 2 * B * d * c["n_classes"])
    else:
        # Every row through the head, as `gmlp bench` runs a masked LM (`gmlp train`
        # scores only the masked rows).
        V = c["vocab_size"]
        s.product("head, forward and backward", 3 * 2 * M * d * V, 3 * M * V * F32)
        s.pass_("cross-entropy", 2 * M * V * F32)
    s.pass_("final LayerNorm backward (h rebuilt, then dx)", 5 * M * d * F32)
    if c["task"] == "vision":
        s.pass_("dx rounded for the patch embedding's weights", M * d * (F32 + BF16))
        p = c["image_channels"] * c["patch_height"] * c["patch_width"]
        s.product("patch embedding's dW", 2 * M * p * d, M * (p + d) * BF16)
    else:
        s.pass_("embedding backward", M * d * F32)
    n = params(c)
    # The weights the products read in bf16, copied each step: the projections, W, the
    # patch embedding.
    g = c["d_ffn"] // 2
    copied = L * (d * c["d_ffn"] + g * d + T * T)
    if c["task"] == "vision":
        copied += c["image_channels"] * c["patch_height"] * c["patch_width"] * d
    s.pass_("the weights' bf16 copies", copied * (F32 + BF16))
    # Gradients zeroed (the products add into them), their norm for clipping, AdamW (p,
    # g, m, v read; p, m, v written).
    s.pass_("gradients zeroed, their norm, AdamW", n * (F32 + F32 + 7 * F32))
    return s, one, n


def measured_steps(files: list, impl: str = "gmlp bf16") -> dict:
    """One row's step times (ms) by workload, from bench/gpu_bench.py --json files."""
    out: dict = {}
    for f in files:
        for r in json.loads(pathlib.Path(f).read_text()):
            if r.get("impl") == impl and "step_s" in r:
                out.setdefault(r["workload"], []).append(r["step_s"] * 1e3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="lm,bert,vision")
    ap.add_argument("--copy-tbs", type=float, default=2.98, help="copy ceiling, TB/s (H100, session 42)")
    ap.add_argument("--bf16-tflops", type=float, default=786.0, help="bf16 product ceiling, TFLOP/s (H100)")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="the datasheet's dense bf16 peak, for MFU")
    ap.add_argument("--layers", default="", metavar="WORKLOAD", help="also each pass of one layer of this workload")
    ap.add_argument("--combine-in-product", default="", metavar="WORKLOADS",
                    help="these workloads' spatial products with the bias + combine in their tiles "
                         "(GMLP_CUDA_SPATIAL_COMBINE=on; the default until session 55 where T is no multiple of 8: "
                         "vision), not the default's product then pass")
    ap.add_argument("--measured", nargs="*", default=[], metavar="FILE",
                    help="bench/gpu_bench.py --json results: their gmlp bf16 steps beside the bound")
    ap.add_argument("--measured-impl", default="gmlp bf16", metavar="LABEL",
                    help="the results' row to set beside the bound (another of gmlp's bf16 rows)")
    args = ap.parse_args()
    fused = set(filter(None, args.combine_in_product.split(",")))
    unknown = [n for n in args.workloads.split(",") + sorted(fused) + [args.layers] if n and n not in WORKLOADS]
    if unknown:
        ap.error(f"no workload {', '.join(unknown)} (the workloads: {', '.join(WORKLOADS)})")
    bw, peak = args.copy_tbs * 1e12, args.bf16_tflops * 1e12
    measured = measured_steps(args.measured, args.measured_impl)
    print(f"Ceilings: copy {args.copy_tbs} TB/s, bf16 products {args.bf16_tflops} TFLOP/s; MFU against "
          f"{args.peak_tflops} TFLOP/s.\n")
    print("| workload | model TFLOP a step | products (ms) | other passes: GB, ms | the bound (ms) | MFU at the bound "
          "| the same with every product at the datasheet's peak | measured step (ms) | MFU measured | measured / bound |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.workloads.split(","):
        w = WORKLOADS[name]
        mc = model_config(w, False)
        B = w["batch"]
        s, _, _ = step(mc, B, name in fused)
        flops = flops_per_step(mc, B)
        prod = sum(s.seconds(i, bw, peak) for i in s.items if i[0] != "pass")
        pas = sum(s.seconds(i, bw, peak) for i in s.items if i[0] == "pass")
        gb = sum(i[3] for i in s.items if i[0] == "pass") / 1e9
        prod_dp = sum(s.seconds(i, bw, args.peak_tflops * 1e12) for i in s.items if i[0] != "pass")
        bound = prod + pas
        mfu = flops / bound / (args.peak_tflops * 1e12)
        mfu_dp = flops / (prod_dp + pas) / (args.peak_tflops * 1e12)
        m = measured.get(name, [])
        mcell = ", ".join(f"{x:.2f}" for x in m) or "—"
        mm = f"{flops / (max(m) / 1e3) / (args.peak_tflops * 1e12) * 100:.1f}–" \
             f"{flops / (min(m) / 1e3) / (args.peak_tflops * 1e12) * 100:.1f}%" if m else "—"
        ratio = f"{min(m) / (bound * 1e3):.2f}–{max(m) / (bound * 1e3):.2f}" if m else "—"
        print(f"| {name} | {flops / 1e12:.2f} | {prod * 1e3:.2f} | {gb:.2f}, {pas * 1e3:.2f} | {bound * 1e3:.2f} "
              f"| {mfu * 100:.1f}% | {mfu_dp * 100:.1f}% | {mcell} | {mm} | {ratio} |")
    if args.layers:
        w = WORKLOADS[args.layers]
        _, one, _ = step(model_config(w, False), w["batch"], args.layers in fused)
        print(f"\nOne layer of {args.layers} (batch {w['batch']}), forward and backward:\n")
        print("| pass or product | GFLOP | MB | bound (µs) |")
        print("|---|---:|---:|---:|")
        for i in one.items:
            print(f"| {i[1]}{'' if i[0] == 'pass' else ' (' + i[0] + ')'} | {i[2] / 1e9:.1f} | {i[3] / 1e6:.1f} "
                  f"| {one.seconds(i, bw, peak) * 1e6:.1f} |")
        tot = sum(one.seconds(i, bw, peak) for i in one.items)
        pas = sum(one.seconds(i, bw, peak) for i in one.items if i[0] == "pass")
        print(f"| the layer | | | {tot * 1e6:.1f} (passes {pas * 1e6:.1f}) |")


if __name__ == "__main__":
    main()
