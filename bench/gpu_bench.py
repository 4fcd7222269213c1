#!/usr/bin/env python3
"""GPU side-by-side: `gmlp bench --device cuda` against PyTorch (eager and torch.compile,
fp32 and bf16 autocast) and, for the vision model, timm's gmlp_s16_224, in one run on
one GPU (docs/gpu.md, results in docs/bench-gpu.md).

  python3 bench/gpu_bench.py                      # the three workloads of issue 10
  python3 bench/gpu_bench.py --workloads lm --repeats 5
  python3 bench/gpu_bench.py --smoke              # tiny shapes on the CPU: checks the script runs
  python3 bench/gpu_bench.py --profile out.txt    # where the time goes: gmlp per op, PyTorch per kernel
  python3 bench/gpu_bench.py --impls compile --repeats 1   # only the implementations whose label matches
  python3 bench/gpu_bench.py --passes 2           # every implementation timed twice, one pass after the other
  python3 bench/gpu_bench.py --print-gmlp-command bf16 --workloads vision   # the gmlp side's command line
  python3 bench/gpu_bench.py --from-json bench/gpu_results/*.json   # the tables again, from saved results

Workloads (training steps: forward, loss, backward, clipping, AdamW):
  lm      the annotated LM: d 512, d_ffn 2048, 6 layers, n 256, batch 32 (configs/annotated.json)
  bert    a BERT-base-size masked LM: d 768, d_ffn 3072, 12 layers, n 512, batch 32 (byte vocabulary:
          the blocks' GEMMs decide, as the issue intends)
  vision  gMLP-S/16 at 224x224, batch 128 (configs/gmlp-s.json; timm's gmlp_s16_224 beside it)
Per implementation: step time (median), tokens or images per second, MFU against the
bf16 dense peak given by --peak-tflops (H100 SXM: 989), and peak GPU memory. The
reference model is python/gmlp/reference.py, the one the parity tests hold the
engine to, so both sides compute the same function. Both sides time one synthetic
batch over and over with the images already on the GPU (PyTorch's tensors are made
there; gmlp bench uploads its images once); token ids and targets cross each step on
gmlp's side (32 KB for the annotated LM), as they do in `gmlp train`.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shlex
import statistics
import subprocess
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))  # the gmlp package
from gmlp import reference as gmlp_ref  # noqa: E402

WORKLOADS = {
    "lm": {"config": "configs/annotated.json", "set": {}, "batch": 32},
    "bert": {"config": "configs/mlm-kjv.json",
             "set": {"model.task": "mlm", "model.d_model": 768, "model.d_ffn": 3072, "model.n_layers": 12,
                     "model.seq_len": 512}, "batch": 32},
    "vision": {"config": "configs/gmlp-s.json", "set": {}, "batch": 128},
}
SMOKE = {"model.d_model": 32, "model.d_ffn": 64, "model.n_layers": 2}


def model_config(w: dict, smoke: bool) -> dict:
    with open(ROOT / w["config"]) as f:
        mc = json.load(f)["model"]
    for k, v in {**w["set"], **(SMOKE if smoke else {})}.items():
        mc[k.split(".", 1)[1]] = v
    if mc.get("tokenizer", {}) and mc["tokenizer"].get("kind") == "char" and "vocab_size" not in mc:
        mc["vocab_size"] = 65
    if smoke and mc.get("task") == "vision":
        mc.update(image_height=32, image_width=32, patch_height=8, patch_width=8, seq_len=16)
    elif smoke:
        mc["seq_len"] = 32
    mc.pop("tokenizer", None)
    return mc


def flops_per_step(mc: dict, B: int) -> float:
    """3x the forward's useful FLOPs (gmlp's forward_flops_per_token, in Python)."""
    c = gmlp_ref.full_config(mc)
    d, f, L, n = c["d_model"], c["d_ffn"], c["n_layers"], c["seq_len"]
    g = f // 2
    causal = c["task"] == "causal_lm"
    mix = (n + 1) * g if causal else 2 * n * g
    per_layer = 2 * d * f + 2 * g * d + mix
    inp = 0 if c["task"] != "vision" else 2 * c["image_channels"] * c["patch_height"] * c["patch_width"] * d
    out = c["vocab_size"] if c["task"] in ("causal_lm", "mlm") else c["n_classes"]
    head = 2 * d * out if c["task"] in ("causal_lm", "mlm") else 2 * d * out / n
    return 3.0 * (inp + L * per_layer + head) * B * n


def batch_for(mc: dict, B: int, device: str):
    c = gmlp_ref.full_config(mc)
    if c["task"] == "vision":
        x = torch.randn(B, c["image_channels"], c["image_height"], c["image_width"], device=device)
        return {"images": x}, torch.randint(0, c["n_classes"], (B,), device=device)
    tokens = torch.randint(0, c["vocab_size"], (B, c["seq_len"]), device=device)
    targets = torch.randint(0, c["vocab_size"], (B, c["seq_len"]), device=device)
    if c["task"] == "mlm":
        targets[torch.rand(targets.shape, device=device) > 0.15] = -1
    return {"tokens": tokens}, targets


def torch_step(model, loss_fn, inputs, targets, device, bf16):
    """One training step of the PyTorch side, as its users write it; sync=False leaves
    the device running (a loop that reads its loss only to log it)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(sync=True):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(**inputs), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if device == "cuda" and sync:
            torch.cuda.synchronize()

    return step


