#!/usr/bin/env bash
# Data-parallel scaling on this machine (docs/distributed.md): the default causal LM
# (data/kjv.txt, 530944 parameters, batch 16 x 128 tokens) for STEPS steps on P = 1 and P = 2 ranks of one
# thread each, the same global batch, and P = 2 with the optimizer state sharded
# (--shard-optimizer, ZeRO-1). Prints a Markdown table: step time, tokens/s, scaling
# efficiency (tokens/s over P x the one-rank figure), the seconds per step spent waiting
# for gradient reductions, the bytes each all-reduce carries, the AdamW moments each rank
# holds, and the largest peak RSS of a rank.
# Usage: bash bench/mpi_scaling.sh [STEPS] [extra gmlp train options...]
# (KEEP=1 keeps the runs' directory and logs, printed at the end.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
steps=${1:-60}
shift || true
gmlp=build/gmlp
[ -x "$gmlp" ] || { echo "build first: bash scripts/build.sh" >&2; exit 1; }
[ -f data/kjv.txt ] || { echo "fetch the corpus first: bash scripts/fetch_data.sh" >&2; exit 1; }
out=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] && echo "runs kept in $out" >&2 || rm -rf "$out"' EXIT
common=(train --data data/kjv.txt --steps "$steps" --log-every 10 --eval-every 1000000 --ckpt-every 1000000 --no-progress "$@")
root=(); [ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)

echo "| P | ms/step | tokens/s | efficiency | comm wait ms/step | MB per all-reduce | AdamW moments per rank (MB) | peak RSS per rank (MB) |"
echo "|---|---|---|---|---|---|---|---|"
# Each rank under /usr/bin/time: its peak RSS (KB) on a line of its own in the log.
timed=(/usr/bin/time -f "peak_rss_kb %M")
for run in 1 2 2z; do
  P=${run%z}
  extra=(); [ "$run" = 2z ] && extra=(--shard-optimizer)
  if [ "$P" -eq 1 ]; then
    "${timed[@]}" "$gmlp" --threads 1 "${common[@]}" --out "$out/p$run" > "$out/p$run.log" 2>&1
  else
    mpirun "${root[@]}" --oversubscribe -np "$P" "${timed[@]}" "$gmlp" --threads 1 "${common[@]}" "${extra[@]}" \
      --out "$out/p$run" > "$out/p$run.log" 2>&1
  fi
  params=$(grep -o "[0-9]*,* parameters" "$out/p$run.log" | head -1 | cut -d" " -f1)
  rss=$(grep -o 'peak_rss_kb [0-9]*' "$out/p$run.log" | cut -d' ' -f2 | sort -n | tail -1)
  # Steady state: every metrics line but the first (start-up, first touch of memory).
  /usr/bin/python3 - "$out/p$run/metrics.jsonl" "$run" "$params" "$out/rate1" "$rss" <<'PY'
import json, sys
path, run, params, rate_file, rss = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
P, sharded = int(run.rstrip("z")), run.endswith("z")
lines = [json.loads(l) for l in open(path) if '"tokens_per_s"' in l][1:]
tps = sum(l["tokens_per_s"] for l in lines) / len(lines)
wait = sum(l.get("comm_wait_s", 0.0) for l in lines) / len(lines)
if P == 1:
    open(rate_file, "w").write(str(tps))
base = float(open(rate_file).read())
cfg = json.load(open(path.replace("metrics.jsonl", "config.json")))
ms = cfg["train"]["batch_size"] * cfg["model"]["seq_len"] / tps * 1000
moments = 8 * (-(-params // P) if sharded else params) / 1e6  # m and v, 4 bytes each
label = f"{P} (ZeRO-1)" if sharded else str(P)
print(f"| {label} | {ms:.1f} | {tps:.0f} | {tps / (P * base):.2f} | {wait * 1000:.2f} | {4 * params / 1e6:.2f} "
      f"| {moments:.2f} | {rss / 1024:.0f} |")
PY
done
