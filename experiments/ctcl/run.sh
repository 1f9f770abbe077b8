#!/usr/bin/env bash
# CTCL (paper 004) at small scale: Table 3 (PubMed, generative) rows, each a spec of
# experiments/ctcl/small/pubmed-ROW.yaml, swept over epsilons and seeds by scripts/sweep.sh
# (finished runs are skipped: rerun the same command to resume), then scored:
#   ctcl, bart_vanilla, bart_keywords, aug_pe, pe
#                                    write RUN/synthetic/synthetic.jsonl themselves (the BART
#                                    rows without condition pretraining need
#                                    models/tiny-bart-uncond: MODEL=bart-uncond pretrain_tiny.sh)
#   gpt2_vanilla                     a dp-sgd run of models/tiny-gpt2 with save_model; this script
#                                    samples --num documents from RUN/model with the spec's prompt
#                                    (dpft generate, top-p 0.95) into RUN/synthetic/synthetic.jsonl
#   downstream_dpft                  the downstream causal BERT DP fine-tuned on the private
#                                    texts (made here: dpft model init --head causal), scored by
#                                    its own eval on the real test texts
# Every synthetic set is scored by `dpft eval-synthetic --run RUN` against the first --max-real
# texts of the PubMed test split: MAUVE / FID / precision-recall on models/tiny-roberta
# embeddings, and --lm (a causal BERT `mini` trained from scratch on it, next-token accuracy and
# perplexity on the real texts). Then:
#   dpft report OUT --table ctcl-generative     (Table 3)
#   dpft report OUT --table ctcl-ablation       (Table 5: bart_vanilla, bart_keywords, ctcl)
#
# Usage: experiments/ctcl/run.sh [--rows "ctcl bart_vanilla bart_keywords gpt2_vanilla downstream_dpft aug_pe pe"]
#          [--eps "inf 4 2 1"] [--seeds "0 1 2"] [--out runs/ctcl] [--dpft build/dpft]
#          [--num 200] [--max-real 1000] [--lm-steps 200] [--dry-run]
set -euo pipefail
cd "$(dirname "$0")/../.."
rows="ctcl bart_vanilla bart_keywords gpt2_vanilla downstream_dpft aug_pe pe" eps="inf 4 2 1" seeds="0 1 2"
out=runs/ctcl dpft=build/dpft num=200 max_real=1000 lm_steps=200 dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rows | --eps | --seeds | --out | --dpft | --num | --max-real | --lm-steps)
      [ $# -ge 2 ] || { echo "ctcl: $1 needs a value" >&2; exit 2; }
      v=${1#--}; v=${v//-/_}; printf -v "$v" '%s' "$2"; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ctcl: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
real=../shared/data/pe_sgd_text/pubmed/test.csv
vocab=../shared/data/bert_base_uncased_vocab
for r in $rows; do
  [ -f "experiments/ctcl/small/pubmed-$r.yaml" ] ||
    { echo "ctcl: no spec experiments/ctcl/small/pubmed-$r.yaml (rows: ctcl bart_vanilla bart_keywords gpt2_vanilla downstream_dpft aug_pe pe)" >&2; exit 2; }
done
[ -f "$real" ] || { echo "ctcl: $real is missing (../shared/data)" >&2; exit 3; }
run() { if [ "$dry" = 1 ]; then echo "would run: $*"; else "$@"; fi; }

# The downstream model of the Downstream DPFT row (the shape eval-synthetic --lm trains).
if [[ " $rows " == *" downstream_dpft "* ]] && [ ! -f build/ctcl/models/causal-bert-mini/config.json ]; then
  run "$dpft" model init --arch bert --preset mini --head causal --tokenizer "$vocab" \
    --out build/ctcl/models/causal-bert-mini --seed 0
fi
status=0
for r in $rows; do
  spec=experiments/ctcl/small/pubmed-$r.yaml
  sweep=(bash scripts/sweep.sh --dpft "$dpft" --specs "$spec" --seeds "$seeds" --eps "$eps" --out "$out")
  [ "$dry" = 1 ] && sweep+=(--dry-run)
  "${sweep[@]}" || status=1
  [ "$r" = downstream_dpft ] && continue
  # Score every finished run of this row that has not been scored.
  for m in "$out"/pubmed-"$r"/eps*/s*/*/*/metrics.json; do
    [ -f "$m" ] || continue
    d=$(dirname "$m")
    python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); sys.exit(m.get("status") != "ok" or "main" in m.get("synthetic_eval", {}))' "$m" || continue
    if [ "$r" = gpt2_vanilla ] && [ ! -f "$d/synthetic/synthetic.jsonl" ]; then
      prompt=$(sed -n 's/.*[{ ]prompt: "\([^"]*\)".*/\1/p' "$spec" | head -n 1)
      seed=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run"]["seed"])' "$m")
      mkdir -p "$d/synthetic"
      python3 -c 'import json,sys; [print(json.dumps({"prompt": sys.argv[1]})) for _ in range(int(sys.argv[2]))]' "$prompt" "$num" > "$d/synthetic/prompts.jsonl"
      run "$dpft" generate --model "$d/model" --prompts "$d/synthetic/prompts.jsonl" --sample \
        --top-p 0.95 --max-new-tokens 128 --seed "$seed" --out "$d/synthetic/synthetic.jsonl" || { status=1; continue; }
    fi
    run "$dpft" eval-synthetic --run "$d" --real "$real" --max-real "$max_real" \
      --embedder models/tiny-roberta --max-length 128 --lm --lm-tokenizer "$vocab" \
      --lm-steps "$lm_steps" || status=1
  done
done
exit $status