def time_torch(model, loss_fn, inputs, targets, device, warmup, repeats, bf16, profile=False):
    step = torch_step(model, loss_fn, inputs, targets, device, bf16)
    if profile:  # device time per kernel over the repeats, after the warmup (compilation) steps
        for _ in range(warmup):
            step()
        from torch.profiler import ProfilerActivity, profile as torch_profile
        activity = ProfilerActivity.CUDA if device == "cuda" else ProfilerActivity.CPU
        with torch_profile(activities=[activity]) as prof:
            for _ in range(repeats):
                step()
        # PyTorch renamed the device columns (cuda -> device) in 2.4; take what this one has.
        keys = ("self_device_time_total", "self_cuda_time_total") if device == "cuda" else ("self_cpu_time_total",)
        for key in keys:
            try:
                return {"profile": prof.key_averages().table(sort_by=key, row_limit=40)}
            except (AttributeError, KeyError, ValueError):
                continue
        return {"profile": prof.key_averages().table(row_limit=40)}
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(warmup + repeats):
        t0 = time.perf_counter()
        step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    mem = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else float("nan")
    out = {"step_s": statistics.median(times), "peak_mb": mem}
    if device == "cuda":  # the same steps back to back, the device waited for once, at the end
        t0 = time.perf_counter()
        for _ in range(repeats):
            step(sync=False)
        torch.cuda.synchronize()
        out["loop_s"] = (time.perf_counter() - t0) / repeats
    return out


def gmlp_command(w: dict, mc: dict, B: int, args, precision: str) -> list:
    cmd = [str(ROOT / "build" / "gmlp"), "bench", "--device", "cpu" if args.smoke else "cuda", "--precision",
           precision, "--config", str(ROOT / w["config"]), "--mode", "train", "--batch-size", str(B), "--warmup",
           str(args.warmup), "--repeats", str(args.repeats), "--json"]
    for k in ("task", "d_model", "d_ffn", "n_layers", "seq_len", "vocab_size", "image_height", "image_width",
              "patch_height", "patch_width"):
        if k in mc:
            cmd += ["--set", f"model.{k}={json.dumps(mc[k])}"]
    return cmd


