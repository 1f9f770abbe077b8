#!/usr/bin/env bash
# experiments/pe_sgd/{ablations,table1,lr_select}.sh through their dry runs (nothing is trained): which
# spec each ablation sweeps, the per-epsilon learning rates, SCALE/DATASET/SET, and the
# refusal of a GPU spec (dpft has no GPU execution). Dry runs read specs, not data.
# Usage: experiments_test.sh PATH/TO/dpft SOURCE_DIR
set -u
DPFT="$1"; SRC="$2"
ABL="$SRC/experiments/pe_sgd/ablations.sh"; T1="$SRC/experiments/pe_sgd/table1.sh"
LRS="$SRC/experiments/pe_sgd/lr_select.sh"
source "$(dirname "$0")/shell_check.sh"
# Validates specs in one dpft process (`config validate --no-data A B ...`: the specs alone, their
# models and data are not made here), then checks each by name.
validate_all() {
  local out; out=$("$DPFT" config validate --no-data "$@" 2>&1)
  for f in "$@"; do check "$(basename "$f") is a valid spec" has "$out" "ok: $f ("; done
}
# From the source tree: the pre-flight opens the specs' data, named relative to it.
out=$(cd "$SRC" && "$DPFT" config validate experiments/quickstart.yaml "$T/none.yaml" experiments/example.yaml 2>&1); rc=$?
check "config validate over several specs: a missing one exits 3 (rc $rc)" [ "$rc" = 3 ]
check "... naming it" has "$out" "$T/none.yaml: spec file"
check "... and the others are still checked" [ "$(count "$out" "^ok: ")" = 2 ]

# Default: small scale, PubMed; the epsilon = inf SFT-off run uses PE-SGD's inf lr (2e-3).
out=$(DPFT="$DPFT" DRY_RUN=1 ONLY="placement sft" bash "$ABL" "$T/abl" "0 1" 2>&1); rc=$?
check "default dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
check "placement: 3 placements x 2 seeds" [ "$(count "$out" "would run.*/abl/placement-")" = 6 ]
check "placement sweeps the small PubMed spec" has "$out" "run experiments/pe_sgd/small/pubmed-pe_sgd.yaml --set seed=0 --set privacy.epsilon=1 --out $T/abl/placement-inner_product/pubmed-pe_sgd/eps1/s0 --set method.noise_placement=inner_product --set method.diagnostics=true"
check "sft off at inf uses the inf lr" has "$out" "--set privacy.epsilon=inf --out $T/abl/sft-off/pubmed-pe_sgd/epsinf/s0 --set train.lr=2e-3 --set method.sft_epochs=0"
check "dry run writes nothing" [ ! -e "$T/abl" ]

# Paper scale on another dataset with overrides: the paper spec, SET on every run and SET_PE
# on PE-SGD's only (DP-SGD has no method.generation), no inf lr.
out=$(DPFT="$DPFT" DRY_RUN=1 SCALE=paper DATASET=congressional ONLY="sft epsilon" \
      SET="--set device=cpu --set model.path=/models/q" \
      SET_PE="--set method.generation.max_new_tokens=7" bash "$ABL" "$T/abl" "0" 2>&1); rc=$?
check "paper dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
check "paper spec swept with SET, SET_PE first" has "$out" "run experiments/pe_sgd/paper/congressional-pe_sgd.yaml --set seed=0 --set privacy.epsilon=inf --out $T/abl/sft-off/congressional-pe_sgd/epsinf/s0 --set device=cpu --set model.path=/models/q --set method.generation.max_new_tokens=7 --set method.sft_epochs=0"
check "no inf lr override at paper scale" hasnt "$out" "train.lr="
check "epsilon ablation: PE-SGD and DP-SGD x 4 eps" [ "$(count "$out" "would run.*/abl/epsilon/")" = 8 ]
check "DP-SGD gets SET" has "$out" "run experiments/pe_sgd/paper/congressional-dp_sgd.yaml --set seed=0 --set privacy.epsilon=8 --out $T/abl/epsilon/congressional-dp_sgd/eps8/s0 --set device=cpu --set model.path=/models/q"
check "DP-SGD runs end with SET" [ "$(count "$out" "congressional-dp_sgd.yaml.*/models/q$")" = 4 ]
check "DP-SGD does not get SET_PE" [ "$(count "$out" "congressional-dp_sgd.yaml.*max_new_tokens")" = 0 ]

# A SET at small scale (another model, say) drops the inf lr selected for the embedded model.
out=$(DPFT="$DPFT" DRY_RUN=1 ONLY=sft SET="--set train.lr=1e-5" bash "$ABL" "$T/abl" "0" 2>&1); rc=$?
check "small + SET dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
check "SET's lr is not overridden at inf" hasnt "$out" "train.lr=2e-3"
out=$(DPFT="$DPFT" DRY_RUN=1 ONLY="placement sizes" bash "$ABL" "$T/abl" 2>&1); rc=$?
check "unknown ONLY name exits 2 (rc $rc)" [ "$rc" = 2 ]

# A GPU spec is refused up front (exit 2, the reason named), not run on the CPU.
out=$(DPFT="$DPFT" DRY_RUN=1 SCALE=paper ONLY=sft bash "$ABL" "$T/abl" "0" 2>&1); rc=$?
check "paper spec without device=cpu exits 2 (rc $rc)" [ "$rc" = 2 ]
check "the refusal says no GPU can be used" has "$out" "no GPU can be used here"
out=$(DPFT="$DPFT" DRY_RUN=1 SCALE=huge bash "$ABL" "$T/abl" 2>&1); rc=$?
check "bad SCALE exits 2 (rc $rc)" [ "$rc" = 2 ]
out=$(DPFT="$DPFT" DRY_RUN=1 DATASET=wiki bash "$ABL" "$T/abl" 2>&1); rc=$?
check "bad DATASET exits 2 (rc $rc)" [ "$rc" = 2 ]
check "bad DATASET names the spec" has "$out" "no spec experiments/pe_sgd/small/wiki-pe_sgd.yaml"

