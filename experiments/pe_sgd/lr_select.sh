#!/usr/bin/env bash
# Learning-rate selection for the small-scale PE-SGD Table 1 (PubMed, embedded tiny GPT-2):
# every spec of experiments/pe_sgd/small/pubmed-*.yaml at each lr, evaluated on a held-out
# validation set (300 rows of the dev pool that the run does not train on:
# data.eval.exclude_train), never on the test set. Selection seeds default to 100 (the Table 1
# seeds are 0 1 2, so selection and test runs draw different private sets). Runs go through
# scripts/sweep.sh, so an interrupted selection resumes with the same command.
#
# Usage: experiments/pe_sgd/lr_select.sh [--out DIR] [--seeds "100"] [--lrs "5e-4 1e-3 2e-3 5e-3"]
#          [--eps "1"] [--methods "dp_sgd pe_sgd ..."] [--dpft build/dpft] [--dry-run]
# Then:  dpft report DIR --table lr-select     (the caption names each method's best lr)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=runs/pe_sgd_lr seeds=100 lrs="5e-4 1e-3 2e-3 5e-3" eps=1 dpft=build/dpft dry=()
methods="dp_sgd pe_sgd pe_sgd_fixsample sft_dp_sgd pdp_sgd gep inpro sgd"
while [ $# -gt 0 ]; do
  case "$1" in
    --out | --seeds | --lrs | --eps | --methods | --dpft)
      [ $# -ge 2 ] || { echo "lr_select: $1 needs a value" >&2; exit 2; }
      v=${1#--}; printf -v "$v" '%s' "$2"; shift 2 ;;
    --dry-run) dry=(--dry-run); shift ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "lr_select: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
specs=""
for m in $methods; do
  f=experiments/pe_sgd/small/pubmed-$m.yaml
  [ -f "$f" ] || { echo "lr_select: no spec $f (methods: $methods)" >&2; exit 2; }
  specs="$specs $f"
done
status=0
for lr in $lrs; do
  bash scripts/sweep.sh ${dry[@]+"${dry[@]}"} --dpft "$dpft" --specs "$specs" --seeds "$seeds" \
    --eps "$eps" --out "$out/lr$lr" -- --set train.lr="$lr" \
    --set data.eval.path=../shared/data/pe_sgd_text/pubmed/dev.csv \
    --set data.eval.exclude_train=true --set data.eval.num_samples=300 || status=$?
  [ "$status" -ge 130 ] && exit "$status"  # interrupted: stop here
done
[ ${#dry[@]} -gt 0 ] && exit "$status"  # nothing ran, nothing to report
"$dpft" report "$out" --table lr-select || status=$?
exit "$status"
