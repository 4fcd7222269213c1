#!/usr/bin/python3
"""How training speed and memory grow with the window n and with depth.

Runs `gmlp bench --mode train` (one process per point, so peak RSS is per point) with
d 256, d_ffn 1024 and a fixed number of tokens per step (B * n = 4096), and prints
Markdown tables. Per token and layer, the forward's channel projections cost a
constant 2*d*d_ffn + d_ffn*d FLOPs while the causal spatial product costs
(n+1) * d_ffn/2, so time per token grows linearly in n once that term dominates, and
the activation memory per layer grows with B*n only (constant here) plus W itself (n^2).

usage: scaling.py [--gmlp build/gmlp] [--threads 2] [--repeats 3] [--out FILE.json]
"""
import argparse
import json
import subprocess
import sys

TOKENS_PER_STEP = 4096
BASE = {"d_model": 256, "d_ffn": 1024}


def bench(gmlp, threads, repeats, n, layers):
    sets = [f"model.{k}={v}" for k, v in BASE.items()] + [f"model.seq_len={n}", f"model.n_layers={layers}"]
    cmd = [gmlp, "--threads", str(threads), "bench", "--mode", "train", "--json", "--warmup", "1",
           "--repeats", str(repeats), "--batch-size", str(max(1, TOKENS_PER_STEP // n))]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rec = json.loads(out.strip().splitlines()[-1])
    rec.update({"n": n, "layers": layers})
    return rec


def spatial_share(n, d=BASE["d_model"], f=BASE["d_ffn"]):
    """Fraction of a layer's forward FLOPs spent in the causal spatial product."""
    channel = 2 * d * f + 2 * (f // 2) * d
    spatial = (n + 1) * (f // 2)
    return spatial / (channel + spatial)


def table(rows, key):
    print(f"| {key} | B | tokens/s | ms/step | GFLOP/s | MFU | peak RSS (MB) | spatial share of FLOPs |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[key]} | {r['batch_size']} | {r['tokens_per_s']:.0f} | {r['median_s'] * 1e3:.0f} | "
              f"{r['gflops']:.1f} | {100 * r['mfu']:.1f}% | {r['peak_rss_mb']:.0f} | {100 * spatial_share(r['n']):.0f}% |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gmlp", default="build/gmlp")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    by_n = [bench(a.gmlp, a.threads, a.repeats, n, 4) for n in (128, 256, 512, 1024, 2048)]
    by_layers = [bench(a.gmlp, a.threads, a.repeats, 256, L) for L in (2, 4, 8, 16)]
    print(f"### Window n (4 layers, d 256, d_ffn 1024, {TOKENS_PER_STEP} tokens per step, {a.threads} threads)\n")
    table(by_n, "n")
    print(f"\n### Depth (n 256, d 256, d_ffn 1024, {TOKENS_PER_STEP} tokens per step, {a.threads} threads)\n")
    table(by_layers, "layers")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"by_n": by_n, "by_layers": by_layers}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
