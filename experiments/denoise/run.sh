#!/usr/bin/env bash
# Paper 003 (gradient-matrix denoising) at small scale: DP-SGD vs DP-SGD+Denoise, paired by
# seed, on data-to-text generation (E2E, DART; Tables 4-5) with models/tiny-gpt2
# (experiments/denoise/small/*.yaml). Runs go through scripts/sweep.sh: finished runs are
# skipped, so rerun the same command to resume.
#
# Usage: experiments/denoise/run.sh [--out DIR] [--seeds "0 1 2"] [--datasets "e2e dart"]
#          [--methods "dp_sgd denoise"] [--dpft build/dpft] [--dry-run] [-- EXTRA --set ...]
# Then:  dpft report DIR --table denoise-nlg        (docs/results/denoise.md)
#        dpft report DIR --plot fig.svg --plot-kind eval-loss
set -euo pipefail
cd "$(dirname "$0")/../.."
out=runs/denoise seeds="0 1 2" datasets="e2e dart" methods="dp_sgd denoise" dpft=build/dpft
dry=() extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out | --seeds | --datasets | --methods | --dpft)
      [ $# -ge 2 ] || { echo "denoise: $1 needs a value" >&2; exit 2; }
      v=${1#--}; printf -v "$v" '%s' "$2"; shift 2 ;;
    --dry-run) dry=(--dry-run); shift ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "denoise: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
status=0
for d in $datasets; do
  for m in $methods; do
    spec=experiments/denoise/small/$d-$m.yaml
    [ -f "$spec" ] || { echo "denoise: no spec $spec (datasets: e2e dart; methods: dp_sgd denoise)" >&2; exit 2; }
    bash scripts/sweep.sh ${dry[@]+"${dry[@]}"} --dpft "$dpft" --specs "$spec" --seeds "$seeds" \
      --eps 5.4 --out "$out" ${extra[@]+-- "${extra[@]}"} || status=$?
    [ "$status" -ge 130 ] && exit "$status"
  done
done
exit "$status"
