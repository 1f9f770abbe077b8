#!/usr/bin/env bash
# How experiments/quickstart.yaml's train.lr, train.steps and LoRA targets were chosen: each
# candidate trained on rows 0-1799 of the quickstart's training file and scored on rows
# 1800-1999 (a validation split of the training file; the quickstart's eval file, its test set,
# is never read here), at its epsilon 1 and q 0.03, for each seed. Prints the summary table; the
# candidate with the lowest mean validation loss whose mean validation accuracy also rose is
# the quickstart's (docs/results/quickstart.md).
# Usage: experiments/quickstart/select.sh [OUT=runs/quickstart_select] [SEEDS="0 1"]
#        [DPFT=build/dpft]; run from the repository root.
set -euo pipefail
OUT=${OUT:-runs/quickstart_select}
SEEDS=${SEEDS:-0 1}
DPFT=${DPFT:-build/dpft}
[ -x "$DPFT" ] || { echo "select: $DPFT is not an executable (build first)" >&2; exit 2; }
cands=(
  "lr=5e-3 steps=30 targets=[c_attn]"
  "lr=5e-3 steps=30 targets=[c_attn,c_proj,c_fc]"
  "lr=1e-2 steps=30 targets=[c_attn,c_proj,c_fc]"
)
for c in "${cands[@]}"; do
  read -r lr steps targets <<<"$c"
  label="${lr} ${steps} ${targets#targets=}"
  for s in $SEEDS; do
    dir="$OUT/$(tr -c 'a-zA-Z0-9=.\n' '_' <<<"$label")/s$s"
    if ls "$dir"/*/*/metrics.json >/dev/null 2>&1 && grep -q '"status": "ok"' "$dir"/*/*/metrics.json; then
      continue  # done
    fi
    "$DPFT" --quiet run experiments/quickstart.yaml --out "$dir" --set seed="$s" \
      --set label="$label" --set train."$lr" --set train."$steps" \
      --set model.peft."$targets" \
      --set data.train.rows=[0,1800] \
      --set data.eval.path=experiments/data/pubmed_sample/train_2k.csv \
      --set data.eval.rows=[1800,2000] >/dev/null
  done
done
"$DPFT" --quiet report "$OUT" --table summary
