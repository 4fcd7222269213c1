#!/usr/bin/env bash
# Installs everything gmlp.cpp needs from Debian's archive. Idempotent: packages
# already present are skipped, so re-running costs one dpkg query.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config ccache    # ccache: cheap rebuilds across clones
  libopenblas-openmp-dev libopenblas0-openmp   # BLAS, linked explicitly (never libblas.so)
  nlohmann-json3-dev libcli11-dev              # config JSON, command-line parsing
  libgtest-dev libgmock-dev                    # tests
  libreadline8                                 # needed by the bible program that extracts the corpus
  python3 python3-torch python3-numpy          # the PyTorch oracle for parity tests
  python3-dev pybind11-dev python3-pybind11 python3-pytest   # the Python module gmlp and its tests
  libsentencepiece-dev sentencepiece           # subword tokenizers (gmlp tokenizer train)
  libstb-dev zlib1g-dev                        # PNG read/write (stb_image), gzipped IDX (vision data)
  libjpeg-dev python3-pil                      # JPEG decoding (libjpeg-turbo); PIL, its reference in the tests
  python3-torchvision                          # RandomResizedCrop: the reference of the crops' distribution
  libopenmpi-dev openmpi-bin                   # data-parallel training across processes (mpirun)
  libdnnl-dev                                  # oneDNN: bf16 products where the CPU has them; AVX-512 fp32
  libjemalloc-dev                              # the executable's malloc: less resident memory (docs/bench.md)
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all packages present"
fi
