#!/usr/bin/env bash
# What dropout costs a training run (docs/bench.md "Dropout by counter"): `gmlp train` of
# the tiny and small LMs (data/kjv.txt) for STEPS steps with model.dropout 0 and 0.1, each
# binary given in turn, ROUNDS times. Prints a Markdown table: tokens/s (mean over the
# logged windows but the first), dropout's tokens/s over the same binary's without, and
# peak RSS. Training, not `gmlp bench`, so that a binary from before session 32 (whose
# bench did not drop) is measured the way a user runs it.
# Usage: bash bench/dropout_cost.sh [STEPS] [ROUNDS] [BINARY...]   (default: build/gmlp)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
steps=${1:-80}
rounds=${2:-2}
shift 2 || shift $# || true
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(build/gmlp)
for b in "${bins[@]}"; do [ -x "$b" ] || { echo "dropout_cost.sh: no executable $b (build first: bash scripts/build.sh)" >&2; exit 1; }; done
[ -f data/kjv.txt ] || { echo "fetch the corpus first: bash scripts/fetch_data.sh" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); $(grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo
echo "| round | binary | config | tokens/s, dropout 0 | tokens/s, dropout 0.1 | 0.1 / 0 | peak RSS 0 / 0.1 (MB) |"
echo "|---|---|---|---|---|---|---|"
for round in $(seq "$rounds"); do
  for b in "${bins[@]}"; do
    for cfg in tiny small; do
      row=()
      for p in 0 0.1; do
        run="$out/$cfg-$p"
        rm -rf "$run"
        /usr/bin/time -f "peak_rss_kb %M" -o "$run.rss" "$b" train --config "configs/$cfg.json" --data data/kjv.txt \
          --set model.dropout=$p --steps "$steps" --log-every 10 --eval-every 1000000 --ckpt-every 1000000 \
          --no-progress --out "$run" > "$run.log" 2>&1 || { echo "dropout_cost.sh: $b failed:" >&2; cat "$run.log" >&2; exit 1; }
        row+=("$run/metrics.jsonl" "$(grep -o '[0-9]*' "$run.rss" | tail -1)")
      done
      /usr/bin/python3 - "$round" "$b" "$cfg" "${row[@]}" <<'PY'
import json, sys
rnd, binary, cfg, m0, r0, m1, r1 = sys.argv[1:8]
def rate(path):
    v = [json.loads(l)["tokens_per_s"] for l in open(path) if '"tokens_per_s"' in l][1:]
    return sum(v) / len(v)
a, b = rate(m0), rate(m1)
print(f"| {rnd} | {binary} | {cfg} | {a:.0f} | {b:.0f} | {b / a:.3f} | {int(r0) / 1024:.0f} / {int(r1) / 1024:.0f} |")
PY
    done
  done
done
