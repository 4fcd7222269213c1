#!/usr/bin/env bash
# Writes the fuzzers' seed corpus: valid inputs of each reader's kind, so that mutations
# start inside the formats. One directory per target under OUT_DIR: the shipped configs,
# a checkpoint and a PNG written by gmlp, synthetic IDX, PGM, labelled and tokenizer
# files. Used by scripts/fuzz.sh (libFuzzer) and by CTest (gmlp_mutate).
# Usage: scripts/fuzz_seeds.sh GMLP_EXE OUT_DIR
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 GMLP_EXE OUT_DIR" >&2; exit 2; }
GMLP="$(realpath "$1")"
mkdir -p "$2"
C="$(realpath "$2")"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rm -rf "${C:?}"/{safetensors,config,tokenizer,idx,image,labelled,seedrun}
mkdir -p "$C"/{safetensors,config,tokenizer,idx,image,labelled}
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
# JPEGs for libjpeg's paths (setup.sh installs PIL): colour 4:2:0 at an odd size, and
# progressive grey.
/usr/bin/python3 - "$C/image" <<'PY' || echo "fuzz_seeds.sh: no JPEG seeds (PIL missing for /usr/bin/python3)" >&2
import sys
from PIL import Image
Image.effect_noise((13, 11), 60).convert("RGB").save(sys.argv[1] + "/c.jpg", quality=80)
Image.effect_noise((9, 16), 40).save(sys.argv[1] + "/g.jpg", quality=90, progressive=True)
PY
"$GMLP" --threads 1 train --data "$C/labelled/a.tsv" --out "$C/seedrun" --no-progress --steps 1 --batch-size 1 \
  --set model.d_model=8 --set model.d_ffn=16 --set model.n_layers=1 --set model.seq_len=8 > /dev/null 2>&1
cp "$C/seedrun/model.safetensors" "$C/safetensors/model.safetensors"
"$GMLP" plot metrics --log "$C/seedrun" --out "$C/image/curves.png" > /dev/null 2>&1 || true
rm -rf "$C/seedrun"
