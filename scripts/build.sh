#!/usr/bin/env bash
# Configures and builds gmlp.cpp into build/ (Release). Extra arguments go to CMake.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" > build.log 2>&1 || { cat build.log; exit 1; }
cmake --build build -j"$(nproc)" >> build.log 2>&1 || { tail -50 build.log; exit 1; }
echo "build: ok (build/gmlp, build/tests/gmlp_tests; log in build.log)"