# table1.sh: each method at the lr selected for that epsilon; SGD once per seed at inf.
out=$(bash "$T1" --dpft "$DPFT" --dry-run --seeds 0 --methods "sgd gep pe_sgd" --out "$T/t1" 2>&1); rc=$?
check "table1 dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
check "table1: 5 runs (2 methods x 2 eps + SGD)" [ "$(count "$out" "would run")" = 5 ]
check "PE-SGD eps 1 at 1e-3" has "$out" "pubmed-pe_sgd.yaml --set seed=0 --set privacy.epsilon=1 --out $T/t1/pubmed-pe_sgd/eps1/s0 --set train.lr=1e-3"
check "PE-SGD eps inf at 2e-3" has "$out" "pubmed-pe_sgd.yaml --set seed=0 --set privacy.epsilon=inf --out $T/t1/pubmed-pe_sgd/epsinf/s0 --set train.lr=2e-3"
check "GEP eps 1 at 5e-3" has "$out" "pubmed-gep.yaml --set seed=0 --set privacy.epsilon=1 --out $T/t1/pubmed-gep/eps1/s0 --set train.lr=5e-3"
check "SGD without an epsilon at 2e-3" has "$out" "pubmed-sgd.yaml --set seed=0 --out $T/t1/pubmed-sgd/noeps/s0 --set train.lr=2e-3"
out=$(bash "$T1" --dpft "$DPFT" --dry-run --eps 2 --out "$T/t1" 2>&1); rc=$?
check "table1: an epsilon without selected lrs exits 2 (rc $rc)" [ "$rc" = 2 ]

# lr_select.sh: every method at every lr, evaluated on held-out dev rows, never the test set.
out=$(bash "$LRS" --dpft "$DPFT" --dry-run --methods "dp_sgd pe_sgd" --lrs "1e-3 5e-3" --out "$T/lr" 2>&1); rc=$?
check "lr_select dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
check "lr_select: 2 methods x 2 lrs" [ "$(count "$out" "would run")" = 4 ]
check "lr_select: held-out validation at the lr" has "$out" "pubmed-pe_sgd.yaml --set seed=100 --set privacy.epsilon=1 --out $T/lr/lr5e-3/pubmed-pe_sgd/eps1/s100 --set train.lr=5e-3 --set data.eval.path=../shared/data/pe_sgd_text/pubmed/dev.csv --set data.eval.exclude_train=true --set data.eval.num_samples=300"
check "lr_select: no test set" hasnt "$out" "test.csv"
check "lr_select dry run writes nothing" [ ! -e "$T/lr" ]

# experiments/glue/run.sh: per-task classifiers reheaded from the base encoder; --select sweeps
# the lrs on a validation split of the training file; table runs need a selected lr.
GLUE="$SRC/experiments/glue/run.sh"
"$DPFT" model init --arch roberta --preset tiny --head mlm --tokenizer "$SRC/models/tiny-gpt2" \
  --out "$T/rob" --quiet >/dev/null 2>&1
out=$(BASE="$T/missing" MODELS="$T/gm" bash "$GLUE" --dpft "$DPFT" --dry-run 2>&1); rc=$?
check "glue without the base encoder exits 3 (rc $rc)" [ "$rc" = 3 ]
out=$(BASE="$T/rob" MODELS="$T/gm" bash "$GLUE" --dpft "$DPFT" --dry-run --select --tasks rte \
  --methods "full lora_dp" --lrs "1e-3 2e-3" --out "$T/glr" 2>&1); rc=$?
check "glue --select dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
check "glue --select: (1 + 2 eps) x 2 lrs" [ "$(count "$out" "would run")" = 6 ]
check "glue --select: validation from the training file" has "$out" "rte-lora_dp.yaml --set seed=100 --set privacy.epsilon=1 --out $T/glr/lr2e-3/rte-lora_dp/eps1/s100 --set model.path=$T/gm/rte --set train.lr=2e-3 --set data.eval.path=../shared/data/glue_rte/train.tsv --set data.eval.exclude_train=true"
check "glue --select: no dev file" hasnt "$out" "dev.tsv"
check "glue --select: trains on all but 600 rows" has "$out" "data.train.num_samples=1890"
out=$(BASE="$T/rob" MODELS="$T/gm" bash "$GLUE" --dpft "$DPFT" --dry-run --select --tasks imdb \
  --methods full --lrs 1e-3 --out "$T/glr" 2>&1); rc=$?
check "glue --select imdb dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
check "glue --select imdb: validation inside the training rows" has "$out" "data.train.num_samples=1400 --set data.eval.rows=[0,2000]"
check "glue: the imdb spec keeps its test rows apart" "$DPFT" config validate --no-data \
  "$SRC/experiments/glue/small/imdb-full.yaml" --set data.eval.rows=[0,2000] \
  --set data.eval.exclude_train=true --set data.train.num_samples=1400
