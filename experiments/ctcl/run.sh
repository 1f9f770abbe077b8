#!/usr/bin/env bash
# CTCL (paper 004) at small scale: Table 3 (PubMed, generative; --dataset pubmed, the default)
# or Table 4 (Yelp, 5-way star rating; --dataset yelp: rows ctcl aug_pe pe downstream_dpft) rows,
# each a spec of experiments/ctcl/small/DATASET-ROW.yaml, swept over epsilons and seeds by
# scripts/sweep.sh (finished runs are skipped: rerun the same command to resume), then scored:
#   ctcl, bart_vanilla, bart_keywords, aug_pe, pe
#                                    write RUN/synthetic/synthetic.jsonl themselves (the BART
#                                    rows without condition pretraining start from
#                                    models/tiny-bart-base, the denoising stage)
#   gpt2_vanilla                     a dp-sgd run of models/tiny-gpt2 with save_model; this script
#                                    samples --num documents from RUN/model with the spec's prompt
#                                    (dpft generate, top-p 0.95) into RUN/synthetic/synthetic.jsonl
#   downstream_dpft                  the downstream model DP fine-tuned on the private texts
#                                    (made here: a causal BERT `mini` for PubMed, tiny-roberta
#                                    reheaded for the 5 star ratings for Yelp), scored by its own
#                                    eval on the real test texts
# Every synthetic set of --eps and --seeds (a set that another call is scoring, RUN/.scoring,
# is left to it) is scored by `dpft eval-synthetic --run RUN` against the first --max-real
# texts of the test split, at 64 tokens (the specs' length: 100 steps of 64 documents cut to 64
# tokens, up to 64 new tokens sampled): MAUVE / FID / precision-recall on models/tiny-roberta embeddings, and
# PubMed: --lm (a causal BERT `mini` trained from scratch on it, next-token accuracy and
# perplexity on the real texts); Yelp: --classify (tiny-roberta with a 5-way head fine-tuned on
# the synthetic reviews' label2, accuracy on the real ones; recorded as synthetic_eval.label2).
# Then:
#   dpft report OUT --table ctcl-generative     (Table 3)
#   dpft report OUT --table ctcl-classification (Table 4)
#   dpft report OUT --table ctcl-ablation       (Table 5: bart_vanilla, bart_keywords, ctcl)
#
# Fig. 3 (scaling in N_syn), with --scaling "50 100 400" (and --eps 4: each scored subset trains
# a downstream model): the ctcl row's subsets of those sizes in the runs of --eps and --seeds
# (its spec's method.generation.subsets) are scored too (synthetic_eval.n<N>; give --scaling
# with the eps-4 ctcl runs themselves: keep_runs.sh drops the subsets), and the aug_pe row
# is also run at each size other than its spec's (OUT/scaling/n<N>/DATASET-aug_pe/...,
# method.num_synthetic=N) and scored; then
#   dpft report OUT/DATASET-ctcl OUT/DATASET-aug_pe OUT/scaling --table ctcl-scaling
#   (--plot fig3.svg --plot-kind ctcl-scaling)
#
# Learning rates: every row that trains (all but aug_pe and pe) runs at the lr selected for it
# on validation data, read from $SELECTED (default experiments/ctcl/selected_lr.tsv: dataset,
# row, lr; a missing entry is an error naming it). --select makes them: each such row at
# epsilon 4 (--eps), seed 100 (--seeds), for each of --lrs, trained on all but the last 300
# rows of the private split (PubMed dev: 1,435; Yelp dev: 5,000) and evaluated on those 300
# (the generators' loss on held-out documents given their conditions; the Downstream DPFT
# model's own eval), no scoring, into OUT/lr<LR> (OUT default runs/ctcl_lr); then
#   dpft report OUT --table lr-select
# names the lr with the lowest validation loss per row, for $SELECTED. Never the test split.
# The scorer's own lr (the downstream model eval-synthetic trains on each synthetic set: --lm-lr
# for PubMed, --clf-lr for Yelp; row `scorer` of $SELECTED) is chosen the same way, without any
# method in the loop: --select-scorer trains it on the same all-but-300 real private rows at each
# of --lrs and evaluates it on the 300 (OUT/scorer/DATASET-lr<LR>.json); it prints the
# validation accuracy and loss of each, for $SELECTED (best: lowest loss).
#
# Usage: experiments/ctcl/run.sh [--dataset pubmed|yelp]
#          [--rows "ctcl bart_vanilla bart_keywords gpt2_vanilla downstream_dpft aug_pe pe"]
#          [--eps "inf 4 2 1"] [--seeds "0 1 2"] [--out runs/ctcl] [--dpft build/dpft]
#          [--num 800] [--max-real 1000] [--lm-steps 200] [--scaling "50 100 400"]
#          [--select | --select-scorer [--lrs "2e-4 1e-3 5e-3"]] [--dry-run]
set -euo pipefail
cd "$(dirname "$0")/../.."
rows="" dataset=pubmed eps="" seeds="" scaling="" select=0 select_scorer=0 lrs="2e-4 1e-3 5e-3"
out="" dpft=build/dpft num=800 max_real=1000 lm_steps=200 dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dataset | --rows | --eps | --seeds | --out | --dpft | --num | --max-real | --lm-steps | \
      --scaling | --lrs)
      [ $# -ge 2 ] || { echo "ctcl: $1 needs a value" >&2; exit 2; }
      v=${1#--}; v=${v//-/_}; printf -v "$v" '%s' "$2"; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --select) select=1; shift ;;
    --select-scorer) select_scorer=1; shift ;;
    -h | --help) sed -n '2,57p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ctcl: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
