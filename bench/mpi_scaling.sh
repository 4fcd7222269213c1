#!/usr/bin/env bash
# Data-parallel scaling on this machine (docs/distributed.md): the default causal LM
# (data/kjv.txt, 530944 parameters, batch 16 x 128 tokens) for STEPS steps on P = 1 and P = 2 ranks of one
# thread each, the same global batch. Prints a Markdown table: step time, tokens/s,
# scaling efficiency (tokens/s over P x the one-rank figure), the seconds per step spent
# waiting for gradient reductions, and the bytes each all-reduce carries.
# Usage: bash bench/mpi_scaling.sh [STEPS] [extra gmlp train options...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
steps=${1:-60}
shift || true
gmlp=build/gmlp
[ -x "$gmlp" ] || { echo "build first: bash scripts/build.sh" >&2; exit 1; }
[ -f data/kjv.txt ] || { echo "fetch the corpus first: bash scripts/fetch_data.sh" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(train --data data/kjv.txt --steps "$steps" --log-every 10 --eval-every 1000000 --ckpt-every 1000000 --no-progress "$@")
root=(); [ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)

echo "| P | ms/step | tokens/s | efficiency | comm wait ms/step | MB per all-reduce |"
echo "|---|---|---|---|---|---|"
for P in 1 2; do
  if [ "$P" -eq 1 ]; then
    "$gmlp" --threads 1 "${common[@]}" --out "$out/p1" > "$out/p1.log" 2>&1
  else
    mpirun "${root[@]}" --oversubscribe -np "$P" "$gmlp" --threads 1 "${common[@]}" --out "$out/p$P" > "$out/p$P.log" 2>&1
  fi
  params=$(grep -o '[0-9]* parameters' "$out/p$P.log" | head -1 | cut -d' ' -f1)
  # Steady state: every metrics line but the first (start-up, first touch of memory).
  /usr/bin/python3 - "$out/p$P/metrics.jsonl" "$P" "$params" "$out/rate1" <<'PY'
import json, sys
path, P, params, rate_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
lines = [json.loads(l) for l in open(path) if '"tokens_per_s"' in l][1:]
tps = sum(l["tokens_per_s"] for l in lines) / len(lines)
wait = sum(l.get("comm_wait_s", 0.0) for l in lines) / len(lines)
if P == 1:
    open(rate_file, "w").write(str(tps))
base = float(open(rate_file).read())
cfg = json.load(open(path.replace("metrics.jsonl", "config.json")))
ms = cfg["train"]["batch_size"] * cfg["model"]["seq_len"] / tps * 1000
print(f"| {P} | {ms:.1f} | {tps:.0f} | {tps / (P * base):.2f} | {wait * 1000:.2f} | {4 * params / 1e6:.2f} |")
PY
done
