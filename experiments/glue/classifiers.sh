#!/usr/bin/env bash
# Give the pretrained encoder a classifier per task: dpft model rehead (seed 0) of BASE into
# MODELS/TASK, redone when BASE is newer. The GLUE experiments (experiments/glue/run.sh,
# experiments/denoise/run.sh --glue) start from these.
# Usage: experiments/glue/classifiers.sh DPFT TASK...   (tasks: sst2 imdb qnli mnli qqp rte)
# Env: BASE (default models/tiny-roberta), MODELS (default build/glue/models).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "classifiers: usage: classifiers.sh DPFT TASK..." >&2; exit 2; }
dpft=$1; shift
declare -A labels=([sst2]=0,1 [imdb]=negative,positive [qnli]=entailment,not_entailment
  [mnli]=entailment,neutral,contradiction [qqp]=0,1 [rte]=entailment,not_entailment)
BASE=${BASE:-models/tiny-roberta} MODELS=${MODELS:-build/glue/models}
[ -f "$BASE/config.json" ] || {
  echo "classifiers: $BASE is missing; pretrain it: MODEL=roberta bash scripts/pretrain_tiny.sh" >&2
  exit 3
}
for t in "$@"; do
  [ -n "${labels[$t]:-}" ] || { echo "classifiers: unknown task '$t' (sst2 imdb qnli mnli qqp rte)" >&2; exit 2; }
  dir=$MODELS/$t
  if [ ! -f "$dir/config.json" ] || [ "$BASE/model.safetensors" -nt "$dir/config.json" ]; then
    "$dpft" model rehead --from "$BASE" --head classification --labels "${labels[$t]}" \
      --out "$dir" --seed 0 >&2
  fi
done