check "glue: the task's classifier was made" [ -f "$T/gm/rte/config.json" ]
check "glue: its labels are RTE's" grep -q not_entailment "$T/gm/rte/config.json"
out=$(BASE="$T/rob" MODELS="$T/gm" bash "$GLUE" --dpft "$DPFT" --dry-run --tasks rte --out "$T/g" 2>&1); rc=$?
# The DP-SFT specs are what experiments/glue/dp_sft_specs.py writes, and every one is valid.
mkdir -p "$T/sft"
n=$(python3 "$SRC/experiments/glue/dp_sft_specs.py" --out "$T/sft" | wc -l)
check "dp_sft_specs writes 32 specs ($n)" [ "$n" = 32 ]
sft=()
for f in "$T"/sft/*.yaml; do
  check "$(basename "$f") is committed as written" cmp -s "$f" "$SRC/experiments/glue/small/$(basename "$f")"
  sft+=("$SRC/experiments/glue/small/$(basename "$f")")
done
validate_all "${sft[@]}"
[ -s "$SRC/experiments/glue/selected_lr.tsv" ] && [ "$(wc -l < "$SRC/experiments/glue/selected_lr.tsv")" -gt 1 ] ||
  check "glue: a table run without a selected lr exits 2 (rc $rc)" [ "$rc" = 2 ]
# The public-only control is non-private: once per seed, no epsilon (an sgd spec), at non-private
# Full-tuning's lr (dp_sft_public's stage 1 lr), on the public 10 %.
out=$(BASE="$T/rob" MODELS="$T/gm" bash "$GLUE" --dpft "$DPFT" --dry-run --tasks sst2 \
      --methods public_only --eps "4 1" --seeds "0 1" --out "$T/g" 2>&1); rc=$?
check "glue public_only dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
check "glue public_only: once per seed" [ "$(count "$out" "would run")" = 2 ]
check "glue public_only: no epsilon, Full-tuning's lr" has "$out" "sst2-public_only.yaml --set seed=1 --out $T/g/sst2-public_only/noeps/s1 --set model.path=$T/gm/sst2 --set train.lr=$(awk -F'\t' '$1 == "sst2" && $2 == "full" { print $4 }' "$SRC/experiments/glue/selected_lr.tsv")"
check "glue public_only: trains on dp_sft_public's public rows" grep -q "hash_split: \[0.9, 1\]}" "$SRC/experiments/glue/small/sst2-public_only.yaml"

# The paper-scale GLUE baselines: written by paper_specs.py, committed as written.
n=$(python3 "$SRC/experiments/glue/paper_specs.py" --out "$T/gpaper" | wc -l)
check "paper_specs writes 5 tasks x 4 methods ($n)" [ "$n" = 20 ]
for f in "$T"/gpaper/*.yaml; do
  check "paper $(basename "$f") is committed as written" cmp -s "$f" "$SRC/experiments/glue/paper/$(basename "$f")"
done
check "paper MNLI has delta 1e-6 and the mismatched set" grep -q "delta: 1.0e-6" "$T/gpaper/mnli-full_dp.yaml"
check "paper MNLI scores dev mismatched" grep -q "name: mismatched" "$T/gpaper/mnli-adapter_dp.yaml"

# The paper-scale GPU specs parse and validate (their paths are the user's to fill in).
validate_all "$SRC"/experiments/dp_sft/paper/*.yaml "$SRC"/experiments/denoise/paper/*.yaml \
  "$SRC"/experiments/glue/paper/*.yaml "$SRC"/experiments/ctcl/paper/*.yaml

# experiments/denoise/run.sh: DP-SGD and DP-SGD+Denoise per dataset and seed, every spec valid.
DEN="$SRC/experiments/denoise/run.sh"
validate_all "$SRC"/experiments/denoise/small/*.yaml
printf 'e2e\t5e-3\tx\ndart\t1e-3\ty\n' > "$T/den_lr.tsv"
out=$(SELECTED="$T/den_lr.tsv" bash "$DEN" --dpft "$DPFT" --dry-run --seeds "0 1" --out "$T/den" -- --set eval.nlg.max_sources=5 2>&1); rc=$?
check "denoise dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
check "denoise: 2 datasets x 2 methods x 2 seeds" [ "$(count "$out" "would run")" = 8 ]
check "denoise: the paired spec at eps 5.4 with its dataset's selected lr and the extra --set" has "$out" "run experiments/denoise/small/dart-denoise.yaml --set seed=1 --set privacy.epsilon=5.4 --out $T/den/dart-denoise/eps5.4/s1 --set train.lr=1e-3 --set output.checkpoint_every=50 --set eval.nlg.max_sources=5"
check "denoise: E2E takes E2E's lr" has "$out" "run experiments/denoise/small/e2e-dp_sgd.yaml --set seed=0 --set privacy.epsilon=5.4 --out $T/den/e2e-dp_sgd/eps5.4/s0 --set train.lr=5e-3"
printf 'e2e\t5e-3\tx\n' > "$T/den_lr1.tsv"
out=$(SELECTED="$T/den_lr1.tsv" bash "$DEN" --dpft "$DPFT" --dry-run --datasets dart 2>&1); rc=$?
check "denoise: a dataset without a selected lr exits 2 (rc $rc)" [ "$rc" = 2 ]
check "denoise: ... naming the dataset" has "$out" "no lr selected for dart"
out=$(bash "$DEN" --dpft "$DPFT" --dry-run --select --lrs "1e-3 2e-2" --out "$T/dlr" 2>&1); rc=$?
check "denoise --select dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
check "denoise --select: 2 datasets x 2 lrs" [ "$(count "$out" "would run")" = 4 ]
check "denoise --select: seed 100" [ "$(count "$out" "would run.*--set seed=100 ")" = 4 ]
check "denoise --select: DP-SGD only" [ "$(count "$out" "denoise.yaml")" = 0 ]
check "denoise --select: E2E validates on devset.csv, never the test set, without decoding" has "$out" "run experiments/denoise/small/e2e-dp_sgd.yaml --set seed=100 --set privacy.epsilon=5.4 --out $T/dlr/lr2e-2/e2e-dp_sgd/eps5.4/s100 --set data.eval.path=../shared/data/e2e/devset.csv --set data.eval.exclude_train=true --set data.eval.num_samples=300 --set eval.nlg.at_steps=[] --set train.lr=2e-2"
check "denoise --select: DART validates on held-out dart-train rows" has "$out" "--out $T/dlr/lr1e-3/dart-dp_sgd/eps5.4/s100 --set data.eval.format=dart-train --set data.train.num_samples=4945 --set data.eval.exclude_train=true"
out=$(bash "$DEN" --dpft "$DPFT" --dry-run --datasets wiki 2>&1); rc=$?
check "denoise: an unknown dataset exits 2 (rc $rc)" [ "$rc" = 2 ]

# GLUE (paper 003 Tables 2-3): glue_specs.py writes the small and paper specs as committed; run.sh
# --glue takes each task's reference accuracy from REFERENCE and refuses a task without one.
n=$(python3 "$SRC/experiments/denoise/glue_specs.py" --out "$T/dglue" | wc -l)
check "glue_specs writes 34 specs ($n)" [ "$n" = 34 ]
for f in "$T"/dglue/small/*.yaml "$T"/dglue/paper/*.yaml; do
  sub=$(basename "$(dirname "$f")")
  check "denoise $sub/$(basename "$f") is committed as written" cmp -s "$f" "$SRC/experiments/denoise/$sub/$(basename "$f")"
done
check "small glue: q = 267 / 8,999" grep -q "batch_size: 267" "$T/dglue/small/glue-mnli-denoise.yaml"
check "paper glue: Yu et al.'s batch 2000" grep -q "batch_size: 2000" "$T/dglue/paper/glue-qqp-large-dp_sgd.yaml"
printf 'task\taccuracy\tsource\nsst2\t0.71\ttest\nqnli\t0.55\ttest\n' > "$T/ref.tsv"
out=$(REFERENCE="$T/ref.tsv" bash "$DEN" --glue --dpft "$DPFT" --dry-run --seeds "0 1" --tasks "sst2 qnli" --out "$T/dg" 2>&1); rc=$?
check "denoise --glue dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
check "denoise --glue: 2 tasks x 2 variants x 2 seeds" [ "$(count "$out" "would run")" = 8 ]
check "denoise --glue: eps 6.7, the task's classifier and reference" has "$out" "run experiments/denoise/small/glue-qnli-denoise.yaml --set seed=1 --set privacy.epsilon=6.7 --out $T/dg/glue-qnli-denoise/eps6.7/s1 --set model.path=build/glue/models/qnli --set eval.reference_accuracy=0.55"
out=$(REFERENCE="$T/ref.tsv" bash "$DEN" --glue --dpft "$DPFT" --dry-run --seeds 0 --tasks sst2 --variants "clip_only denoise_k105" --out "$T/dg" 2>&1); rc=$?
check "denoise --glue: clip-only runs non-private, once per seed" has "$out" "glue-sst2-clip_only.yaml --set seed=0 --out $T/dg/glue-sst2-clip_only/noeps/s0"
check "denoise --glue: kappa 1.05 at 6.7" has "$out" "glue-sst2-denoise_k105.yaml --set seed=0 --set privacy.epsilon=6.7"
out=$(REFERENCE="$T/ref.tsv" bash "$DEN" --glue --dpft "$DPFT" --dry-run --tasks mnli 2>&1); rc=$?
check "denoise --glue: a task without a reference accuracy exits 2 (rc $rc)" [ "$rc" = 2 ]
check "denoise --glue: the error names the file" has "$out" "no reference accuracy for mnli in $T/ref.tsv"
out=$(REFERENCE="$T/none.tsv" bash "$DEN" --glue --reference --dpft "$DPFT" --dry-run --seeds 0 --tasks mnli --out "$T/dg" 2>&1); rc=$?
check "denoise --glue --reference needs no reference (rc $rc)" [ "$rc" = 0 ]
check "denoise --glue --reference runs the 20-epoch spec" has "$out" "run experiments/denoise/small/glue-mnli-reference.yaml --set seed=0 --set privacy.epsilon=6.7"
out=$(bash "$DEN" --glue --dpft "$DPFT" --dry-run --tasks cola 2>&1); rc=$?
check "denoise --glue: an unknown task exits 2 (rc $rc)" [ "$rc" = 2 ]

# scripts/pretrain_tiny.sh FROM=: continues only a model whose every stage lists training text
# the spec reads (the check runs before any training; --dry-run stops the run itself).
if [ -d "$SRC/../shared/data/lm_text_misc" ]; then
  PT="$SRC/scripts/pretrain_tiny.sh"
  mkdir -p "$T/from"
  cp "$SRC"/models/tiny-gpt2/* "$T/from/"  # the whole model: the dry run's pre-flight reads it
  printf '# m\n\nMade by a\n' > "$T/from/PROVENANCE.md"
  out=$(cd "$SRC" && FROM="$T/from" DPFT="$DPFT" OUT="$T/pt" bash "$PT" --dry-run 2>&1); rc=$?
  check "pretrain FROM without its training text exits 2 (rc $rc)" [ "$rc" = 2 ]
  check "pretrain FROM: says why" has "$out" "does not list the training text"
  printf '# m\n\nMade by a\n\nTraining text: `../shared/data/glue_sst2/train.tsv`, `../shared/data/e2e/trainset.csv`\n' > "$T/from/PROVENANCE.md"
  out=$(cd "$SRC" && FROM="$T/from" DPFT="$DPFT" OUT="$T/pt" bash "$PT" --dry-run 2>&1); rc=$?
  check "pretrain FROM that saw E2E exits 2 (rc $rc)" [ "$rc" = 2 ]
  check "pretrain FROM: names the file" has "$out" "was trained on ../shared/data/e2e/trainset.csv"
  printf '# m\n\nMade by a\n\nTraining text: `../shared/data/glue_sst2/train.tsv`\n\n## Earlier\n\n### m\nMade by b\n\nTraining text: `../shared/data/lm_text_misc/wikitext-2_valid.txt`\n' > "$T/from/PROVENANCE.md"
  out=$(cd "$SRC" && FROM="$T/from" DPFT="$DPFT" OUT="$T/pt" bash "$PT" --dry-run 2>&1); rc=$?
  check "pretrain FROM with public text only gets to the run (rc $rc: the dry run exports nothing)" [ "$rc" = 4 ]
  check "pretrain: nothing exported by a dry run" [ -z "$(cd "$SRC" && git status --porcelain models/tiny-gpt2)" ]
  out=$(cd "$SRC" && OBJECTIVE=denoise DPFT="$DPFT" OUT="$T/pt" bash "$PT" --dry-run 2>&1); rc=$?
  check "pretrain OBJECTIVE=denoise of gpt2 exits 2 (rc $rc)" [ "$rc" = 2 ]
  check "pretrain OBJECTIVE=denoise: says it is a bart stage" has "$out" "OBJECTIVE=denoise is a stage of MODEL=bart"
  out=$(cd "$SRC" && OBJECTIVE=copy MODEL=bart DPFT="$DPFT" OUT="$T/pt" bash "$PT" --dry-run 2>&1); rc=$?
  check "pretrain: an unknown OBJECTIVE exits 2 (rc $rc)" [ "$rc" = 2 ]
else
  echo "SKIP pretrain FROM checks: ../shared/data is missing"
fi

# scripts/condition_check.sh: its held-out rows are the spec's hash split (same tokens and loss
# as dpft's own evaluation of [0.98, 1)); the shuffle permutes conditions; bad input is refused.
CC="$SRC/scripts/condition_check.sh"
python3 - "$T/cc_same.csv" "$T/cc_own.csv" <<'PY'
import csv, random, sys
r = random.Random(1)
words = "alpha beta gamma delta river stone cloud paper music garden window engine".split()
for path, same in ((sys.argv[1], True), (sys.argv[2], False)):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["condition", "text"])
        for i in range(600):
            w.writerow(["Keywords: stone" if same else f"Keywords: {words[i % 12]} {i}",
                        " ".join(r.choice(words) for _ in range(12)) + f" {i}"])
PY
"$DPFT" --quiet model init --arch bart --preset tiny --tokenizer "$SRC/models/tiny-bart" --out "$T/ccm" --seed 3 >/dev/null 2>&1
cc_loss() { sed -n "s/.*[ ,]$2 \([0-9][0-9.]*\).*/\1/p" <<<"$1"; }  # own | shuffled | empty
out=$(DPFT="$DPFT" bash "$CC" "$T/ccm" "$T/cc_own.csv" 32 1000 2>&1); rc=$?
check "condition_check exits 0 (rc $rc)" [ "$rc" = 0 ]
printf '%s\n' "name: cc" "model: {path: $T/ccm, peft: {kind: full, targets: [all]}}" "data:" \
  "  task: seq2seq" \
  "  train: {path: $T/cc_own.csv, prompt_column: condition, text_column: text, hash_split: [0, 0.98]}" \
  "  eval: {path: $T/cc_own.csv, prompt_column: condition, text_column: text, hash_split: [0.98, 1]}" \
  "  max_length: 32" "privacy: {epsilon: .inf}" "train: {steps: 1, batch_size: 1, lr: 1.0e-12}" \
  "method: {name: sgd}" > "$T/cc_spec.yaml"
