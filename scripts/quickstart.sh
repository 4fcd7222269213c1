#!/usr/bin/env bash
# The whole first experience in one command: install dependencies, fetch the KJV
# corpus, build, train the default model (about 2 minutes on 2 cores), print a sample.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
bash scripts/fetch_data.sh
bash scripts/build.sh
./build/gmlp train --out runs/default --overwrite
echo
echo "=== sample (gmlp generate --model runs/default --prompt 'And God said' --max-tokens 300) ==="
./build/gmlp generate --model runs/default --prompt "And God said" --max-tokens 300