def run_gmlp(w: dict, mc: dict, B: int, args, precision: str = "fp32", extra_env: dict | None = None,
             extra_args: tuple = ()) -> dict:
    cmd = gmlp_command(w, mc, B, args, precision) + list(extra_args)
    print("  $", " ".join(cmd), file=sys.stderr, flush=True)
    env = dict(os.environ)
    env.pop("GMLP_CUDA_BF16_GEMM", None)  # the default unless a row names one
    env.pop("GMLP_CUDA_LT", None)
    env.pop("GMLP_CUDA_LN_WARP_COLUMNS", None)
    env.pop("GMLP_CUDA_SPATIAL_COMBINE", None)
    env.update(extra_env or {})
    if args.profile and not args.smoke:  # the backend's device time per op, printed at exit
        env["GMLP_CUDA_PROFILE"] = "1"
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1:]}
    if args.profile:
        table = p.stderr[p.stderr.find("gmlp: device time per op"):] if not args.smoke else ""
        return {"profile": table or "(no op profile: --smoke runs gmlp on the CPU)"}
    rec = json.loads(p.stdout.strip().splitlines()[-1])
    # On the GPU, the backend's peak allocation (like torch.cuda.max_memory_allocated);
    # in --smoke, on the CPU, the process's peak RSS.
    out = {"step_s": rec["median_s"], "peak_mb": rec["peak_rss_mb"] if args.smoke else rec["device_peak_mb"]}
    if "pipelined_s" in rec:  # the steps as `gmlp train` takes them: each loss read behind the next forward
        out["loop_s"] = rec["pipelined_s"]
    return out


def batch_size(w: dict, args) -> int:
    return 2 if args.smoke else w["batch"]


def workload_plan(name: str, args, device: str):
    """One workload's batch, FLOPs and implementations: label -> a function that times it."""
    w = WORKLOADS[name]
    mc = model_config(w, args.smoke)
    B = batch_size(w, args)
    flops = flops_per_step(mc, B)
    units = B if mc.get("task") == "vision" else B * mc["seq_len"]
    impls = {"gmlp fp32": lambda: run_gmlp(w, mc, B, args)}
    if not args.smoke:
        impls["gmlp bf16"] = lambda: run_gmlp(w, mc, B, args, "bf16")
        # Sessions 38-42's rows of GMLP_CUDA_BF16_GEMM=fast and GMLP_CUDA_LT=off are no
        # longer timed: their choices are settled (docs/bench-gpu.md, the second device
        # call), and the rows below took their place in the bench's slot of a device call.
        impls["gmlp bf16 (LayerNorm a block per row throughout)"] = lambda: run_gmlp(
            w, mc, B, args, "bf16", {"GMLP_CUDA_LN_WARP_COLUMNS": "0"})
        # The SGU's spatial product with the combine in its tiles' epilogue, off by
        # default since session 55 measured it slower in every workload (gMLP-S/16's
        # step 27.1 ms with it, 23.7 without; docs/bench-gpu.md): its row says what a
        # faster kernel would have to beat.
        impls["gmlp bf16 (GMLP_CUDA_SPATIAL_COMBINE=on)"] = lambda: run_gmlp(
            w, mc, B, args, "bf16", {"GMLP_CUDA_SPATIAL_COMBINE": "on"})
        # What gradient accumulation costs a step: the same batch in four pieces, each a
        # quarter of the rows through every kernel (docs/distributed.md).
        impls["gmlp bf16, each batch in 4 pieces (--grad-accum 4)"] = lambda: run_gmlp(
            w, mc, B, args, "bf16", extra_args=("--grad-accum", "4"))
    torch.manual_seed(0)
    inputs, targets = batch_for(mc, B, device)
    variants = [("torch eager fp32", False, False)]
    if not args.smoke:
        variants += [("torch.compile fp32", True, False), ("torch eager bf16", False, True),
                     ("torch.compile bf16", True, True)]
    for label, compiled, bf16 in variants:
        def run(compiled=compiled, bf16=bf16):
            model = gmlp_ref.GMLP(mc).to(device)
            m = torch.compile(model) if compiled else model
            return time_torch(m, gmlp_ref.GMLP.loss, inputs, targets, device, args.warmup, args.repeats, bf16,
                              args.profile)
        impls[label] = run
    if name == "vision" and not args.smoke:
        def run_timm():
            import timm
            model = timm.create_model("gmlp_s16_224", num_classes=1000).to(device)
            m = torch.compile(model)
            return time_torch(m, torch.nn.functional.cross_entropy, {"x": inputs["images"]}, targets, device,
                              args.warmup, args.repeats, True, args.profile)
        impls["timm gmlp_s16_224 compile bf16"] = run_timm
    return name, B, flops, units, {k: v for k, v in impls.items() if re.search(args.impls, k)}