ccrun=$("$DPFT" --quiet run "$T/cc_spec.yaml" --out "$T/ccr" --threads 1 2>/dev/null | tail -n 1)
ref=$(python3 -c "
import json, sys
m = json.load(open(sys.argv[1] + '/metrics.json'))
e = m.get('eval') or m['non_private']['eval']
print(m['train']['dataset_size'], e['base']['tokens'], '%.6f' % e['base']['loss'])" "$ccrun" 2>/dev/null)
read -r cc_train cc_tokens cc_ref <<<"$ref"
check "condition_check: the held-out pairs are the spec's eval split ($ref)" \
  has "$out" "($((600 - ${cc_train:-0})) held-out pairs, ${cc_tokens:-x} target tokens)"
check "condition_check: own loss = dpft's evaluation of the split (${cc_ref:-none})" \
  [ "$(cc_loss "$out" own)" = "${cc_ref:-x}" ]
check "condition_check: shuffled conditions change a random model's loss" \
  [ -n "$(cc_loss "$out" shuffled)" -a "$(cc_loss "$out" own)" != "$(cc_loss "$out" shuffled)" ]
check "condition_check: empty conditions change it" \
  [ -n "$(cc_loss "$out" empty)" -a "$(cc_loss "$out" own)" != "$(cc_loss "$out" empty)" ]
out=$(DPFT="$DPFT" bash "$CC" "$T/ccm" "$T/cc_same.csv" 32 1000 2>&1)
check "condition_check: one condition for all: shuffled = own" \
  [ -n "$(cc_loss "$out" own)" -a "$(cc_loss "$out" own)" = "$(cc_loss "$out" shuffled)" ]
printf 'prompt,text\na,b\n' > "$T/cc_bad.csv"
out=$(DPFT="$DPFT" bash "$CC" "$T/ccm" "$T/cc_bad.csv" 2>&1); rc=$?
check "condition_check: pairs without a condition column exit 2 (rc $rc)" [ "$rc" = 2 ]
check "condition_check: says which column is missing" has "$out" "has no column condition (its header: prompt, text)"
out=$(DPFT="$DPFT" bash "$CC" "$T/ccm" "$T/cc_same.csv" 0 2>&1); rc=$?
check "condition_check: MAX_LENGTH 0 exits 2 (rc $rc)" [ "$rc" = 2 ]
out=$(DPFT="$DPFT" bash "$CC" "$T/none" "$T/cc_same.csv" 2>&1); rc=$?
check "condition_check: a missing model exits 2 (rc $rc)" [ "$rc" = 2 ]

# scripts/pretrain_tiny.sh RESUME= of a finished run exports it as it is (no training), with the
# run's settings in PROVENANCE.md; RESUME= of anything else is refused.
if [ -d "$SRC/../shared/data/lm_text_misc" ] && [ -n "$ccrun" ]; then
  out=$(cd "$SRC" && RESUME="$ccrun" DEST="$T/ccx" DPFT="$DPFT" OUT="$T/pt" bash scripts/pretrain_tiny.sh 2>&1); rc=$?
  check "pretrain RESUME of a finished run exports it (rc $rc)" [ "$rc" = 0 -a -f "$T/ccx/model.safetensors" ]
  check "... the very weights" cmp -s "$ccrun/model/model.safetensors" "$T/ccx/model.safetensors"
  check "... PROVENANCE.md gives the run's settings" has "$(cat "$T/ccx/PROVENANCE.md" 2>&1)" \
    "settings (the run's config.resolved.yaml): steps 1, batch_size 1, lr 1e-12"
  out=$(cd "$SRC" && RESUME="$T" DEST="$T/ccy" DPFT="$DPFT" OUT="$T/pt" bash scripts/pretrain_tiny.sh 2>&1); rc=$?
  check "pretrain RESUME of a non-run exits 2 (rc $rc)" [ "$rc" = 2 ]
  out=$(cd "$SRC" && RESUME="$ccrun" FROM="$T/from" DEST="$T/ccy" DPFT="$DPFT" OUT="$T/pt" bash scripts/pretrain_tiny.sh 2>&1); rc=$?
  check "pretrain RESUME with a FROM the run did not start from exits 2 (rc $rc)" [ "$rc" = 2 ]
  check "... saying so" has "$out" "whose weights are not FROM=$T/from's"
  # RESUME with the FROM the run started from: PROVENANCE.md keeps FROM's stages below its own,
  # each with its training text, so a later FROM checks them all (this run's text is no spec's).
  mkdir -p "$T/ccfrom" && cp "$T/ccm"/* "$T/ccfrom/"
  printf '# m\n\nMade by stage one\n\nTraining text: `../shared/data/lm_text_misc/wikitext-2_valid.txt`\n' > "$T/ccfrom/PROVENANCE.md"
  out=$(cd "$SRC" && RESUME="$ccrun" FROM="$T/ccfrom" DEST="$T/ccz" DPFT="$DPFT" OUT="$T/pt" bash scripts/pretrain_tiny.sh 2>&1); rc=$?
  check "pretrain RESUME with the FROM it started from exports (rc $rc)" [ "$rc" = 0 -a -f "$T/ccz/model.safetensors" ]
  check "... PROVENANCE.md keeps the earlier stage" has "$(sed -n '/^## Earlier stages/,$p' "$T/ccz/PROVENANCE.md" 2>&1)" "Made by stage one"
  out=$(cd "$SRC" && FROM="$T/ccz" DPFT="$DPFT" OUT="$T/pt" bash scripts/pretrain_tiny.sh --dry-run 2>&1); rc=$?
  check "... and a later FROM checks its every stage (rc $rc)" [ "$rc" = 2 ]
  check "... down to this run's text" has "$out" "was trained on $T/cc_own.csv, which"
fi

# scripts/pretrain_tiny.sh MODEL=bart: the pairs (minutes of embedding) are made once and reused
# while their inputs are unchanged; a stale stamp or REBUILD_PAIRS=1 remakes them. A stand-in
# for `dpft topics pairs` logs its calls and writes a small pairs file; the rest is dpft.
if [ -d "$SRC/../shared/data/lm_text_misc" ]; then
  printf '%s\n' '#!/usr/bin/env bash' \
    'if [ "$1 $2" = "topics pairs" ]; then' \
    '  echo called >> "'"$T"'/pairs_calls"; o=""; while [ $# -gt 0 ]; do [ "$1" = --out ] && o=$2; shift; done' \
    '  printf "condition,text\na b,c d e\n" > "$o"; exit 0; fi' \
    'exec "'"$DPFT"'" "$@"' > "$T/fakedpft" && chmod +x "$T/fakedpft"
  pcalls() { wc -l < "$T/pairs_calls" 2>/dev/null | tr -d ' ' || echo 0; }
  ptb() { (cd "$SRC" && MODEL=bart DPFT="$T/fakedpft" OUT="$T/ptb" DEST="$T/ptbm" "$@" bash scripts/pretrain_tiny.sh --dry-run 2>&1); }
  out=$(ptb env); rc=$?
  check "pretrain bart: first run makes the pairs (calls $(pcalls), rc $rc)" [ "$(pcalls)" = 1 -a -s "$T/ptb/bart-pairs.csv.sources" ]
  out=$(ptb env)
  check "pretrain bart: same inputs reuse them (calls $(pcalls))" [ "$(pcalls)" = 1 ]
  check "... and say so" has "$out" "reusing $T/ptb/bart-pairs.csv"
  out=$(ptb env REBUILD_PAIRS=1)
  check "pretrain bart: REBUILD_PAIRS=1 remakes them (calls $(pcalls))" [ "$(pcalls)" = 2 ]
  echo stale > "$T/ptb/bart-pairs.csv.sources"
  out=$(ptb env)
  check "pretrain bart: a stale stamp remakes them (calls $(pcalls))" [ "$(pcalls)" = 3 ]
  check "pretrain bart: nothing exported by a dry run" [ ! -e "$T/ptbm" ]
fi

# experiments/ctcl/run.sh: the rows of each table, swept and scored (dry run: nothing runs).
CT="$SRC/experiments/ctcl/run.sh"
if [ -d "$SRC/../shared/data/yelp_augpe" ]; then
  # The rows that train run at their selected lr: none selected is an error naming the row.
  printf 'dataset\trow\tlr\n' >"$T/none.tsv"
  out=$(cd "$SRC" && SELECTED="$T/none.tsv" bash "$CT" --dry-run --seeds 0 --eps 4 --out "$T/ctcl" --dpft "$DPFT" 2>&1); rc=$?
  check "ctcl without selected lrs exits 2 (rc $rc)" [ "$rc" = 2 ]
  check "ctcl names the missing lr" has "$out" "no lr selected for pubmed ctcl"
  sel="$T/selected.tsv"
  printf 'dataset\trow\tlr\n' >"$sel"
  for r in ctcl bart_vanilla bart_keywords gpt2_vanilla downstream_dpft; do printf 'pubmed\t%s\t0.00123\n' "$r" >>"$sel"; done
  printf 'yelp\tctcl\t0.00456\nyelp\tdownstream_dpft\t0.00456\n' >>"$sel"
  # The scorer's own lr: without it nothing is scored.
  out=$(cd "$SRC" && SELECTED="$sel" bash "$CT" --dry-run --seeds 0 --eps 4 --out "$T/ctcl" --dpft "$DPFT" 2>&1); rc=$?
  check "ctcl without the scorer's lr exits 2 (rc $rc)" [ "$rc" = 2 ]
  check "ctcl names the scorer's missing lr" has "$out" "no lr selected for pubmed scorer"
  printf 'pubmed\tscorer\t0.00777\nyelp\tscorer\t0.00888\n' >>"$sel"
  export SELECTED="$sel"
  out=$(cd "$SRC" && bash "$CT" --dry-run --seeds 0 --eps 4 --out "$T/ctcl" --dpft "$DPFT" 2>&1); rc=$?
  check "ctcl pubmed dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
  check "ctcl pubmed: 7 rows" [ "$(count "$out" "would run: $DPFT run experiments/ctcl/small/pubmed-")" = 7 ]
  if [ -f "$SRC/build/ctcl/models/causal-bert-mini/config.json" ]; then  # made by an earlier run here
    check "ctcl pubmed: the downstream LM, already made, is kept" hasnt "$out" "model init --arch bert"
  else
    check "ctcl pubmed: the downstream LM is made" has "$out" "model init --arch bert --preset mini --head causal"
  fi
  check "ctcl pubmed: 5 rows at the selected lr" [ "$(count "$out" "train.lr=0.00123")" = 5 ]
  # --select: the rows that train, per lr, on all but the last 300 private rows, validated on them.
  out=$(cd "$SRC" && bash "$CT" --select --dry-run --lrs "1e-4 1e-3" --out "$T/ctcl_lr" --dpft "$DPFT" 2>&1); rc=$?
  check "ctcl --select dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
  check "ctcl --select: 5 rows x 2 lrs" [ "$(count "$out" "would run: $DPFT run experiments/ctcl/small/pubmed-")" = 10 ]
  check "ctcl --select: seed 100 at eps 4" [ "$(count "$out" "seed=100 --set privacy.epsilon=4 ")" = 10 ]
  check "ctcl --select: training rows" has "$out" "data.train.rows=[0, 1135]"
  check "ctcl --select: validation rows" has "$out" "data.eval.rows=[1135, 1435]"
  check "ctcl --select: per-lr directories" has "$out" "$T/ctcl_lr/lr1e-4/pubmed-ctcl"
  check "ctcl --select: no aug_pe" hasnt "$out" "pubmed-aug_pe"
  out=$(cd "$SRC" && bash "$CT" --select --rows "ctcl pe" --dry-run --out "$T/ctcl_lr" --dpft "$DPFT" 2>&1); rc=$?
  check "ctcl --select of pe exits 2 (rc $rc)" [ "$rc" = 2 ]
  out=$(cd "$SRC" && bash "$CT" --dataset yelp --dry-run --seeds "0 1" --eps "inf 1" --out "$T/ctcl" --dpft "$DPFT" 2>&1); rc=$?
  check "ctcl yelp dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
  check "ctcl yelp: 4 rows x 2 eps x 2 seeds" [ "$(count "$out" "would run: $DPFT run experiments/ctcl/small/yelp-")" = 16 ]
  if [ -f "$SRC/build/ctcl/models/yelp-stars-classifier/config.json" ]; then
    check "ctcl yelp: the 5-way classifier, already made, is kept" hasnt "$out" "model rehead"
  else
    check "ctcl yelp: the 5-way classifier is made" has "$out" "model rehead --from models/tiny-roberta --head classification"
  fi
  # Fig. 3: Aug-PE once more per size other than its spec's 200 (which the table's runs are).
  out=$(cd "$SRC" && bash "$CT" --rows "ctcl aug_pe" --scaling "50 200 400" --dry-run --seeds 0 --eps 4 --out "$T/ctcl" --dpft "$DPFT" 2>&1); rc=$?
  check "ctcl scaling dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
  check "ctcl scaling: aug_pe at 50 and 400" [ "$(count "$out" "--set method.num_synthetic=")" = 2 ]
  check "ctcl scaling: the size 50 in its own directory" has "$out" "$T/ctcl/scaling/n50/pubmed-aug_pe"
  check "ctcl dry run writes nothing" [ ! -e "$T/ctcl" -a ! -e "$T/ctcl_lr" ]
  # Fig. 3 scores the subsets of the ctcl runs of --eps and --seeds only (each trains a model).
  for c in eps4/s0 eps1/s0 eps4/s1; do
    d="$T/ctcls/pubmed-ctcl/$c/ctcl-pubmed-ctcl/20260101-000000-s${c#*/s}"
    mkdir -p "$d/synthetic" && touch "$d/synthetic/synthetic_n50.jsonl"
    printf '{"status":"ok","synthetic_eval":{"main":{}}}\n' > "$d/metrics.json"
  done
  out=$(cd "$SRC" && bash "$CT" --rows ctcl --scaling 50 --dry-run --seeds 0 --eps 4 --out "$T/ctcls" --dpft "$DPFT" 2>&1); rc=$?
  check "ctcl scaling of finished runs exits 0 (rc $rc)" [ "$rc" = 0 ]
  check "ctcl scaling: the eps 4 seed 0 run's subset is scored" has "$out" "eval-synthetic --run $T/ctcls/pubmed-ctcl/eps4/s0/ctcl-pubmed-ctcl/20260101-000000-s0 --name n50 --subset 50"
  check "ctcl scaling: no other run's" [ "$(count "$out" "--subset 50")" = 1 ]
  check "ctcl scores at the scorer's selected lr" has "$out" "--lm-lr 0.00777"
  # A ctcl run already kept as a run file has lost its subsets: a size it holds no score for is
  # an error naming it, never silently a missing point.
  mkdir -p "$T/ctclk/pubmed-ctcl/eps4"
  printf '{"metrics":{"synthetic_eval":{"main":{},"n50":{}}}}\n' > "$T/ctclk/pubmed-ctcl/eps4/s0.run.json"
  out=$(cd "$SRC" && bash "$CT" --rows ctcl --scaling "50 100" --dry-run --seeds 0 --eps 4 --out "$T/ctclk" --dpft "$DPFT" 2>&1); rc=$?
  check "ctcl scaling of a kept run without its subset's score exits 1 (rc $rc)" [ "$rc" = 1 ]
  check "ctcl scaling: names the lost size" has "$out" "s0.run.json was kept (experiments/keep_runs.sh) before its subset of 100 was scored"
  check "ctcl scaling: not the scored size" hasnt "$out" "subset of 50 was scored"
  # The table's scoring: the runs of --eps and --seeds only, never one that another call scores.
  for c in eps4/s0 eps1/s0 eps4/s1; do
    d="$T/ctclm/pubmed-aug_pe/$c/ctcl-pubmed-aug-pe/20260101-000000-s${c#*/s}"
    mkdir -p "$d/synthetic" && printf '{"status":"ok"}\n' > "$d/metrics.json"
  done
  m4="$T/ctclm/pubmed-aug_pe/eps4/s0/ctcl-pubmed-aug-pe/20260101-000000-s0"
  out=$(cd "$SRC" && bash "$CT" --rows aug_pe --dry-run --seeds 0 --eps 4 --out "$T/ctclm" --dpft "$DPFT" 2>&1); rc=$?
  check "ctcl scores the runs of --eps and --seeds only (rc $rc)" [ "$(count "$out" "eval-synthetic --run $T/ctclm/")" = 1 ]
  check "ctcl scores the eps 4 seed 0 run" has "$out" "eval-synthetic --run $m4 "
  printf '#!/bin/sh\n[ "$1" = eval-synthetic ] && { echo "$@" >> "%s"; exit 0; }\nexec "%s" "$@"\n' "$T/stub.log" "$DPFT" > "$T/stub"
  chmod +x "$T/stub"
  mkdir "$m4/.scoring" && echo $$ > "$m4/.scoring/pid"  # this shell: alive
  out=$(cd "$SRC" && bash "$CT" --rows aug_pe --seeds 0 --eps "4 1" --out "$T/ctclm" --dpft "$T/stub" 2>&1); rc=$?
  check "ctcl leaves a run another live process scores" has "$out" "is being scored by process $$"
  check "ctcl scores the others (rc $rc)" [ "$(grep -c "eval-synthetic --run $T/ctclm/pubmed-aug_pe/eps1/s0/" "$T/stub.log")" = 1 ]
  check "ctcl: not the locked one" [ "$(grep -c "eval-synthetic --run $m4 " "$T/stub.log")" = 0 ]
  check "ctcl: its own lock removed after scoring" [ ! -e "$T/ctclm/pubmed-aug_pe/eps1/s0/ctcl-pubmed-aug-pe/20260101-000000-s0/.scoring" ]
  sleep 0 & dead=$!; wait $dead  # a pid that has exited
  echo $dead > "$m4/.scoring/pid"
  out=$(cd "$SRC" && bash "$CT" --rows aug_pe --seeds 0 --eps 4 --out "$T/ctclm" --dpft "$T/stub" 2>&1); rc=$?
  check "ctcl takes over a lock whose process is gone (rc $rc)" [ "$(grep -c "eval-synthetic --run $m4 " "$T/stub.log")" = 1 ]
  check "ctcl: and removes it" [ ! -e "$m4/.scoring" ]
  # --select-scorer: the scorer alone on real private rows, one lr at a time, validated on the last 300.
  out=$(cd "$SRC" && bash "$CT" --select-scorer --lrs "1e-4 1e-3" --dry-run --out "$T/ctcl_sc" --dpft "$DPFT" 2>&1); rc=$?
  check "ctcl --select-scorer dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
  check "ctcl --select-scorer: 2 lrs" [ "$(count "$out" "would run: $DPFT eval-synthetic --synthetic $T/ctcl_sc/scorer/pubmed-train.csv --real $T/ctcl_sc/scorer/pubmed-val.csv")" = 2 ]
  check "ctcl --select-scorer: the LM at each lr" has "$out" "--lm-lr 1e-4"
  check "ctcl --select-scorer: no method runs" hasnt "$out" "$DPFT run "
  out=$(cd "$SRC" && bash "$CT" --select-scorer --dataset yelp --lrs 1e-4 --dry-run --out "$T/ctcl_sc" --dpft "$DPFT" 2>&1); rc=$?
  check "ctcl --select-scorer yelp: the classifier at the lr (rc $rc)" has "$out" "--label-column label2 --clf-max-length 64 --clf-lr 1e-4"
  out=$(cd "$SRC" && bash "$CT" --select --select-scorer --dry-run 2>&1); rc=$?
  check "ctcl --select with --select-scorer exits 2 (rc $rc)" [ "$rc" = 2 ]
  # Not dry (with a stand-in dpft): the split is the private rows [0, 1135) and [1135, 1435).
  out=$(cd "$SRC" && bash "$CT" --select-scorer --lrs 1e-4 --out "$T/ctcl_sc" --dpft true 2>&1); rc=$?
  check "ctcl --select-scorer: a missing result fails (rc $rc)" [ "$rc" = 1 ]
  check "ctcl --select-scorer: says which lr is missing" has "$out" "lr 1e-4: missing"
  split=$(python3 -c 'import csv,sys
r = lambda p: list(csv.DictReader(open(p, newline="")))
a, b, dev = r(sys.argv[1]), r(sys.argv[2]), r(sys.argv[3])
print(len(a), len(b), a + b == dev)' "$T/ctcl_sc/scorer/pubmed-train.csv" "$T/ctcl_sc/scorer/pubmed-val.csv" "$SRC/../shared/data/pe_sgd_text/pubmed/dev.csv")
  check "ctcl --select-scorer: split 1135 + 300 of dev, in order ($split)" [ "$split" = "1135 300 True" ]
  out=$(cd "$SRC" && bash "$CT" --scaling "50 lots" --dry-run 2>&1); rc=$?
  check "ctcl bad --scaling exits 2 (rc $rc)" [ "$rc" = 2 ]
  out=$(cd "$SRC" && bash "$CT" --dataset imdb --dry-run 2>&1); rc=$?
  check "ctcl unknown dataset exits 2 (rc $rc)" [ "$rc" = 2 ]
  out=$(cd "$SRC" && bash "$CT" --rows "ctcl nope" --dry-run 2>&1); rc=$?
  check "ctcl unknown row exits 2 (rc $rc)" [ "$rc" = 2 ]
  unset SELECTED
else
  echo "SKIP ctcl run.sh checks: ../shared/data is missing"
fi

finish "experiments scripts"
