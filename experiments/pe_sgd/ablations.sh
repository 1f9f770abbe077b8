#!/usr/bin/env bash
# The PE-SGD paper's ablations, each a sweep of one switch of
# experiments/pe_sgd/$SCALE/$DATASET-pe_sgd.yaml over seeds, through scripts/sweep.sh (which skips
# runs already finished). Default: small scale (embedded tiny GPT-2) on PubMed. Usage:
#   experiments/pe_sgd/ablations.sh [OUT_DIR] [SEEDS]      (defaults: runs/pe_sgd_ablations, "0 1 2")
# Environment:
#   DPFT     path of the dpft binary (default build/dpft; a copy keeps a rebuild from changing
#            the binary mid-sweep)
#   ONLY     "placement clip ..." to run some ablations only
#            (names: placement clip fold size epsilon sft generator)
#   SCALE    small (default) or paper (experiments/pe_sgd/paper/: the paper's model and setting)
#   DATASET  pubmed (default), biorxiv or congressional
#   SET      extra overrides for every run (PE-SGD and, in the epsilon ablation, DP-SGD), e.g.
#            SET="--set model.path=/models/Qwen2.5-3B-Instruct --set data.train.path=/data/x.csv";
#            one line, split on whitespace (no spaces inside values); not seed or
#            privacy.epsilon, which each sweep sets
#   SET_PE   extra overrides for the PE-SGD runs only (method.* keys DP-SGD does not have)
#   PE_LR_INF  PE-SGD's lr at epsilon = inf (default: 2e-3, selected for small/pubmed with the
#            embedded model; with any other SCALE/DATASET or a SET the spec's own or SET's lr)
#   GENERATOR  a frozen generator checkpoint for Algorithm 2
#   DRY_RUN=1  print the runs (scripts/sweep.sh --dry-run) without running them
# A failed run stops the script after its sweep (set -e); rerun to continue (finished runs are
# skipped).
# Then: dpft report OUT_DIR/<ablation> --table pe-sgd-table1 (labels name the variants).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-runs/pe_sgd_ablations}
seeds=${2:-"0 1 2"}
dpft=${DPFT:-build/dpft}
all="placement clip fold size epsilon sft generator"
only=${ONLY:-$all}
for a in $only; do
  [[ " $all " == *" $a "* ]] || { echo "ablations.sh: ONLY: unknown ablation '$a' (names: $all)" >&2; exit 2; }
done
want() { [[ " $only " == *" $1 "* ]]; }
scale=${SCALE:-small}
dataset=${DATASET:-pubmed}
case "$scale" in small | paper) ;; *) echo "ablations.sh: SCALE is small or paper, got '$scale'" >&2; exit 2 ;; esac
dir=experiments/pe_sgd/$scale
pe=$dir/$dataset-pe_sgd.yaml
dp=$dir/$dataset-dp_sgd.yaml
for f in "$pe" "$dp"; do
  [ -f "$f" ] || { echo "ablations.sh: no spec $f (DATASET: pubmed, biorxiv, congressional)" >&2; exit 2; }
done
read -r -a extra <<< "${SET:-}"
read -r -a extra_pe <<< "${SET_PE:-}"
dry=()
[ "${DRY_RUN:-0}" != 0 ] && dry=(--dry-run)
# The spec's train.lr is PE-SGD's epsilon = 1 lr; runs at epsilon = inf use the one selected
# for epsilon = inf (docs/results/pe_sgd_lr_selection.md, as in table1.sh) at small scale on
# PubMed with the embedded model; elsewhere (or with a SET, which may change the model or the
# lr) the spec's own lr unless PE_LR_INF is given.
default_lr_inf=""
[ "$scale/$dataset" = small/pubmed ] && [ -z "${SET:-}" ] && default_lr_inf=2e-3
pe_lr_inf=${PE_LR_INF:-$default_lr_inf}
lr_inf=()
[ -n "$pe_lr_inf" ] && lr_inf=(--set "train.lr=$pe_lr_inf")
sweep() {  # name eps spec -- overrides...: SET, then SET_PE for the PE-SGD spec, then these
  local name=$1 eps=$2 spec=$3; shift 3
  [ $# -gt 0 ] && shift  # --
  local ex=(${extra[@]+"${extra[@]}"})
  [ "$spec" = "$pe" ] && ex+=(${extra_pe[@]+"${extra_pe[@]}"})
  bash scripts/sweep.sh ${dry[@]+"${dry[@]}"} --dpft "$dpft" --specs "$spec" --seeds "$seeds" \
    --eps "$eps" --out "$out/$name" -- ${ex[@]+"${ex[@]}"} "$@"
}
# Noise placement (Sec. 5.4, Fig. 8; Table 5 with diagnostics on).
want placement && for p in coefficients inner_product private_gradient; do
  sweep placement-$p 1 $pe -- --set method.noise_placement=$p --set method.diagnostics=true
done
# Normalisation vs clipping with C in {0.5, 1, 2} (Fig. 9a).
want clip && for c in 0.5 1 2; do
  sweep clip-$c 1 $pe -- --set method.sensitivity=clip --set privacy.clip_norm=$c --set label=PE-SGD-clip$c
done
# Variation fold L in {1, 2, 4, inf} (Fig. 9b).
want fold && for l in 1 2 4 inf; do
  sweep fold-$l 1 $pe -- --set method.variation_fold=$l --set label=PE-SGD-L$l
done
# Synthetic set size N in {50, 100, 200, 400} (Fig. 9c).
want size && for n in 50 100 200 400; do
  sweep size-$n 1 $pe -- --set method.synthetic_size=$n --set label=PE-SGD-N$n
done
# Privacy budget eps in {1, 2, 4, 8} against DP-SGD (Fig. 7), both at their epsilon = 1 lr.
want epsilon && sweep epsilon "1 2 4 8" $pe --
want epsilon && sweep epsilon "1 2 4 8" $dp --
# Synthetic-data SFT on / off (Table 8).
want sft && sweep sft-off 1 $pe -- --set method.sft_epochs=0 --set label=PE-SGD-noSFT
want sft && sweep sft-off inf $pe -- ${lr_inf[@]+"${lr_inf[@]}"} --set method.sft_epochs=0 --set label=PE-SGD-noSFT
# Algorithm 2 needs a stronger frozen generator: pass its directory as GENERATOR=DIR.
if want generator && [ -n "${GENERATOR:-}" ]; then
  sweep generator 1 $pe -- --set method.generator_model="$GENERATOR" --set label=PE-SGD-Alg2
  sweep generator inf $pe -- ${lr_inf[@]+"${lr_inf[@]}"} --set method.generator_model="$GENERATOR" --set label=PE-SGD-Alg2
fi
