#!/usr/bin/env bash
# Fuzzes every reader of untrusted files with libFuzzer under ASan + UBSan
# (docs/reliability.md): safetensors, config, tokenizer, IDX, image, labelled text.
# Usage: scripts/fuzz.sh [RUNS per target, default 1000000] [TARGET ...]
# Builds into build-fuzz/ with clang, makes a seed corpus per target
# (scripts/fuzz_seeds.sh), then runs each target for RUNS executions. Findings (crash-*,
# leak-*, timeout-*) land in build-fuzz/findings/<target>/ and the script exits non-zero.
# Without clang, build/gmlp_mutate (the project's own mutation fuzzer, also run by
# CTest) fuzzes the same readers: see docs/reliability.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS="${1:-1000000}"
shift || true
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(safetensors config tokenizer idx image labelled)

command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
B=build-fuzz
CC=clang CXX=clang++ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGMLP_FUZZ=ON -DGMLP_BUILD_TESTS=OFF \
  > "$B.log" 2>&1 || { tail -30 "$B.log"; exit 1; }
cmake --build "$B" -j"$(nproc)" --target gmlp "${TARGETS[@]/#/fuzz_}" >> "$B.log" 2>&1 || { tail -30 "$B.log"; exit 1; }

C="$B/corpus"
bash scripts/fuzz_seeds.sh "$B/gmlp" "$C"

status=0
for t in "${TARGETS[@]}"; do
  mkdir -p "$B/findings/$t" "$B/work/$t"
  echo "fuzz: $t, $RUNS runs"
  if ! ./$B/fuzz_"$t" -runs="$RUNS" -max_len=65536 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$B/findings/$t/" "$B/work/$t" "$C/$t" > "$B/fuzz_$t.log" 2>&1; then
    echo "fuzz: $t: FINDING (see $B/fuzz_$t.log and $B/findings/$t/)"
    status=1
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|^#[0-9]+ *DONE" "$B/fuzz_$t.log" | tr '\n' ' '
  echo
done
exit $status
