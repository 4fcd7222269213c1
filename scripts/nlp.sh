#!/usr/bin/env bash
# The paper's NLP half at KJV scale (issue 4's "done when"): a SentencePiece vocabulary
# from the training chapters, masked-LM pretraining on them, then KJV book-group
# classification fine-tuned from the pretrained encoder and, with the same budget,
# from scratch; the naive Bayes baseline for reference. Then the s(Z) ablation.
# Usage: scripts/nlp.sh [finetune|ablate|all] (default all).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
which="${1:-all}"
bash scripts/setup.sh
bash scripts/fetch_data.sh
bash scripts/build.sh
G=./build/gmlp
if [[ "$which" == finetune || "$which" == all ]]; then
  $G tokenizer train --data data/kjv_groups/pretrain.txt --vocab-size 8000 --out runs/kjv-sp8000.json
  $G train --config configs/mlm-kjv.json --tokenizer runs/kjv-sp8000.json --out runs/mlm-kjv --overwrite
  $G finetune --init-from runs/mlm-kjv --out runs/kjv-finetune --overwrite
  $G finetune --init-from runs/mlm-kjv --scratch --out runs/kjv-scratch --overwrite
  $G baseline
  for r in kjv-finetune kjv-scratch; do $G eval --model runs/$r --data data/kjv_groups/test.tsv; done
fi
if [[ "$which" == ablate || "$which" == all ]]; then
  $G ablate --config configs/ablate.json --out runs/ablate
fi
