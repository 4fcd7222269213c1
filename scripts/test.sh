#!/usr/bin/env bash
# Installs what the tests need, fetches the corpus, builds, and runs every test
# (GoogleTest through CTest, including the PyTorch parity tests).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
bash scripts/fetch_data.sh
bash scripts/build.sh
cd build
ctest --output-on-failure --timeout 600 2>&1 | tee ctest.log | grep -vE "^ *([0-9]+/[0-9]+ Test +#[0-9]+: .* Passed| +Start +[0-9]+:)" || true
grep -qE "^100% tests passed" ctest.log
