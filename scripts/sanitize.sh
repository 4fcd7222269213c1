#!/usr/bin/env bash
# Builds the whole project with AddressSanitizer + UndefinedBehaviorSanitizer into
# build-asan/ and runs the full test suite there (docs/reliability.md). Slow (about
# 3x the plain suite), so CI does not run it; run it before a release or after
# touching a parser.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
B=build-asan
bash scripts/fetch_data.sh  # the corpus tests read data/kjv.txt
# No Python extension (it would load into an uninstrumented interpreter; it is the same
# gmlp_core the tests cover). The CUDA backend is built where nvcc is: its kernels run
# the CUDA tests on the CUDA emulator (tests/cuda_emu), instrumented, so a kernel's read
# or write past a buffer is a report here. The MPI module is instrumented too: its link
# takes the sanitizers' runtime like the executables' (the mpirun tests run through it).
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGMLP_CUDA=AUTO -DGMLP_PYTHON=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_MODULE_LINKER_FLAGS="-fsanitize=address,undefined" > "$B.log" 2>&1 || { tail -30 "$B.log"; exit 1; }
cmake --build "$B" -j"$(nproc)" >> "$B.log" 2>&1 || { tail -30 "$B.log"; exit 1; }
# Leaks are reported at exit; OpenMP's and OpenBLAS's thread pools hold memory for the
# process's lifetime by design, so only errors and UB fail the run.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
cd "$B"
ctest --output-on-failure --timeout 1800 2>&1 | tee ctest.log | grep -vE "^ *([0-9]+/[0-9]+ Test +#[0-9]+: .* Passed| +Start +[0-9]+:)" || true
grep -qE "^100% tests passed" ctest.log
