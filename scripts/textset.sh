#!/usr/bin/env bash
# One labelled set end to end (docs/nlp.md): a SentencePiece vocabulary from the training
# texts, masked-LM pretraining on them (the test texts are never seen), fine-tuning from
# the pretrained encoder and, with the same budget and settings, from scratch; each
# selects its checkpoint on held-out training texts and is scored once on the test set,
# next to the majority class and naive Bayes (from the runs' report.json).
# Usage: scripts/textset.sh kjv|spam|sotu
# Budget (environment): MLM_STEPS (default 2000), EPOCHS (fine-tuning, default 3),
# LR (fine-tuning peak learning rate; default finetune's), LONG_TEXT (head, head_tail or
# chunks; default the model's), VOCAB (default 8000), REFIT=1 (after choosing by
# validation, train again on the training and validation texts together: finetune
# --refit; the table then scores the refit models).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
set_name="${1:?usage: scripts/textset.sh kjv|spam|sotu}"
MLM_STEPS="${MLM_STEPS:-2000}" EPOCHS="${EPOCHS:-3}" VOCAB="${VOCAB:-8000}"
# KJV and SOTU select on whole held-out chapters or addresses (fit.tsv / val.tsv), as
# their test sets are whole chapters or addresses; spam holds out a tenth of train.tsv.
case "$set_name" in
  kjv) bash scripts/fetch_data.sh >/dev/null; D=data/kjv_groups ;;
  spam | sotu) bash scripts/fetch_textsets.sh "$set_name" >/dev/null; D=data/$set_name ;;
  *) echo "textset.sh: unknown set '$set_name' (kjv, spam or sotu)" >&2; exit 1 ;;
esac
split=(--data $D/train.tsv)
[[ -f $D/val.tsv ]] && split=(--data $D/fit.tsv --val $D/val.tsv)
[[ -x build/gmlp ]] || bash scripts/build.sh
G=./build/gmlp
mkdir -p runs
R=runs/$set_name
extra=()
[[ -n "${LONG_TEXT:-}" ]] && extra+=(--set "model.long_text=\"$LONG_TEXT\"")
[[ -n "${LR:-}" ]] && extra+=(--lr "$LR")
scored=""
if [[ "${REFIT:-0}" == 1 ]]; then extra+=(--refit); scored=/refit; fi
t0=$SECONDS
$G tokenizer train --data $D/pretrain.txt --vocab-size "$VOCAB" --out $R-sp.json
$G train --config configs/mlm-kjv.json --tokenizer $R-sp.json --data $D/pretrain.txt --steps "$MLM_STEPS" \
  --out $R-mlm --overwrite --no-progress
t1=$SECONDS
$G finetune --init-from $R-mlm "${split[@]}" --test $D/test.tsv --epochs "$EPOCHS" "${extra[@]}" \
  --out $R-finetune --overwrite --no-progress
t2=$SECONDS
$G finetune --init-from $R-mlm --scratch "${split[@]}" --test $D/test.tsv --epochs "$EPOCHS" "${extra[@]}" \
  --out $R-scratch --overwrite --no-progress
t3=$SECONDS
/usr/bin/python3 - "$R" "$set_name" "$MLM_STEPS" "$EPOCHS" $((t1 - t0)) $((t2 - t1)) $((t3 - t2)) "$scored" <<'PY'
import json, sys
r, name, mlm, ep, tp, tf, ts, scored = sys.argv[1:]
ft = json.load(open(f"{r}-finetune{scored}/report.json"))
sc = json.load(open(f"{r}-scratch{scored}/report.json"))
t = ft["test"]
print(f"\n{name}: {t['examples']} test texts")
print("| model | test accuracy | macro-F1 | budget |")
print("|---|---|---|---|")
b = t["baselines"]
print(f"| majority class ({b['majority']['class']}) | {b['majority']['accuracy']:.4f} | {b['majority']['macro_f1']:.4f} | |")
print(f"| naive Bayes (words) | {b['naive_bayes']['accuracy']:.4f} | {b['naive_bayes']['macro_f1']:.4f} | |")
for label, rep, secs in (("gMLP from scratch", sc, ts), ("gMLP pretrained (masked LM)", ft, tf)):
    extra = f", + {mlm} MLM steps ({tp}s)" if rep is ft else ""
    budget = (f"refit on training + validation texts: {rep['steps']} steps" if scored else
              f"{ep} epochs max, stopped at step {rep['steps']}, best step {rep['selected']['step']}")
    print(f"| {label} | {rep['test']['accuracy']:.4f} | {rep['test']['macro_f1']:.4f} | {budget} ({secs}s){extra} |")
PY
