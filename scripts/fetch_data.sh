#!/usr/bin/env bash
# Fetches the default LM corpus (docs/data.md): the King James Bible, one verse a line,
# produced by Debian's `bible` program from its own packages. Everything is written
# under the data folder (default <repo>/data, or $1); work happens in a temp folder
# inside it that is always removed. Idempotent: a verified kjv.txt is left alone.
# Then scripts/make_kjv_groups.sh derives the book-group classification data
# (data/kjv_groups/{train,test}.tsv and pretrain.txt, md5-pinned) from it.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${1:-$REPO/data}"
OUT_NAME=kjv.txt

# Pinned inputs and the expected output. The .deb md5s match Debian bookworm's index.
VERSION=4.38
declare -A DEB_MD5=(
  [bible-kjv_${VERSION}_amd64.deb]=930039212e306588b2d8c2019a8ea862
  [bible-kjv-text_${VERSION}_all.deb]=61e412ddb5167827f0c22333f5eb4c11
)
WANT_LINES=31102
WANT_BYTES=4404412
WANT_MD5=347edc0f3658f7bfc979db479f2a3dcb

fail() { echo "fetch_data: FAILED: $*" >&2; exit 1; }
md5() { md5sum "$1" | cut -d' ' -f1; }

mkdir -p "$DATA"
DATA="$(cd "$DATA" && pwd)"
OUT="$DATA/$OUT_NAME"

# In a subshell, so that its cd and EXIT trap end with it and the groups step follows.
fetch_kjv() (
if [[ -f "$OUT" && "$(md5 "$OUT")" == "$WANT_MD5" ]]; then
  echo "fetch_data: $OUT already present (md5 $WANT_MD5 ok)"
  exit 0
fi
if [[ -e "$OUT" ]]; then
  echo "fetch_data: $OUT has md5 $(md5 "$OUT"), expected $WANT_MD5; removing it and fetching again"
  rm -f "$OUT"
fi

start=$SECONDS
WORK="$(mktemp -d "$DATA/.fetch.XXXXXX")"
PARTIAL="$DATA/.$OUT_NAME.partial"
# On any exit: drop the work folder and any unverified output.
trap 'rm -rf "$WORK" "$PARTIAL"' EXIT
cd "$WORK"

# As root, apt drops to the _apt user to download and warns that it cannot write
# here; downloading as root into our own folder is what we want, so say so.
APT_OPTS=(-qq)
[[ "$(id -u)" -eq 0 ]] && APT_OPTS+=(-o APT::Sandbox::User=root)
SUDO=""; [[ "$(id -u)" -ne 0 ]] && SUDO="sudo"
download() { apt-get "${APT_OPTS[@]}" download "bible-kjv=$VERSION" "bible-kjv-text=$VERSION"; }

if ! download 2>"$WORK/apt.err"; then
  # A fresh machine may have no package lists; that is the only case we repair.
  # (apt-cache show exits 0 for an unknown version, so ask madison instead.)
  listed() { apt-cache madison "$1" 2>/dev/null | grep -Eq "\| *$VERSION *\|"; }
  if ! listed bible-kjv || ! listed bible-kjv-text; then
    echo "fetch_data: package lists lack bible-kjv/bible-kjv-text $VERSION; running apt-get update"
    $SUDO apt-get update -qq || fail "apt-get update failed"
    download 2>"$WORK/apt.err" || { cat "$WORK/apt.err" >&2; fail "apt-get download bible-kjv=$VERSION bible-kjv-text=$VERSION"; }
  else
    cat "$WORK/apt.err" >&2
    fail "apt-get download bible-kjv=$VERSION bible-kjv-text=$VERSION"
  fi
fi

for deb in "${!DEB_MD5[@]}"; do
  [[ -f "$deb" ]] || fail "$deb: not downloaded (expected version $VERSION)"
  got="$(md5 "$deb")"
  [[ "$got" == "${DEB_MD5[$deb]}" ]] || fail "$deb: md5 expected ${DEB_MD5[$deb]}, got $got"
  dpkg -x "$deb" root || fail "dpkg -x $deb"
done

BIBLE="$WORK/root/usr/bin/bible"
[[ -x "$BIBLE" ]] || fail "$BIBLE: missing from bible-kjv_${VERSION}"
# The binary is dynamically linked (readline); name a missing library plainly.
if ldd "$BIBLE" | grep -q "not found"; then
  fail "$BIBLE needs libraries that are not installed: $(ldd "$BIBLE" | grep 'not found' | tr -s ' \t\n' ' ')(apt-get install libreadline8)"
fi

# -p points the program at the extracted bible.data{,.conc} instead of /usr/lib.
# -f prints one verse a line; its output does not depend on COLUMNS or the terminal.
"$BIBLE" -f -p "$WORK/root/usr/lib" "Gen1:1-Rev22:21" </dev/null >"$PARTIAL" \
  || fail "$BIBLE exited with status $?"

got_lines=$(wc -l <"$PARTIAL"); got_bytes=$(wc -c <"$PARTIAL"); got_md5=$(md5 "$PARTIAL")
[[ "$got_lines" -eq $WANT_LINES ]] || fail "$OUT: lines expected $WANT_LINES, got $got_lines"
[[ "$got_bytes" -eq $WANT_BYTES ]] || fail "$OUT: bytes expected $WANT_BYTES, got $got_bytes"
[[ "$got_md5" == "$WANT_MD5" ]] || fail "$OUT: md5 expected $WANT_MD5, got $got_md5"

mv "$PARTIAL" "$OUT"
echo "fetch_data: wrote $OUT ($got_lines verses, $got_bytes bytes, md5 $got_md5) in $((SECONDS - start))s"
)

fetch_kjv
bash "$REPO/scripts/make_kjv_groups.sh" "$DATA"
