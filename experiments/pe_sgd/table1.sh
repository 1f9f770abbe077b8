#!/usr/bin/env bash
# The small-scale PE-SGD Table 1 (PubMed, embedded tiny GPT-2): every method of
# experiments/pe_sgd/small/pubmed-*.yaml at each epsilon over seeds, each run with the learning
# rate selected for that method *and epsilon* on a held-out validation set
# (docs/results/pe_sgd_lr_selection.md; the specs' own train.lr is the epsilon = 1 choice).
# Runs go through scripts/sweep.sh: finished runs are skipped, so rerun the same command to
# resume. SGD is non-private and runs once per seed (in the epsilon = inf column).
#
# Usage: experiments/pe_sgd/table1.sh [--out DIR] [--seeds "0 1 2"] [--eps "1 inf"]
#          [--methods "sgd dp_sgd ..."] [--dpft build/dpft] [--dry-run]
# Then:  dpft report DIR --table pe-sgd-table1     (and --table pe-sgd-longtail)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=runs/pe_sgd_t1 seeds="0 1 2" eps="1 inf" dpft=build/dpft dry=()
methods="sgd dp_sgd sft_dp_sgd pdp_sgd gep inpro pe_sgd_fixsample pe_sgd"
while [ $# -gt 0 ]; do
  case "$1" in
    --out | --seeds | --eps | --methods | --dpft)
      [ $# -ge 2 ] || { echo "table1: $1 needs a value" >&2; exit 2; }
      v=${1#--}; printf -v "$v" '%s' "$2"; shift 2 ;;
    --dry-run) dry=(--dry-run); shift ;;
    -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "table1: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
# Selected learning rates (validation loss, selection seed 100; pe_sgd_lr_selection.md).
declare -A lr_eps1=([dp_sgd]=5e-3 [sft_dp_sgd]=5e-3 [pdp_sgd]=1e-3 [gep]=5e-3 [inpro]=1e-3
  [pe_sgd_fixsample]=1e-3 [pe_sgd]=1e-3)
declare -A lr_epsinf=([sgd]=2e-3 [dp_sgd]=2e-3 [sft_dp_sgd]=5e-3 [pdp_sgd]=1e-3 [gep]=2e-3
  [inpro]=1e-3 [pe_sgd_fixsample]=2e-3 [pe_sgd]=2e-3)
status=0
for e in $eps; do
  for m in $methods; do
    spec=experiments/pe_sgd/small/pubmed-$m.yaml
    [ -f "$spec" ] || { echo "table1: no spec $spec" >&2; exit 2; }
    if [ "$m" = sgd ]; then
      [ "$e" = inf ] || continue  # non-private: one run per seed, in the inf column
      lr=${lr_epsinf[sgd]}
    elif [ "$e" = 1 ]; then
      lr=${lr_eps1[$m]}
    elif [ "$e" = inf ]; then
      lr=${lr_epsinf[$m]}
    else
      echo "table1: no learning rate selected for epsilon $e (selected: 1, inf); use scripts/sweep.sh with --set train.lr=..." >&2
      exit 2
    fi
    bash scripts/sweep.sh --dpft "$dpft" --specs "$spec" --seeds "$seeds" --eps "$e" --out "$out" \
      "${dry[@]}" -- --set train.lr="$lr" || status=$?
    [ "$status" -ge 130 ] && exit "$status"  # interrupted: stop here
  done
done
exit "$status"
