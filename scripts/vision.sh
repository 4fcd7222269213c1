#!/usr/bin/env bash
# The paper's vision half at MNIST scale (issue 5's "done when"): fetch MNIST and
# Fashion-MNIST (pinned, md5-checked), train a gMLP on each with the shipped configs,
# evaluate top-1 with the confusion matrix, and draw the curves and the learned
# spatial weights. Usage: scripts/vision.sh [mnist|fashion|both] (default both).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
which="${1:-both}"
bash scripts/setup.sh
bash scripts/fetch_vision.sh
bash scripts/build.sh
run() {  # name, data folder
  local name="$1" data="$2"
  ./build/gmlp train --config "configs/$name.json" --data "$data" --out "runs/$name" --overwrite
  ./build/gmlp eval --model "runs/$name" --data "$data"
  ./build/gmlp plot metrics --log "runs/$name" --out "runs/$name/curves.png"
  ./build/gmlp plot spatial --model "runs/$name" --out "runs/$name/spatial"
}
case "$which" in
  mnist) run mnist data/mnist ;;
  fashion) run fashion data/fashion-mnist ;;
  both) run mnist data/mnist; run fashion data/fashion-mnist ;;
  *) echo "usage: scripts/vision.sh [mnist|fashion|both]" >&2; exit 2 ;;
esac
