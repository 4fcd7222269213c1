#!/usr/bin/env python3
"""PyTorch peer of `gmlp bench`: times the reference model (python/gmlp/reference.py)
on a gmlp.cpp config and prints the same kind of record.

  torch_bench.py --config configs/tiny.json --mode train --threads 2 --json

Modes (all fp32, torch.manual_seed(0), random token windows):
  train     one step = zero_grad, forward, loss, backward, clip_grad_norm_, AdamW step
            (gmlp.reference.train_step with the config's train section over the C++ defaults)
  infer     forward + loss under torch.no_grad()
  generate  labml-style window recompute, --streams windows (default 1) at once: each
            new token is a full forward over the last seq_len tokens of every stream,
            greedy argmax of the last position's logits; per-token time = step / streams
Each of `repeats` steps (tokens, for generate) is timed on its own after `warmup`
untimed ones; the record gives the median, min and max.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "python"))  # the gmlp package
from gmlp import reference as gmlp_ref  # noqa: E402

# Defaults of include/gmlp/config.h (ModelConfig, TrainConfig).
MODEL_DEFAULTS = {"task": "causal_lm", "vocab_size": 256, "d_model": 128, "d_ffn": 512,
                  "n_layers": 4, "seq_len": 128, "gelu": "erf", "pos_embedding": "none",
                  "spatial_init": 0.01, "norm_eps": 1e-5, "tokenizer": {"kind": "byte"}}
TRAIN_DEFAULTS = {"batch_size": 16, "steps": 2400, "schedule": "cosine", "lr": 3e-3,
                  "min_lr": 3e-4, "warmup": 100, "noam_factor": 1.0, "weight_decay": 0.1,
                  "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "clip": 1.0}
CHAR_VOCAB = 65  # Tiny Shakespeare's character set, as in the labml annotated gMLP


def load_config(path: str) -> tuple[dict, dict]:
    with open(path) as f:
        raw = json.load(f)
    mc = {**MODEL_DEFAULTS, **raw.get("model", {})}
    tc = {**TRAIN_DEFAULTS, **raw.get("train", {})}
    tok = mc.get("tokenizer") or {}
    if tok.get("kind") == "char" and "vocab_size" not in raw.get("model", {}):
        mc["vocab_size"] = len(tok["chars"]) if tok.get("chars") else CHAR_VOCAB
    return mc, tc


def timed(fn, warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def run(args) -> dict:
    mc, tc = load_config(args.config)
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model = gmlp_ref.GMLPLanguageModel(mc).float()
    n, vocab = mc["seq_len"], mc["vocab_size"]
    B = args.streams if args.mode == "generate" else (args.batch_size or tc["batch_size"])
    rec = {"impl": "pytorch", "config": pathlib.Path(args.config).stem, "mode": args.mode,
           "threads": args.threads, "batch_size": B, "seq_len": n}

    if args.mode == "train":
        model.train()
        opt = gmlp_ref.make_optimizer(model, tc)
        tokens = torch.randint(0, vocab, (B, n + 1))
        step = [0]

        def fn():
            step[0] += 1
            gmlp_ref.train_step(model, opt, tc, step[0], tokens)
        times = timed(fn, args.warmup, args.repeats)
    elif args.mode == "infer":
        model.eval()
        tokens = torch.randint(0, vocab, (B, n + 1))

        def fn():
            with torch.no_grad():
                float(model.loss(model(tokens[:, :-1]), tokens[:, 1:]))
        times = timed(fn, args.warmup, args.repeats)
    else:
        model.eval()
        seq = torch.randint(0, vocab, (B, n))  # B streams, each its own window

        def fn():
            nonlocal seq
            with torch.no_grad():
                logits = model(seq[:, -n:])
                nxt = logits[:, -1, :].argmax(dim=-1, keepdim=True)
            seq = torch.cat([seq[:, -n:], nxt], dim=1)
        times = timed(fn, 2, args.gen_tokens)

    med = statistics.median(times)
    rec.update(median_s=med, min_s=min(times), max_s=max(times))
    if args.mode == "generate":  # per token drawn, over all streams
        rec["ms_per_token"] = med / B * 1e3
        rec["tokens_per_s"] = B / med
    else:
        rec["tokens_per_s"] = B * n / med
    rec["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    rec["vocab_size"] = vocab
    rec["torch_version"] = torch.__version__
    rec["env"] = {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY")}
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--mode", choices=["train", "infer", "generate"], default="train")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=0, help="default: the config's")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--gen-tokens", type=int, default=32)
    ap.add_argument("--streams", type=int, default=1,
                    help="generate: windows recomputed together, one per prompt")
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    args = ap.parse_args()
    if args.threads < 1 or args.repeats < 1 or args.warmup < 0 or args.gen_tokens < 1 or args.streams < 1:
        ap.error("--threads, --repeats, --gen-tokens, --streams must be >= 1 and --warmup >= 0")
    rec = run(args)
    if args.json:
        print(json.dumps(rec))
        return
    if args.mode == "generate":
        rate = f"{rec['ms_per_token']:.2f} ms/token"
    else:
        rate = f"{rec['tokens_per_s']:.0f} tokens/s"
    print(f"pytorch {torch.__version__} {rec['config']} {rec['mode']}: B={rec['batch_size']} "
          f"n={rec['seq_len']} threads={rec['threads']}: median {rec['median_s'] * 1e3:.1f} ms "
          f"(min {rec['min_s'] * 1e3:.1f}, max {rec['max_s'] * 1e3:.1f}), {rate}, "
          f"peak RSS {rec['peak_rss_mb']:.0f} MB")


if __name__ == "__main__":
    main()
