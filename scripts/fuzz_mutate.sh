#!/usr/bin/env bash
# Long runs of the project's own mutation fuzzer (fuzz/mutate_main.cpp) over every
# reader, one after the other, and the table of docs/reliability.md. Needs the release
# build (bash scripts/build.sh). Usage: bash scripts/fuzz_mutate.sh [RUNS] [TARGET ...]
# (default 1000000 inputs per target; about 8-11 minutes each on one core here).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
runs=${1:-1000000}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(safetensors config tokenizer idx image labelled)
[ -x build/gmlp_mutate ] || { echo "build first: bash scripts/build.sh" >&2; exit 1; }
bash scripts/fuzz_seeds.sh build/gmlp build/fuzz-seeds > /dev/null
echo "| target | inputs | refused with an error | inputs/s | seconds | findings |"
echo "|---|---|---|---|---|---|"
status=0
for t in "${targets[@]}"; do
  start=$SECONDS
  line=$(build/gmlp_mutate "$t" "build/fuzz-seeds/$t" "$runs" --work "build/fuzz-work/$t" 2>&1 | tail -1) || status=1
  # "gmlp_mutate: T: N runs from S seeds (seed 1), R refused with an error, no finding; X runs/s"
  if [[ $line =~ :\ ([0-9]+)\ runs\ from.*,\ ([0-9]+)\ refused\ with\ an\ error,\ no\ finding\;\ ([0-9]+)\ runs/s ]]; then
    echo "| $t | ${BASH_REMATCH[1]} | ${BASH_REMATCH[2]} | ${BASH_REMATCH[3]} | $((SECONDS - start)) | none |"
  else
    echo "| $t | — | — | — | $((SECONDS - start)) | $line |"
    status=1
  fi
done
exit $status
