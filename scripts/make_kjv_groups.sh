#!/usr/bin/env bash
# Builds the book-group classification data of docs/data.md from the verified KJV corpus:
#   <data>/kjv_groups/train.tsv    "label<TAB>verse text" for every verse of a chapter whose
#                                  number is not divisible by 5 (25,720 verses)
#   <data>/kjv_groups/test.tsv     the same for chapters 5, 10, 15, ... (5,382 verses)
#   <data>/kjv_groups/pretrain.txt the verse texts of the train chapters only, one a line:
#                                  the masked-LM corpus, which must never see a test chapter
#   <data>/kjv_groups/fit.tsv      train.tsv without its validation chapters (22,324 verses)
#   <data>/kjv_groups/val.tsv      the train verses of chapters 3, 13, 23, ... (3,396 verses):
#                                  a validation split of whole chapters, built the way the
#                                  test split is, for `--data fit.tsv --val val.tsv`. A split
#                                  drawn verse by verse leaves each validation verse's
#                                  neighbours in training and so rewards memorising chapters.
# Lines of kjv.txt look like "Ge1:1 In the beginning ..."; the reference (book
# abbreviation, chapter:verse and the one space after it) is dropped, the verse text is
# kept byte for byte. Books are numbered 1..66 in order of appearance and grouped:
# law 1-5, history 6-17, wisdom 18-22, prophets 23-39, gospels+acts 40-44,
# letters+revelation 45-66. Files keep the corpus order.
# Deterministic and idempotent: outputs whose md5s match the pinned ones are left alone;
# new ones are written to temp files, checked, then renamed into place.
# Usage: make_kjv_groups.sh [data folder, default <repo>/data]
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${1:-$REPO/data}"
IN="$DATA/kjv.txt"
OUT="$DATA/kjv_groups"

# Pinned outputs (generated once from kjv.txt md5 347edc0f3658f7bfc979db479f2a3dcb).
declare -A WANT_MD5=(
  [train.tsv]=3f722c5dc5e29e2fed3e97b85feab618
  [test.tsv]=d394b67aa8fa2dadae26dca298ac1e45
  [pretrain.txt]=a4bade43333770d5cfe2f132bf779554
  [fit.tsv]=a7393b2478a28c47e63492bdee7c00c2
  [val.tsv]=438fb1a8ae5beae25e00578997a6f7da
)
declare -A WANT_LINES=([train.tsv]=25720 [test.tsv]=5382 [pretrain.txt]=25720 [fit.tsv]=22324 [val.tsv]=3396)

fail() { echo "make_kjv_groups: FAILED: $*" >&2; exit 1; }
md5() { md5sum "$1" | cut -d' ' -f1; }

[[ -f "$IN" ]] || fail "$IN not found (run scripts/fetch_data.sh first)"

all_ok=1
for f in "${!WANT_MD5[@]}"; do
  [[ -f "$OUT/$f" && "$(md5 "$OUT/$f")" == "${WANT_MD5[$f]}" ]] || all_ok=0
done
if ((all_ok)); then
  echo "make_kjv_groups: $OUT already present (train, test, pretrain, fit and val md5s ok)"
  exit 0
fi

mkdir -p "$OUT"
WORK="$(mktemp -d "$OUT/.make.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# LC_ALL=C: byte semantics, independent of the caller's locale.
LC_ALL=C awk -v train="$WORK/train.tsv" -v test="$WORK/test.tsv" -v pre="$WORK/pretrain.txt" \
  -v fit="$WORK/fit.tsv" -v val="$WORK/val.tsv" '
  function group(b) {
    if (b <= 5) return "law"
    if (b <= 17) return "history"
    if (b <= 22) return "wisdom"
    if (b <= 39) return "prophets"
    if (b <= 44) return "gospels+acts"
    return "letters+revelation"
  }
  {
    if (!match($0, /^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ /)) {
      printf "line %d: expected \"<book><chapter>:<verse> <text>\", got \"%s\"\n", NR, $0 > "/dev/stderr"
      bad = 1; exit 1
    }
    ref = substr($0, 1, RLENGTH - 1)
    text = substr($0, RLENGTH + 1)
    match(ref, /^[0-9]?[A-Za-z]+/)
    book = substr(ref, 1, RLENGTH)
    split(substr(ref, RLENGTH + 1), cv, ":")
    chapter = cv[1] + 0
    if (book != prev) {
      if (book in number) {
        printf "line %d: book \"%s\" appears again after \"%s\"\n", NR, book, prev > "/dev/stderr"
        bad = 1; exit 1
      }
      number[book] = ++books
      prev = book
    }
    if (text == "" || index(text, "\t")) {
      printf "line %d: empty verse text or a tab in it\n", NR > "/dev/stderr"
      bad = 1; exit 1
    }
    label = group(number[book])
    if (chapter % 5 == 0) {
      print label "\t" text > test
    } else {
      print label "\t" text > train
      print text > pre
      print label "\t" text > (chapter % 10 == 3 ? val : fit)
    }
  }
  END {
    if (bad) exit 1
    if (books != 66) { printf "found %d books, expected 66\n", books > "/dev/stderr"; exit 1 }
  }
' "$IN" || fail "$IN is not in the expected \"Ge1:1 text\" format (see the line above)"

for f in "${!WANT_MD5[@]}"; do
  got_lines=$(wc -l <"$WORK/$f"); got_md5=$(md5 "$WORK/$f")
  [[ "$got_lines" -eq ${WANT_LINES[$f]} ]] || fail "$OUT/$f: lines expected ${WANT_LINES[$f]}, got $got_lines"
  [[ "$got_md5" == "${WANT_MD5[$f]}" ]] || fail "$OUT/$f: md5 expected ${WANT_MD5[$f]}, got $got_md5"
done
for f in "${!WANT_MD5[@]}"; do mv -f "$WORK/$f" "$OUT/$f"; done
echo "make_kjv_groups: wrote $OUT/train.tsv (${WANT_LINES[train.tsv]} verses), test.tsv (${WANT_LINES[test.tsv]}), pretrain.txt (${WANT_LINES[pretrain.txt]}), fit.tsv (${WANT_LINES[fit.tsv]}), val.tsv (${WANT_LINES[val.tsv]})"