vocab=../shared/data/bert_base_uncased_vocab
stars="Review Stars: 1.0,Review Stars: 2.0,Review Stars: 3.0,Review Stars: 4.0,Review Stars: 5.0"
if [ "$select" = 1 ] && [ "$select_scorer" = 1 ]; then
  echo "ctcl: --select and --select-scorer are separate steps: give one" >&2; exit 2
elif [ "$select" = 1 ] || [ "$select_scorer" = 1 ]; then
  eps=${eps:-4} seeds=${seeds:-100} out=${out:-runs/ctcl_lr}
else
  eps=${eps:-"inf 4 2 1"} seeds=${seeds:-"0 1 2"} out=${out:-runs/ctcl}
fi
SELECTED=${SELECTED:-experiments/ctcl/selected_lr.tsv}
trains() { [ "$1" != aug_pe ] && [ "$1" != pe ]; }  # rows with a learning rate
case "$dataset" in
  pubmed) real=../shared/data/pe_sgd_text/pubmed/test.csv private=../shared/data/pe_sgd_text/pubmed/dev.csv
          private_rows=1435
          all="ctcl bart_vanilla bart_keywords gpt2_vanilla downstream_dpft aug_pe pe"
          score=(--lm --lm-tokenizer "$vocab" --lm-steps "$lm_steps" --lm-max-length 64)
          scorer_lr=--lm-lr ;;
  yelp) real=../shared/data/yelp_augpe/test.csv private=../shared/data/yelp_augpe/dev.csv
        private_rows=5000
        all="ctcl downstream_dpft aug_pe pe"
        score=(--classify --classifier-from models/tiny-roberta --labels "$stars"
               --label-column label2 --clf-max-length 64)
        scorer_lr=--clf-lr ;;
  *) echo "ctcl: --dataset $dataset: use pubmed or yelp" >&2; exit 2 ;;
esac
if [ -z "$rows" ]; then
  rows=$all
  if [ "$select" = 1 ]; then
    rows=""
    for r in $all; do trains "$r" && rows="$rows $r"; done
  fi
fi
for r in $rows; do
  [ -f "experiments/ctcl/small/$dataset-$r.yaml" ] ||
    { echo "ctcl: no spec experiments/ctcl/small/$dataset-$r.yaml" >&2; exit 2; }
