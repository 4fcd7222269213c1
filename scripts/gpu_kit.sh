#!/usr/bin/env bash
# Packs, on a machine without a GPU, what a GPU session runs (docs/gpu.md): the CUDA
# build's executables and module, and every shared library they load that a bare GPU
# machine may lack, into .gpukit/ (ignored by git; the device tool carries it). The GPU
# machine then needs only its driver and the CUDA 13 libraries: scripts/gpu_checks.sh
# runs the tests, compute-sanitizer and the benchmark from the kit, with no build there
# (it has nvcc and CMake but not OpenBLAS, GoogleTest or the other build dependencies).
# The kit is one xz archive (about 19 MB; unpacked, its 108 MB would not fit in what a device
# call carries beside the tree).
# The kit is a build of its own, build-gpukit/, for any x86-64 CPU with AVX2 and FMA
# (x86-64-v3): build/ is tuned for this machine's CPU (-march=native), and its AVX-512
# instructions, thousands of them, would stop the kit with SIGILL on a GPU host without
# them. The CPU's speed does not matter there; the GPU's does.
# Usage: bash scripts/gpu_kit.sh        (with nvcc present; builds build-gpukit/ first)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
B=build-gpukit
# The Python module is built for the GPU machine's python3, 3.12 (docs/gpu.md), not this
# machine's 3.11: a CPython extension loads only in the minor version it was built for.
# GMLP_KIT_PYTHON names another interpreter; the headers are all the build needs from it.
# A python3.12 on PATH that runs, else pyenv's newest 3.12 (its shim runs none unless chosen).
py=${GMLP_KIT_PYTHON:-$( { python3.12 -c 'import sys; print(sys.executable)' ||
  ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 | sort -V | tail -n 1; } 2>/dev/null || true)}
pyargs=()
if [[ -n $py ]]; then
  # -U: the cached Python 3 results of an earlier configure would keep the old headers.
  pyargs=(-U'_Python3_*' -DPython3_EXECUTABLE="$py" -DGMLP_PYTHON_EXECUTABLE="$py")
else
  echo "gpu_kit.sh: no python3.12 here (GMLP_KIT_PYTHON names one): the kit carries no Python module" >&2
fi
GMLP_BUILD_DIR=$B bash scripts/build.sh -DGMLP_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DGMLP_CUDA=ON "${pyargs[@]}"
[[ -f $B/libgmlp_cuda.so ]] || { echo "gpu_kit.sh: $B/ has no CUDA module (libgmlp_cuda.so)" >&2; exit 1; }
[[ -x $B/gmlp && -x $B/tests/gmlp_tests ]] || { echo "gpu_kit.sh: $B/ lacks gmlp or tests/gmlp_tests" >&2; exit 1; }
# The package as the build assembles it, its extensions for that interpreter alone.
pymods=()
if [[ -n $py ]]; then
  suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  pymods=("$B"/python/gmlp/_core"$suffix" "$B"/python/gmlp/_policy"$suffix")
  ls "${pymods[@]}" > /dev/null || { echo "gpu_kit.sh: $B/python/gmlp lacks its modules for $py" >&2; exit 1; }
fi
if objdump -d "$B/gmlp" "$B/tests/gmlp_tests" "$B/libgmlp_cuda.so" "${pymods[@]}" | grep -q zmm; then
  echo "gpu_kit.sh: $B/ holds AVX-512 instructions; the kit must run on CPUs without them" >&2
  exit 1
fi
K=.gpukit
S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
mkdir -p "$S/build/tests" "$S/lib"
cp "$B/gmlp" "$B/libgmlp_cuda.so" "$S/build/"
# The CUDA emulator's module too: DeviceChoice.ABrokenCudaIsNamedNotTakenForNoGpu plays a
# failing CUDA through it.
[[ -f $B/libgmlp_cuda_emu.so ]] && cp "$B/libgmlp_cuda_emu.so" "$S/build/"
cp "$B/tests/gmlp_tests" "$S/build/tests/"
if ((${#pymods[@]})); then
  mkdir -p "$S/build/python/gmlp"
  cp "$B"/python/gmlp/*.py "${pymods[@]}" "$S/build/python/gmlp/"
fi
[[ -d $B/fixtures ]] && cp -r "$B/fixtures" "$S/build/"
# The libraries as this machine resolves them, less the C library itself (the GPU
# machine's own glibc is newer than the 2.34 these need), the driver, and cuBLAS, which
# is too large to carry (hundreds of MB) and ships with the GPU machine's CUDA 13.
ldd "$B/gmlp" "$B/tests/gmlp_tests" "$B/libgmlp_cuda.so" "${pymods[@]}" | awk '/=> \//{print $3}' | sort -u |
  grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux-x86-64)\.so|/libcuda\.so|/libcublas(Lt)?\.so' |
  while read -r lib; do cp -L "$lib" "$S/lib/"; done
# The tests find their fixtures and the module through the build's absolute paths.
echo "$PWD" > "$S/source_dir"
echo "$B" > "$S/build_name"
git rev-parse HEAD > "$S/commit" 2>/dev/null || echo unknown > "$S/commit"
mkdir -p "$K"
tar -C "$S" -cJf "$K/kit.tar.xz.tmp" . && mv "$K/kit.tar.xz.tmp" "$K/kit.tar.xz"
echo "gpu_kit.sh: $K/kit.tar.xz, $(du -sh "$K/kit.tar.xz" | cut -f1) ($(du -sh "$S" | cut -f1) unpacked, $(ls "$S/lib" | wc -l) libraries), commit $(cut -c1-7 "$S/commit")"
echo "on the GPU machine (carry .gpukit and data/kjv.txt): bash scripts/gpu_session.sh 480, or steps of scripts/gpu_checks.sh"
