#!/usr/bin/env bash
# The small-scale DP-SFT Tables 1-2 baselines (Full-tuning, Full-DP, LoRA-DP, Adapter-DP) on
# SST-2, IMDB, QNLI, MNLI and RTE with models/tiny-roberta (experiments/glue/small/*.yaml).
# First it gives the pretrained encoder a classifier per task (dpft model rehead, seed 0, into
# build/glue/models/TASK). Then:
#   --select   learning-rate selection: every method x task x epsilon over --lrs, seed 100,
#              evaluated on a validation split of the training rows (it trains on all but 600
#              of them, data.train.num_samples = rows - 600, and validates on 300 of the 600
#              whose text is not a training text: data.eval.exclude_train; SST-2 repeats
#              sentences), never on the test set. Record each best lr
#              (dpft report OUT --table lr-select) in experiments/glue/selected_lr.tsv.
#   (default)  the table runs: --seeds at each --eps with the lr selected for that task, method
#              and epsilon (a missing entry is an error naming it).
# Runs go through scripts/sweep.sh: finished runs are skipped, so rerun the same command to
# resume. Full-tuning and public_only (the DP-SFT control: the public 10 % alone) are
# non-private and run once per seed.
#
# Usage: experiments/glue/run.sh [--select] [--out DIR] [--seeds "0 1 2"] [--eps "4 1"]
#          [--tasks "sst2 imdb qnli mnli rte"] [--methods "full full_dp lora_dp adapter_dp"]
#          [--lrs "1e-4 5e-4 2e-3"] [--dpft build/dpft] [--dry-run]
# Env: BASE (the pretrained encoder, default models/tiny-roberta), MODELS (where the per-task
# classifiers go, default build/glue/models).
# Then:  dpft report DIR --table glue      (docs/results/glue_baselines.md)
set -euo pipefail
cd "$(dirname "$0")/../.."
out="" seeds="" eps="4 1" dpft=build/dpft dry=() select=0
tasks="sst2 imdb qnli mnli rte" methods="full full_dp lora_dp adapter_dp" lrs="1e-4 5e-4 2e-3"
while [ $# -gt 0 ]; do
  case "$1" in
    --out | --seeds | --eps | --tasks | --methods | --lrs | --dpft)
      [ $# -ge 2 ] || { echo "glue: $1 needs a value" >&2; exit 2; }
      v=${1#--}; printf -v "$v" '%s' "$2"; shift 2 ;;
    --select) select=1; shift ;;
    --dry-run) dry=(--dry-run); shift ;;
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "glue: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ "$select" = 1 ]; then out=${out:-runs/glue_lr} seeds=${seeds:-100}; else out=${out:-runs/glue} seeds=${seeds:-"0 1 2"}; fi
# Training rows per task (the spec's data.train), and the row range the validation split is
# drawn from where the training part is a range of a file (IMDB: rows [0, 2000]).
declare -A rows=([sst2]=67349 [imdb]=2000 [qnli]=8999 [mnli]=8999 [rte]=2490)
declare -A vrows=([imdb]=[0,2000])
MODELS=${MODELS:-build/glue/models}
for t in $tasks; do
  [ -n "${rows[$t]:-}" ] || { echo "glue: unknown task '$t' (sst2 imdb qnli mnli rte)" >&2; exit 2; }
done
MODELS=$MODELS bash experiments/glue/classifiers.sh "$dpft" $tasks
lr_of() {  # task method eps -> the selected lr, from experiments/glue/selected_lr.tsv
  awk -F'\t' -v t="$1" -v m="$2" -v e="$3" '$1 == t && $2 == m && $3 == e { print $4 }' \
    experiments/glue/selected_lr.tsv
}
status=0
for t in $tasks; do
  for m in $methods; do
    spec=experiments/glue/small/$t-$m.yaml
    [ -f "$spec" ] || { echo "glue: no spec $spec" >&2; exit 2; }
    for e in $eps; do
      nonprivate=0; case "$m" in full | public_only) nonprivate=1 ;; esac
      if [ "$nonprivate" = 1 ]; then e=inf; fi  # non-private: sweep runs it once per seed
      if [ "$select" = 1 ]; then
        for lr in $lrs; do
          bash scripts/sweep.sh ${dry[@]+"${dry[@]}"} --dpft "$dpft" --specs "$spec" \
            --seeds "$seeds" --eps "$e" --out "$out/lr$lr" -- --set model.path="$MODELS/$t" \
            --set train.lr="$lr" \
            --set data.eval.path="$(awk '/^  train:/ { sub(/.*path: /, ""); sub(/,.*/, ""); print }' "$spec")" \
            --set data.eval.exclude_train=true --set data.eval.num_samples=300 \
            --set data.train.num_samples=$((${rows[$t]} - 600)) ${vrows[$t]:+--set data.eval.rows=${vrows[$t]}} \
            || status=$?
          [ "$status" -ge 130 ] && exit "$status"
        done
      else
        lr=$(lr_of "$t" "$m" "$e")
        [ -n "$lr" ] || { echo "glue: no lr selected for $t $m eps $e in experiments/glue/selected_lr.tsv (run --select first)" >&2; exit 2; }
        bash scripts/sweep.sh ${dry[@]+"${dry[@]}"} --dpft "$dpft" --specs "$spec" --seeds "$seeds" \
          --eps "$e" --out "$out" -- --set model.path="$MODELS/$t" --set train.lr="$lr" || status=$?
        [ "$status" -ge 130 ] && exit "$status"
      fi
      [ "$nonprivate" = 1 ] && break
    done
  done
done
exit "$status"
