#!/usr/bin/env bash
# Paper 003 (gradient-matrix denoising) at small scale: DP-SGD vs DP-SGD+Denoise, paired by
# seed. Runs go through scripts/sweep.sh: finished runs are skipped, so rerun the same command
# to resume.
#   (default)  data-to-text generation (E2E, DART; Tables 4-5) with models/tiny-gpt2
#              (experiments/denoise/small/{e2e,dart}-*.yaml) at epsilon 5.4, both methods with
#              the learning rate selected for the dataset (experiments/denoise/selected_lr.tsv:
#              dataset TAB lr TAB how it was chosen; a missing entry is an error naming it).
#   --select   learning-rate selection for E2E / DART: DP-SGD at epsilon 5.4, seed 100, each of
#              --lrs, scored by the final loss on a validation split, never the test set (E2E:
#              300 rows of the challenge's devset.csv whose meaning representation is not a
#              training one; DART: training on all but 600 of the dart-train rows, validating on
#              300 held-out rows whose triple set is not a training one); no decoding. Record the
#              best lr (dpft report OUT --table lr-select) in experiments/denoise/selected_lr.tsv.
#   --glue     GLUE classification (SST-2, QNLI, MNLI, QQP; Tables 2-3, Figures 1-3) with
#              models/tiny-roberta given a classifier per task (experiments/glue/classifiers.sh)
#              and LoRA, at epsilon 6.7 (experiments/denoise/small/glue-TASK-VARIANT.yaml, written
#              by glue_specs.py). Each task's reference accuracy (eval.reference_accuracy, for the
#              steps to 90 % / 95 %) comes from experiments/denoise/reference_accuracy.tsv: first
#              run --glue --reference (a 20-epoch DP-SGD run per task) and record its final test
#              accuracy there (mean over its seeds: dpft report OUT --table glue).
#              Variants (--variants): dp_sgd denoise (every task); on SST-2 also clip_only,
#              denoise_diag, denoise_k101 denoise_k105 denoise_k11 (kappa sweep), denoise_unscaled.
#
# Usage: experiments/denoise/run.sh [--glue [--reference] [--tasks "sst2 qnli mnli qqp"]
#          [--variants "dp_sgd denoise"]] [--select [--lrs "2e-4 1e-3 5e-3 2e-2"]] [--out DIR]
#          [--seeds "0 1 2"] [--datasets "e2e dart"] [--methods "dp_sgd denoise"]
#          [--dpft build/dpft] [--dry-run] [-- EXTRA --set ...]
# Env: SELECTED (the learning rates for E2E / DART, default experiments/denoise/selected_lr.tsv);
# (--glue) MODELS (the per-task classifiers, default build/glue/models), REFERENCE (default
# experiments/denoise/reference_accuracy.tsv: task TAB accuracy TAB how it was measured).
# Every run checkpoints each 50 steps, so a sweep killed mid-run (a session's end) continues the
# run from its checkpoint when the same command is run again (scripts/sweep.sh).
# Then:  dpft report DIR --table denoise-nlg | denoise-glue     (docs/results/denoise.md)
#        dpft report DIR --plot fig.svg --plot-kind eval-loss | eval-accuracy | improvement
set -euo pipefail
cd "$(dirname "$0")/../.."
out="" seeds="" datasets="e2e dart" methods="dp_sgd denoise" dpft=build/dpft
glue=0 reference=0 tasks="sst2 qnli mnli qqp" variants="dp_sgd denoise"
select=0 lrs="2e-4 1e-3 5e-3 2e-2"
dry=() extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --glue) glue=1; shift ;;
    --reference) reference=1; shift ;;
    --select) select=1; shift ;;
    --out | --seeds | --datasets | --methods | --dpft | --tasks | --variants | --lrs)
      [ $# -ge 2 ] || { echo "denoise: $1 needs a value" >&2; exit 2; }
      v=${1#--}; printf -v "$v" '%s' "$2"; shift 2 ;;
    --dry-run) dry=(--dry-run); shift ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "denoise: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
status=0 ckpt=(--set output.checkpoint_every=50)
if [ "$glue" = 1 ]; then
  [ "$reference" = 1 ] && variants=reference
  out=${out:-runs/denoise_glue} seeds=${seeds:-"0 1 2"}
  for t in $tasks; do
    case "$t" in sst2 | qnli | mnli | qqp) ;; *) echo "denoise: unknown GLUE task '$t' (sst2 qnli mnli qqp)" >&2; exit 2 ;; esac
  done
  MODELS=${MODELS:-build/glue/models} REFERENCE=${REFERENCE:-experiments/denoise/reference_accuracy.tsv}
  [ ${#dry[@]} -gt 0 ] || MODELS=$MODELS bash experiments/glue/classifiers.sh "$dpft" $tasks
  for t in $tasks; do
    ref=()
    if [ "$reference" = 0 ]; then
      acc=$(awk -F'\t' -v t="$t" '$1 == t { print $2 }' "$REFERENCE" 2>/dev/null)
      [ -n "$acc" ] || { echo "denoise: no reference accuracy for $t in $REFERENCE (run --glue --reference first)" >&2; exit 2; }
      ref=(--set eval.reference_accuracy="$acc")
    fi
    for v in $variants; do
      spec=experiments/denoise/small/glue-$t-$v.yaml
      [ -f "$spec" ] || { echo "denoise: no spec $spec (variants: dp_sgd denoise; SST-2 also clip_only denoise_diag denoise_k101 denoise_k105 denoise_k11 denoise_unscaled)" >&2; exit 2; }
      e=6.7; [ "$v" = clip_only ] && e=inf
      bash scripts/sweep.sh ${dry[@]+"${dry[@]}"} --dpft "$dpft" --specs "$spec" --seeds "$seeds" \
        --eps "$e" --out "$out" -- --set model.path="$MODELS/$t" ${ref[@]+"${ref[@]}"} "${ckpt[@]}" \
        ${extra[@]+"${extra[@]}"} || status=$?
      [ "$status" -ge 130 ] && exit "$status"
    done
  done
  exit "$status"
fi
for d in $datasets; do
  case "$d" in e2e | dart) ;; *) echo "denoise: unknown dataset '$d' (e2e dart)" >&2; exit 2 ;; esac
