#!/usr/bin/env bash
# One labelled set's chosen recipe (docs/nlp.md, "Three seeds per set") at several seeds:
# fine-tuning from the set's 8,000-step masked LM, chosen on validation, then refit on
# the training and validation texts together and scored once on the test set; then the
# table: each seed's test accuracy, their mean and standard deviation, and naive Bayes
# fitted on the same texts. The seed sets the head's initialisation, the order of the
# texts and the dropout masks; the masked LM is the same for every seed.
# Usage: scripts/seeds.sh kjv|spam|sotu
# Environment: SEEDS (default "1337 2 3"; 1337 is finetune's default), MLM (default
# runs/SET-mlm-8k). A seed whose run has finished (OUT/refit/report.json) is not run
# again; delete its directory to redo it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
set_name="${1:?usage: scripts/seeds.sh kjv|spam|sotu}"
SEEDS="${SEEDS:-1337 2 3}"
case "$set_name" in
  kjv) bash scripts/fetch_data.sh >/dev/null; D=data/kjv_groups; recipe=(--data $D/fit.tsv --val $D/val.tsv --lr 2e-3) ;;
  sotu) bash scripts/fetch_textsets.sh sotu >/dev/null; D=data/sotu
        recipe=(--data $D/fit.tsv --val $D/val.tsv --grid lr=1e-3,2e-3) ;;
  spam) bash scripts/fetch_textsets.sh spam >/dev/null; D=data/spam; recipe=(--data $D/train.tsv) ;;
  *) echo "seeds.sh: unknown set '$set_name' (kjv, spam or sotu)" >&2; exit 1 ;;
esac
MLM="${MLM:-runs/$set_name-mlm-8k}"
if [[ ! -f $MLM/best.safetensors ]]; then
  echo "seeds.sh: no masked LM in $MLM; train it first (docs/nlp.md):" >&2
  echo "  ./build/gmlp train --config configs/mlm-kjv.json --tokenizer runs/$set_name-sp.json --data $D/pretrain.txt --steps 8000 --out $MLM" >&2
  exit 1
fi
[[ -x build/gmlp ]] || bash scripts/build.sh
runs=()
for s in $SEEDS; do
  out=runs/$set_name-8k-refit-s$s
  runs+=("$out")
  [[ -f $out/refit/report.json ]] && continue
  ./build/gmlp finetune --init-from "$MLM" "${recipe[@]}" --test $D/test.tsv --epochs 3 --seed "$s" --refit \
    --out "$out" --overwrite --no-progress
done
/usr/bin/python3 - "$set_name" "${runs[@]}" <<'PY'
import json, statistics, sys
name, runs = sys.argv[1], sys.argv[2:]
print(f"\n{name}: the refit model of each seed, scored once on the test set")
print("| seed | chosen step (validation accuracy) | refit steps | test accuracy | macro-F1 |")
print("|---|---|---|---|---|")
acc = []
for r in runs:
    grid = f"{r}/grid.json"
    try:
        g = json.load(open(grid))
        chosen, setting = f"{r}/{g['chosen']}", g["chosen"] + ", step "
    except FileNotFoundError:
        chosen, setting = r, ""
    c = json.load(open(f"{chosen}/report.json"))
    f = json.load(open(f"{r}/refit/report.json"))
    t = f["test"]
    acc.append(t["accuracy"])
    sel = c["selected"]
    print(f"| {r.rsplit('-s', 1)[1]} | {setting}{sel['step']} ({sel['validation']['val_acc']:.4f}) | {f['steps']} "
          f"| {t['accuracy']:.4f} | {t['macro_f1']:.4f} |")
nb = t["baselines"]["naive_bayes"]["accuracy"]
sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
print(f"\nmean {statistics.mean(acc):.4f} (standard deviation {sd:.4f}, {len(acc)} seeds); naive Bayes {nb:.4f}; "
      f"mean - naive Bayes {100 * (statistics.mean(acc) - nb):+.2f} points")
PY
