#!/usr/bin/env bash
# The whole first experience in one command: install dependencies, fetch the KJV
# corpus, build, install the Python module gmlp for /usr/bin/python3 (user
# site-packages, docs/python.md), train the default model (1-4 minutes on 2
# cores), print a sample.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
bash scripts/fetch_data.sh
bash scripts/build.sh
if [[ -d build/python/gmlp ]]; then
  cmake --install build --component python > /dev/null
  /usr/bin/python3 -c "import gmlp; gmlp.Model" && echo "python: gmlp installed for /usr/bin/python3"
fi
./build/gmlp train --out runs/default --overwrite
echo
echo "=== sample (gmlp generate --model runs/default --prompt 'And God said' --max-tokens 300) ==="
./build/gmlp generate --model runs/default --prompt "And God said" --max-tokens 300