done
if [ "$select" = 1 ]; then
  out=${out:-runs/denoise_lr} seeds=${seeds:-100}
  for d in $datasets; do
    if [ "$d" = e2e ]; then
      val=(--set data.eval.path=../shared/data/e2e/devset.csv)
    else  # 5,545 dart-train rows: train on 4,945, validate on held-out triple sets
      val=(--set data.eval.format=dart-train --set data.train.num_samples=4945)
    fi
    for lr in $lrs; do
      bash scripts/sweep.sh ${dry[@]+"${dry[@]}"} --dpft "$dpft" \
        --specs experiments/denoise/small/$d-dp_sgd.yaml --seeds "$seeds" --eps 5.4 \
        --out "$out/lr$lr" -- "${val[@]}" --set data.eval.exclude_train=true \
        --set data.eval.num_samples=300 --set 'eval.nlg.at_steps=[]' --set train.lr="$lr" \
        "${ckpt[@]}" ${extra[@]+"${extra[@]}"} || status=$?
      [ "$status" -ge 130 ] && exit "$status"
    done
  done
  exit "$status"
fi
out=${out:-runs/denoise} seeds=${seeds:-"0 1 2"}
SELECTED=${SELECTED:-experiments/denoise/selected_lr.tsv}
for d in $datasets; do
  lr=$(awk -F'\t' -v d="$d" '$1 == d { print $2 }' "$SELECTED" 2>/dev/null || true)
  [ -n "$lr" ] || { echo "denoise: no lr selected for $d in $SELECTED (run --select first)" >&2; exit 2; }
  for m in $methods; do
    spec=experiments/denoise/small/$d-$m.yaml
    [ -f "$spec" ] || { echo "denoise: no spec $spec (datasets: e2e dart; methods: dp_sgd denoise)" >&2; exit 2; }
    bash scripts/sweep.sh ${dry[@]+"${dry[@]}"} --dpft "$dpft" --specs "$spec" --seeds "$seeds" \
      --eps 5.4 --out "$out" -- --set train.lr="$lr" "${ckpt[@]}" ${extra[@]+"${extra[@]}"} || status=$?
    [ "$status" -ge 130 ] && exit "$status"
  done
done
exit "$status"
