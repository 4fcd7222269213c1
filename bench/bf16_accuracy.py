#!/usr/bin/env python3
"""What bf16 products cost in accuracy on the CPU (docs/bench.md, "bf16 on the CPU").

Trains the default LM (configs/default.json, the quick start's) twice, in fp32 and with
--precision bf16, from the same seed (and once more in fp32 from another seed, to show
how far two fp32 runs differ), and compares: the validation loss each run selects;
the fp32-trained model evaluated on the validation tail in fp32 and in bf16 (gmlp eval);
and its logits on windows of that tail in both precisions (the Python module): largest
difference, against the logits' range, and how often the most likely next byte agrees.

On a CPU with AVX512-BF16 or AMX the bf16 run uses the instructions and its time is the
speedup; on any other CPU it runs with GMLP_CPU_BF16=emulate (the same rounding on fp32
instructions), so the accuracy figures hold and the times say nothing of bf16's speed.

    /usr/bin/python3 bench/bf16_accuracy.py [--steps N] [--windows W] [--out runs/bf16-study]
"""
import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def cpu_header():
    model, flags = platform.processor(), set()
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name") and model in ("", "x86_64"):
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
    shown = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in flags]
    return model, shown, bool({"avx512_bf16", "amx_bf16"} & flags)


def run(cmd, env=None):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bf16_accuracy: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=0, help="training steps (0: the config's, 2400)")
    ap.add_argument("--windows", type=int, default=64, help="validation windows whose logits are compared")
    ap.add_argument("--out", default="runs/bf16-study", help="where the two runs go (overwritten)")
    ap.add_argument("--threads", type=int, default=0, help="gmlp --threads (0: its default)")
    ap.add_argument("--other-seed", type=int, default=1338, help="seed of the second fp32 run (the config's is 1337)")
    a = ap.parse_args()

    exe = str(REPO / "build" / "gmlp")
    data = REPO / "data" / "kjv.txt"
    if not data.exists():
        sys.exit("bf16_accuracy: data/kjv.txt is missing; run scripts/fetch_data.sh")
    model_name, flags, hardware = cpu_header()
    env = dict(os.environ)
    env.pop("GMLP_CPU_BF16", None)
    if not hardware:
        env["GMLP_CPU_BF16"] = "emulate"
    threads = ["--threads", str(a.threads)] if a.threads else []
    steps = ["--steps", str(a.steps)] if a.steps else []

    runs, seconds = {}, {}
    for p in ("fp32", "bf16"):
        out = str(pathlib.Path(a.out) / p)
        _, seconds[p] = run([exe, *threads, "train", "--device", "cpu", "--precision", p, "--out", out,
                             "--overwrite", *steps], env)
        runs[p] = json.load(open(pathlib.Path(REPO, out, "report.json")))["selected"]
    out = str(pathlib.Path(a.out) / "fp32-other-seed")
    run([exe, *threads, "train", "--device", "cpu", "--seed", str(a.other_seed), "--out", out, "--overwrite", *steps],
        env)
    other = json.load(open(pathlib.Path(REPO, out, "report.json")))["selected"]["validation"]["val_loss"]

    # The validation tail the trainer held out (the config's val_fraction of the bytes).
    config = json.load(open(pathlib.Path(REPO, a.out, "fp32", "config.json")))
    text = data.read_bytes()
    window = config["model"]["seq_len"]
    n_val = max(window, round(config["train"]["val_fraction"] * len(text)))
    tail = text[len(text) - n_val:]
    evals = {}
    with tempfile.NamedTemporaryFile(suffix=".txt") as f:
        f.write(tail)
        f.flush()
        for p in ("fp32", "bf16"):
            out, _ = run([exe, *threads, "eval", "--device", "cpu", "--precision", p, "--model",
                          str(pathlib.Path(a.out, "fp32")), "--data", f.name, "--json"], env)
            evals[p] = json.loads(out.strip().splitlines()[-1])

    os.environ.update({k: v for k, v in env.items() if k == "GMLP_CPU_BF16"})
    sys.path.insert(0, str(REPO / "build" / "python"))
    import numpy as np
    import gmlp
    model = gmlp.Model.load(str(REPO / a.out / "fp32"))
    ids = np.frombuffer(tail, dtype=np.uint8).astype(np.int32)
    starts = np.linspace(0, len(ids) - window, a.windows).astype(int)
    batch = np.stack([ids[s:s + window] for s in starts])
    logits = {}
    for p in ("fp32", "bf16"):
        gmlp.set_precision(p)
        logits[p] = model.logits(batch)
    gmlp.set_precision("fp32")
    diff = np.abs(logits["bf16"] - logits["fp32"])
    spread = float(np.max(logits["fp32"]) - np.min(logits["fp32"]))
    agree = float(np.mean(np.argmax(logits["bf16"], -1) == np.argmax(logits["fp32"], -1)))

    mode = "AVX512-BF16/AMX through oneDNN" if hardware else "emulated (GMLP_CPU_BF16=emulate: bf16 rounding, fp32 speed)"
    print(f"CPU: {model_name}; flags: {' '.join(flags)}; bf16: {mode}")
    print(f"default LM (configs/default.json), {runs['fp32']['step']} / {runs['bf16']['step']} selected steps, "
          f"gmlp {' '.join(threads) or 'default threads'}\n")
    print("| | fp32 | bf16 | bf16 - fp32 |")
    print("|---|---|---|---|")
    vf, vb = runs["fp32"]["validation"]["val_loss"], runs["bf16"]["validation"]["val_loss"]
    print(f"| training: selected validation loss (nats/token) | {vf:.4f} | {vb:.4f} | {vb - vf:+.4f} ({(vb - vf) / vf:+.2%}) |")
    print(f"| training: the same, fp32 from seed {a.other_seed} instead of the config's | {vf:.4f} | {other:.4f} "
          f"(fp32) | {other - vf:+.4f} ({(other - vf) / vf:+.2%}): two fp32 runs |")
    print(f"| training: wall time (s) | {seconds['fp32']:.0f} | {seconds['bf16']:.0f} | "
          f"{seconds['fp32'] / seconds['bf16']:.2f}x fp32's speed{'' if hardware else ' (emulation: not bf16 speed)'} |")
    ef, eb = evals["fp32"]["loss"], evals["bf16"]["loss"]
    print(f"| inference, fp32-trained model: loss on the validation tail ({evals['fp32']['tokens']} tokens) | "
          f"{ef:.5f} | {eb:.5f} | {eb - ef:+.5f} ({(eb - ef) / ef:+.3%}) |")
    print(f"| inference: logits, {a.windows} windows x {window} positions | range {spread:.2f} | | "
          f"max abs difference {diff.max():.4f} ({diff.max() / spread:.2%} of the range), mean {diff.mean():.5f}; "
          f"most likely byte the same at {agree:.2%} of positions |")


if __name__ == "__main__":
    main()