# The comparisons the targets name, as gmlp's throughput over PyTorch's (its
# step time over gmlp's), one figure per pass: defaults against defaults, best against best.
RATIOS = [("defaults: gmlp fp32 / torch eager fp32", "gmlp fp32", "torch eager fp32"),
          ("best: gmlp bf16 / torch.compile bf16", "gmlp bf16", "torch.compile bf16"),
          ("gmlp bf16 / timm gmlp_s16_224 compile bf16", "gmlp bf16", "timm gmlp_s16_224 compile bf16"),
          # Not a comparison with PyTorch: what taking the batch in pieces costs a step,
          # and saves of the peak.
          ("gmlp bf16 in 4 pieces / gmlp bf16 whole", "gmlp bf16, each batch in 4 pieces (--grad-accum 4)",
           "gmlp bf16")]


def print_tables(records: list) -> None:
    """The side-by-side table (one row per implementation: each pass's median step, the
    rates and MFU of its slower pass, its highest peak), then the ratios."""
    passes = max([r["pass"] for r in records] + [1])
    print("| workload | implementation | " + " | ".join(f"step (ms), run {i}" for i in range(1, passes + 1))
          + " | tokens or images/s | MFU | peak memory (MiB) |")
    print("|---|---|" + "---:|" * passes + "---:|---:|---:|")
    rows: dict = {}
    for r in records:
        rows.setdefault((r["workload"], r["impl"]), []).append(r)
    for (wl, impl), rs in rows.items():
        bad = [r for r in rs if "error" in r]
        if bad:
            print(f"| {wl} | {impl} | failed: {bad[0]['error']} |" + " |" * (passes + 2))
            continue
        slow = max(rs, key=lambda r: r["step_s"])
        print(f"| {wl} | {impl} | " + " | ".join(f"{r['step_s'] * 1e3:.2f}" for r in rs)
              + f" | {slow['units_per_s']:.0f} | {slow['mfu'] * 100:.1f}% | {max(r['peak_mb'] for r in rs):.0f} |")
    print()
    print("| workload | comparison (throughput ratio) | " + " | ".join(f"run {i}" for i in range(1, passes + 1))
          + " | peak memory, the first / the second |")
    print("|---|---|" + "---:|" * passes + "---:|")
    for wl in dict.fromkeys(r["workload"] for r in records):
        for label, ours, theirs in RATIOS:
            a, b = rows.get((wl, ours), []), rows.get((wl, theirs), [])
            if not a or not b or any("error" in r for r in a + b):
                continue
            cells = [f"{y['step_s'] / x['step_s']:.2f}x" for x, y in zip(a, b)]
            mem = max(r["peak_mb"] for r in a) / max(r["peak_mb"] for r in b)
            print(f"| {wl} | {label} | " + " | ".join(cells) + f" | {mem:.2f} |")
    # The steps back to back, as training loops take them: gmlp's as `gmlp train` does
    # (each step's loss read once the next step's forward is queued), PyTorch's without a
    # synchronisation a step. Each run's mean step (ms) and the throughput ratio.
    loops = [(label, ours, theirs) for label, ours, theirs in RATIOS[1:]
             if any("loop_s" in r for r in records if r["impl"] == ours)]
    if not loops:
        return
    print()
    print("| workload | steps back to back | " + " | ".join(f"run {i}: ms, gmlp / PyTorch" for i in range(1, passes + 1))
          + " | " + " | ".join(f"run {i}: ratio" for i in range(1, passes + 1)) + " |")
    print("|---|---|" + "---:|" * (2 * passes))
    for wl in dict.fromkeys(r["workload"] for r in records):
        for label, ours, theirs in loops:
            a, b = rows.get((wl, ours), []), rows.get((wl, theirs), [])
            pairs = [(x, y) for x, y in zip(a, b) if "loop_s" in x and "loop_s" in y]
            if not pairs:
                continue
            ms = [f"{x['loop_s'] * 1e3:.2f} / {y['loop_s'] * 1e3:.2f}" for x, y in pairs]
            ratio = [f"{y['loop_s'] / x['loop_s']:.2f}x" for x, y in pairs]
            print(f"| {wl} | {label.removeprefix('best: ')} | " + " | ".join(ms) + " | " + " | ".join(ratio) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="lm,bert,vision")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="bf16 dense peak of the GPU")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU, eager fp32 only")
    ap.add_argument("--json", default="", help="also write the records here")
    ap.add_argument("--impls", default="", metavar="REGEX",
                    help="only the implementations whose label matches (re.search), e.g. 'compile' or '^gmlp'")
    ap.add_argument("--passes", type=int, default=1,
                    help="time every implementation this many times, each pass after the whole previous one")
    ap.add_argument("--profile", default="", metavar="FILE",
                    help="instead of timing: where each step's device time goes, per op for gmlp (GMLP_CUDA_PROFILE) "
                         "and per kernel for PyTorch (torch.profiler), over --repeats steps, written to FILE")
    ap.add_argument("--print-gmlp-command", metavar="PRECISION", default="",
                    help="only print, a line a workload, the gmlp bench command of that precision (for ncu)")
    ap.add_argument("--from-json", nargs="+", default=[], metavar="FILE",
                    help="print the tables of results written by --json (several files: their runs side by side)")
    args = ap.parse_args()
    if args.from_json:
        records = []
        for f in args.from_json:
            base = max([r["pass"] for r in records] + [0])
            records += [{**r, "pass": base + r["pass"]} for r in json.loads(pathlib.Path(f).read_text())]
        print_tables(records)
        return
    unknown = [w for w in args.workloads.split(",") if w not in WORKLOADS]
    if unknown:
        ap.error(f"--workloads: {', '.join(unknown)} not among {', '.join(WORKLOADS)}")
    if args.print_gmlp_command:
        for name in args.workloads.split(","):
            w = WORKLOADS[name]
            mc = model_config(w, args.smoke)
            print(shlex.join(gmlp_command(w, mc, batch_size(w, args), args, args.print_gmlp_command)))
        return
    device = "cpu" if args.smoke else "cuda"
    records, profiles = [], []
    plans = [workload_plan(name, args, device) for name in args.workloads.split(",")]
    # Pass after pass over every workload: a run cut short keeps a whole first pass.
    for pass_no in range(1, (1 if args.profile else args.passes) + 1):
        for name, B, flops, units, impls in plans:
            for label, fn in impls.items():
                try:
                    r = fn()
                except Exception as e:  # one failing peer must not hide the others' figures
                    r = {"error": f"{type(e).__name__}: {e}"}
                if device == "cuda":  # the next implementation's peak starts from an empty cache
                    torch.cuda.empty_cache()
                if args.profile:
                    profiles.append(f"## {name}: {label} (batch {B}, {args.repeats} steps after {args.warmup})\n\n"
                                    + r.get("profile", f"failed: {r.get('error')}") + "\n")
                    print(profiles[-1], file=sys.stderr, flush=True)
                    continue
                if "step_s" in r:
                    r["units_per_s"] = units / r["step_s"]
                    r["mfu"] = flops / r["step_s"] / (args.peak_tflops * 1e12)
                records.append({"workload": name, "impl": label, "batch": B, "pass": pass_no, **r})
                print(json.dumps(records[-1]), file=sys.stderr, flush=True)
    if args.profile:
        pathlib.Path(args.profile).write_text("\n".join(profiles))
        return
    print_tables(records)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(records, indent=1) + "\n")


if __name__ == "__main__":
    main()