done
[ -f "$real" ] || { echo "ctcl: $real is missing (../shared/data)" >&2; exit 3; }
run() { if [ "$dry" = 1 ]; then echo "would run: $*"; else "$@"; fi; }
lr_of() {  # row -> its selected lr
  [ -f "$SELECTED" ] && awk -F'\t' -v d="$dataset" -v r="$1" '$1 == d && $2 == r { print $3 }' "$SELECTED"
}
if [ "$select_scorer" = 1 ]; then
  # The scorer alone, trained on real private rows [0, N - 300), validated on the last 300.
  held=$((private_rows - 300)) dir=$out/scorer
  [ "$dry" = 1 ] || mkdir -p "$dir"
  run python3 -c 'import csv,sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
held = int(sys.argv[3])
assert len(rows) == int(sys.argv[4]), f"{sys.argv[1]}: {len(rows)} rows, expected {sys.argv[4]}"
for name, part in (("train", rows[:held]), ("val", rows[held:])):
    with open(f"{sys.argv[2]}-{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys())); w.writeheader(); w.writerows(part)' \
    "$private" "$dir/$dataset" "$held" "$private_rows" || exit 3
  status=0
  for lr in $lrs; do
    j=$dir/$dataset-lr$lr.json
    [ -s "$j" ] && { echo "ctcl: $j is there: kept"; continue; }
    run "$dpft" eval-synthetic --synthetic "$dir/$dataset-train.csv" --real "$dir/$dataset-val.csv" \
      --embedder models/tiny-roberta --max-length 64 "${score[@]}" "$scorer_lr" "$lr" \
      --work "$dir/work-lr$lr" --out "$j" || status=1
  done
  [ "$dry" = 1 ] || python3 - "$dataset" "$dir" "$SELECTED" $lrs <<'PY' || status=1
import json, os, sys
dataset, d, selected, lrs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
print(f"ctcl: the scorer on {dataset}'s last 300 private rows (best: lowest loss; into {selected}, row scorer)")
missing = 0
for lr in lrs:
    p = os.path.join(d, f"{dataset}-lr{lr}.json")
    if not os.path.exists(p):
        print(f"  lr {lr}: missing ({p})"); missing += 1; continue
    m = json.load(open(p))
    s = m.get("downstream_lm") or m.get("downstream_classifier") or {}
    acc = s.get("next_token_accuracy", s.get("accuracy"))
    print(f"  lr {lr}: accuracy {acc}, loss {s.get('loss')}, perplexity {s.get('perplexity')}")
sys.exit(1 if missing else 0)
PY
  exit $status
fi
if [ "$select" = 0 ]; then
  for r in $rows; do
    trains "$r" || continue
    [ -n "$(lr_of "$r")" ] || { echo "ctcl: no lr selected for $dataset $r in $SELECTED (run --select first)" >&2; exit 2; }
  done
  [ -n "$(lr_of scorer)" ] || { echo "ctcl: no lr selected for $dataset scorer in $SELECTED (run --select-scorer first)" >&2; exit 2; }
  score+=("$scorer_lr" "$(lr_of scorer)")
fi

# The downstream model of the Downstream DPFT row (the model eval-synthetic trains).
if [[ " $rows " == *" downstream_dpft "* ]]; then
  if [ "$dataset" = pubmed ] && [ ! -f build/ctcl/models/causal-bert-mini/config.json ]; then
    run "$dpft" model init --arch bert --preset mini --head causal --tokenizer "$vocab" \
      --out build/ctcl/models/causal-bert-mini --seed 0
  elif [ "$dataset" = yelp ] && [ ! -f build/ctcl/models/yelp-stars-classifier/config.json ]; then
    run "$dpft" model rehead --from models/tiny-roberta --head classification --labels "$stars" \
      --out build/ctcl/models/yelp-stars-classifier --seed 0
  fi
fi
if [ "$select" = 1 ]; then
  # Validation split: the last 300 private rows; training on the others.
  held=$((private_rows - 300))
  status=0
  for r in $rows; do
    trains "$r" || { echo "ctcl: --select: row $r has no learning rate" >&2; exit 2; }
    spec=experiments/ctcl/small/$dataset-$r.yaml
    extra=(--set data.train.rows="[0, $held]" --set data.eval.path="$private"
           --set data.eval.text_column=text --set data.eval.rows="[$held, $private_rows]")
    case "$r" in
      # no synthetic set is scored: sample the fewest documents
      ctcl | bart_*) extra+=(--set method.generation.num_synthetic=16 --set method.generation.subsets=[]) ;;
      # validated as trained: each abstract after the spec's prompt
      gpt2_vanilla) extra+=(--set "data.eval.prompt=\"$(sed -n 's/.*[{ ]prompt: "\([^"]*\)".*/\1/p' "$spec" | head -n 1)\"") ;;
    esac
    for lr in $lrs; do
      sweep=(bash scripts/sweep.sh --dpft "$dpft" --specs "$spec" --seeds "$seeds" --eps "$eps" --out "$out/lr$lr")
      [ "$dry" = 1 ] && sweep+=(--dry-run)
      "${sweep[@]}" -- --set train.lr="$lr" "${extra[@]}" || status=1
    done
  done
  echo "ctcl: then: dpft report $out --table lr-select, and the best lr per row into $SELECTED"
  exit $status
fi
for n in $scaling; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "ctcl: --scaling '$scaling': give sizes such as \"50 100 400\"" >&2; exit 2; }
done
# claim DIR: DIR/.scoring holds this script's pid while it scores DIR, so that two run.sh
# calls over the same runs never score one twice at once; a lock whose process is gone is taken
# over. Fails (1) while another live process holds it.
claim() {
  local l=$1/.scoring p
  [ "$dry" = 1 ] && return 0
  if ! mkdir "$l" 2>/dev/null; then
    p=$(cat "$l/pid" 2>/dev/null || true)
    if [ -z "$p" ] || kill -0 "$p" 2>/dev/null; then
      echo "ctcl: $1 is being scored by process ${p:-?} (its $l): skipped; remove $l if nothing is" >&2
      return 1
    fi
    rm -rf "$l" && mkdir "$l" 2>/dev/null || return 1
  fi
  echo $$ >"$l/pid"
}
# unscored METRICS KEY: whether the run ended ok and has no synthetic_eval.KEY yet.
unscored() {
  python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); sys.exit(m.get("status") != "ok" or sys.argv[2] in m.get("synthetic_eval", {}))' "$1" "$2"
}
# score DIR KEY [--subset N]: eval-synthetic --run into synthetic_eval.KEY, unless it is there.
score_run() {
  local d=$1 key=$2 rc=0
  shift 2
  unscored "$d/metrics.json" "$key" || return 0
  claim "$d" || return 0
  run "$dpft" eval-synthetic --run "$d" --name "$key" "$@" --real "$real" --max-real "$max_real" \
    --embedder models/tiny-roberta --max-length 64 "${score[@]}" || rc=$?
  [ "$dry" = 1 ] || rm -rf "$d/.scoring"
  return $rc
}
# of_this_call METRICS: whether the run is one of --eps and --seeds (OUT/<row>/eps<E>/s<S>/...).
of_this_call() {
  local combo e s
  combo=$(dirname "$(dirname "$(dirname "$1")")")
  e=$(basename "$(dirname "$combo")") s=$(basename "$combo")
  [[ " $eps " == *" ${e#eps} "* && " $seeds " == *" ${s#s} "* ]]
}
main_key=main; [ "$dataset" = yelp ] && main_key=label2
status=0
for r in $rows; do
  spec=experiments/ctcl/small/$dataset-$r.yaml
  sweep=(bash scripts/sweep.sh --dpft "$dpft" --specs "$spec" --seeds "$seeds" --eps "$eps" --out "$out")
  [ "$dry" = 1 ] && sweep+=(--dry-run)
  lr=(); trains "$r" && lr=(--set train.lr="$(lr_of "$r")")
  "${sweep[@]}" -- ${lr[@]+"${lr[@]}"} || status=1
  [ "$r" = downstream_dpft ] && continue
  # Score every finished run of this row, --eps and --seeds, that has not been scored.
  for m in "$out"/"$dataset"-"$r"/eps*/s*/*/*/metrics.json; do
    [ -f "$m" ] || continue
    of_this_call "$m" || continue
    d=$(dirname "$m")
    unscored "$m" "$main_key" || continue
    if [ "$r" = gpt2_vanilla ] && [ ! -f "$d/synthetic/synthetic.jsonl" ]; then
      prompt=$(sed -n 's/.*[{ ]prompt: "\([^"]*\)".*/\1/p' "$spec" | head -n 1)
      seed=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run"]["seed"])' "$m")
      mkdir -p "$d/synthetic"
      python3 -c 'import json,sys; [print(json.dumps({"prompt": sys.argv[1]})) for _ in range(int(sys.argv[2]))]' "$prompt" "$num" > "$d/synthetic/prompts.jsonl"
      run "$dpft" generate --model "$d/model" --prompts "$d/synthetic/prompts.jsonl" --sample \
        --top-p 0.95 --max-new-tokens 64 --seed "$seed" --out "$d/synthetic/synthetic.jsonl" || { status=1; continue; }
    fi
    score_run "$d" "$main_key" || status=1
  done
  [ -n "$scaling" ] || continue
  # Fig. 3: ctcl's subsets of one generation (the runs of --eps and --seeds: scoring a subset
  # trains a downstream model); Aug-PE once per size.
  if [ "$r" = ctcl ]; then
    # A run already kept as a run file (experiments/keep_runs.sh) has lost its synthetic sets:
    # a size it holds no score for can no longer be scored.
    for e in $eps; do
      for s in $seeds; do
        f="$out/$dataset-ctcl/eps$e/s$s.run.json"
        [ -f "$f" ] || continue
        for n in $scaling; do
          python3 -c 'import json,sys; sys.exit(sys.argv[2] not in json.load(open(sys.argv[1]))["metrics"].get("synthetic_eval", {}))' "$f" "n$n" && continue
          echo "ctcl: $f was kept (experiments/keep_runs.sh) before its subset of $n was scored, and its synthetic sets are gone: move it aside and rerun with --scaling (the subsets are scored before a run is kept)" >&2
          status=1
        done
      done
    done
    for m in "$out"/"$dataset"-ctcl/eps*/s*/*/*/metrics.json; do
      [ -f "$m" ] || continue
      of_this_call "$m" || continue
      for n in $scaling; do
        if [ -f "$(dirname "$m")/synthetic/synthetic_n$n.jsonl" ]; then
          score_run "$(dirname "$m")" "n$n" --subset "$n" || status=1
        else
          echo "ctcl: $(dirname "$m") has no subset of $n (method.generation.subsets of $spec)" >&2
          status=1
        fi
      done
    done
  elif [ "$r" = aug_pe ]; then
    own=$(sed -n 's/^ *num_synthetic: *\([0-9]*\).*/\1/p' "$spec" | head -n 1)
    for n in $scaling; do
      [ "$n" = "$own" ] && continue  # the table's runs are this size
      sweep=(bash scripts/sweep.sh --dpft "$dpft" --specs "$spec" --seeds "$seeds" --eps "$eps"
             --out "$out/scaling/n$n")
      [ "$dry" = 1 ] && sweep+=(--dry-run)
      "${sweep[@]}" -- --set method.num_synthetic="$n" || status=1
      for m in "$out/scaling/n$n/$dataset-aug_pe"/eps*/s*/*/*/metrics.json; do
        [ -f "$m" ] && of_this_call "$m" && { score_run "$(dirname "$m")" "$main_key" || status=1; }
      done
    done
  fi
done
exit $status
