#!/usr/bin/env python3
"""Issue 10's precision check (scripts/gpu_checks.sh train): the default LM trained on the
GPU in bf16 ends within 2% of the fp32 run's last validation loss. Reads DIR/train-fp32-
metrics.jsonl and DIR/train-bf16-metrics.jsonl; prints both beside the CPU's figure
(1.4077 nats at step 2400 since session 29); exits 1 when the gap is over 2%."""
import json
import sys

last = {}
for p in ("fp32", "bf16"):
    rows = [json.loads(line) for line in open(f"{sys.argv[1]}/train-{p}-metrics.jsonl") if "val_loss" in line]
    last[p], at = rows[-1]["val_loss"], rows[-1]["step"]
    print(f"train {p}: val loss {last[p]:.4f} at step {at} (the CPU: 1.4077 at 2400)")
gap = abs(last["bf16"] - last["fp32"]) / last["fp32"]
print(f"train: bf16 against fp32 {100 * gap:.2f}% (at most 2%): " + ("ok" if gap <= 0.02 else "NOT MET"))
sys.exit(0 if gap <= 0.02 else 1)
