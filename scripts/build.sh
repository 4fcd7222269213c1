#!/usr/bin/env bash
# Configures and builds gmlp.cpp into build/ (Release). Extra arguments go to CMake.
# ccache, when installed, makes rebuilds in other clones and worktrees of the project
# cheap (paths are taken relative to the checkout).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
launcher=()
if command -v ccache >/dev/null 2>&1; then
  # -march=native means another CPU on another machine: the compiler check hashes what
  # it resolves to, so a cache shared across machines never hands out foreign code.
  check='%compiler% -v -march=native -Q --help=target'
  l="env;CCACHE_BASEDIR=$PWD;CCACHE_NOHASHDIR=1;ccache"
  launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=${l/ccache/CCACHE_COMPILERCHECK=$check;ccache}"
            "-DCMAKE_CUDA_COMPILER_LAUNCHER=$l")
fi
# GMLP_BUILD_DIR: another build directory than build/ (scripts/gpu_kit.sh's portable one).
B=${GMLP_BUILD_DIR:-build}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@" > "$B.log" 2>&1 || { cat "$B.log"; exit 1; }
cmake --build "$B" -j"$(nproc)" >> "$B.log" 2>&1 || { tail -50 "$B.log"; exit 1; }
echo "build: ok ($B/gmlp, $B/tests/gmlp_tests; log in $B.log)"
