#!/usr/bin/env bash
# Fuzzes every reader of untrusted files with libFuzzer under ASan + UBSan
# (docs/reliability.md): safetensors, config, tokenizer, IDX, image, labelled text.
# Usage: scripts/fuzz.sh [RUNS per target, default 1000000] [TARGET ...]
# Builds into build-fuzz/ with clang, makes a seed corpus per target from the project's
# own files (configs, a checkpoint and images written by gmlp, synthetic IDX and text),
# then runs each target for RUNS executions. Findings (crash-*, leak-*, timeout-*)
# land in build-fuzz/findings/<target>/ and the script exits non-zero.
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

# Seeds: valid inputs of each kind, so the fuzzer starts inside the formats.
C="$B/corpus"
rm -rf "$C" && mkdir -p "$C"/{safetensors,config,tokenizer,idx,image,labelled}
cp configs/*.json "$C/config/"
printf '{"kind":"byte"}' > "$C/tokenizer/byte.json"
printf '{"kind":"char","chars":"abc \\n","specials":["[PAD]","[MASK]"]}' > "$C/tokenizer/char.json"
printf 'law\tIn the beginning\r\nwisdom\tThe fear of the LORD\n' > "$C/labelled/a.tsv"
printf '\xef\xbb\xbfpos\tgood\rneg\tbad' > "$C/labelled/bom_cr.tsv"
printf '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02\x01\x02\x03\x04\x05\x06\x07\x08' > "$C/idx/images"
printf '\x00\x00\x08\x01\x00\x00\x00\x03\x00\x01\x02' > "$C/idx/labels"
gzip -9 -c "$C/idx/images" > "$C/idx/images.gz"
printf 'P5\n3 2\n255\n\x00\x10\x20\x30\x40\x50' > "$C/image/a.pgm"
printf 'P2\n2 2\n15\n0 5\n10 15\n' > "$C/image/b.pgm"
./$B/gmlp train --data "$C/labelled/a.tsv" --out "$B/seedrun" --overwrite --no-progress --steps 1 --batch-size 1 \
  --set model.d_model=8 --set model.d_ffn=16 --set model.n_layers=1 --set model.seq_len=8 > /dev/null 2>&1
cp "$B/seedrun/model.safetensors" "$C/safetensors/model.safetensors"
./$B/gmlp plot metrics --log "$B/seedrun" --out "$C/image/curves.png" > /dev/null 2>&1 || true

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
