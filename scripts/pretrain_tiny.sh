#!/usr/bin/env bash
# Rebuild a shipped base model from scratch (no pretrained weights can be downloaded here):
#   MODEL=gpt2 (default)  models/tiny-gpt2, the embedded default: a random-init GPT-2 `mini`
#                         (d 128, 4 layers, GPT-2 tokenizer), next-token pretraining
#                         (experiments/pretrain/tiny_gpt2.yaml)
#   MODEL=roberta         models/tiny-roberta: a random-init RoBERTa `mini` with a masked-LM
#                         head (RoBERTa BPE tokenizer), masked-LM pretraining
#                         (experiments/pretrain/tiny_roberta.yaml)
#   MODEL=bart            models/tiny-bart, CTCL's generator: a random-init BART `mini`
#                         (RoBERTa BPE tokenizer) trained on (condition -> document) pairs
#                         (experiments/pretrain/tiny_bart.yaml) that `dpft topics pairs` makes
#                         with the public topic model models/ctcl-topics (built here with
#                         `dpft topics build` on the same public text when it is missing)
#   MODEL=bart-uncond     the same BART trained on the same documents with every condition
#                         empty (`topics pairs --empty-condition`; not shipped: Table 5's rows
#                         without condition pretraining start from models/tiny-bart-base)
#   OBJECTIVE=denoise     (MODEL=bart) a stage of BART's text infilling on the same documents
#                         (experiments/pretrain/tiny_bart_denoise.yaml: the source is the
#                         document with 30 % of it hidden in spans), so the model learns to read
#                         its source; condition -> document stages (the default
#                         OBJECTIVE=condition) follow with FROM=models/tiny-bart
# Both train with method sgd on public text from ../shared/data that no experiment on the model
# uses as private or evaluation data, and are exported in fp16 with their tokenizer and a
# PROVENANCE.md (steps, time, held-out curve). Run it with a copy of the binary (DPFT=/tmp/dpft)
# if you rebuild meanwhile: relinking build/dpft kills a running process.
# Long runs span sessions: the run checkpoints every 50 steps; after an interruption,
# RESUME=RUN_DIR continues it (dpft run --resume) and exports when it finishes (a run that has
# finished, e.g. one started by hand with the spec, is exported as it is). Where the
# checkpoint may not survive (a new machine each session), train in stages instead:
# FROM=models/tiny-gpt2 starts a new run from that exported model (fresh optimizer state and
# schedule; --set train.steps=N sizes the stage to the time at hand) and the new PROVENANCE.md
# keeps the earlier stages' record below its own. FROM must show, stage by stage, that it saw
# only files the spec reads (its PROVENANCE.md's "Training text" lines); the first stage starts
# from a random init.
# Env: MODEL, OBJECTIVE (bart: condition | denoise), DPFT (default build/dpft), OUT (default
# build/pretrain), RESUME (a run directory; with the FROM its stage started from, so that
# PROVENANCE.md keeps the earlier stages), FROM (an exported model to continue from), DEST
# (where the model goes; default models/tiny-$MODEL), REBUILD_PAIRS (bart: remake the pairs
# even when $OUT holds current ones);
# extra args go to `dpft run` (e.g. --set train.steps=100 for a short trial).
set -euo pipefail
cd "$(dirname "$0")/.."
DPFT=${DPFT:-build/dpft}
OUT=${OUT:-build/pretrain}
mkdir -p "$OUT"
MODEL=${MODEL:-gpt2}
case "$MODEL" in
  gpt2) init=(--arch gpt2 --preset mini --tokenizer ../shared/data/gpt2_tokenizer)
        init_dir="$OUT/init" ;;
  roberta) init=(--arch roberta --preset mini --head mlm --tokenizer ../shared/data/roberta_tokenizer)
           init_dir="$OUT/roberta-init" ;;
  bart | bart-uncond) init=(--arch bart --preset mini --tokenizer ../shared/data/roberta_tokenizer)
        init_dir="$OUT/$MODEL-init" ;;
  *) echo "pretrain_tiny: MODEL=$MODEL: use gpt2, roberta, bart or bart-uncond" >&2; exit 2 ;;
esac
# CTCL's generator: its public corpora, each with its document type (the condition's first line).
bart_corpora=(../shared/data/lm_text_misc/wikitext-2_valid.txt ../shared/data/imdb_subset/imdb_2499_clean.csv
              ../shared/data/glue_samples/qnli/train.json ../shared/data/glue_samples/mnli/train.json
              ../shared/data/glue_rte/train.tsv ../shared/data/e2e/devset.csv)
bart_columns=(text review text_b text_a sentence1 ref)
bart_types=("Wikipedia article" "Movie review" "Encyclopedia sentence" "Passage" "News"
            "Restaurant description")
spec=experiments/pretrain/tiny_${MODEL%-uncond}.yaml   # bart-uncond trains with bart's spec
OBJECTIVE=${OBJECTIVE:-condition}
case "$OBJECTIVE" in
  condition) ;;
  denoise) [ "$MODEL" = bart ] || { echo "pretrain_tiny: OBJECTIVE=denoise is a stage of MODEL=bart" >&2; exit 2; }
           spec=experiments/pretrain/tiny_bart_denoise.yaml ;;
  *) echo "pretrain_tiny: OBJECTIVE=$OBJECTIVE: use condition or denoise" >&2; exit 2 ;;
esac
dest=${DEST:-models/tiny-$MODEL}
bart=0; [[ "$MODEL" == bart* ]] && bart=1
[ -d ../shared/data/lm_text_misc ] || { echo "pretrain_tiny: ../shared/data is missing" >&2; exit 3; }
earlier=""
if [ -n "${FROM:-}" ]; then
  [ -f "$FROM/config.json" ] || { echo "pretrain_tiny: FROM=$FROM holds no model" >&2; exit 2; }
  if [ -n "${RESUME:-}" ]; then  # resuming a stage that started from FROM: FROM is its record
    base=$(sed -n 's/^  path: //p' "$RESUME/config.resolved.yaml" 2>/dev/null | head -n 1)
    if [ -f "$base/model.safetensors" ] && ! cmp -s "$base/model.safetensors" "$FROM/model.safetensors"; then
      echo "pretrain_tiny: RESUME=$RESUME started from $base, whose weights are not FROM=$FROM's" >&2; exit 2
    fi
  fi
  # A stage may only continue a model that saw nothing but this spec's public text: every stage
  # in $FROM's PROVENANCE.md must list its training files ("Training text ..."), each one the
  # spec reads (a model that saw an experiment's private data must not become a base model).
  if [ "$bart" = 1 ]; then  # the spec reads the pairs; they are made from these files
    allowed=$(printf '%s\n' "${bart_corpora[@]}" | sort -u)
  else
    allowed=$("$DPFT" config dump "$spec" | grep -o 'path: [^,}]*' | sed 's/path: //' | sort -u)
  fi
  stages=$(grep -c '^\(#* *\)\?Made by' "$FROM/PROVENANCE.md" || true)
  listed=$(grep -c '^Training text' "$FROM/PROVENANCE.md" || true)
  [ "$stages" -ge 1 ] && [ "$stages" = "$listed" ] || {
    echo "pretrain_tiny: $FROM/PROVENANCE.md does not list the training text of each of its $stages stage(s), so nothing shows that $FROM saw only $spec's public text; train from a random init (leave FROM unset)" >&2
    exit 2
  }
  for f in $(grep '^Training text' "$FROM/PROVENANCE.md" | grep -o '`[^`]*`' | tr -d '`' | sort -u); do
    grep -qxF "$f" <<<"$allowed" || {
      echo "pretrain_tiny: $FROM was trained on $f, which $spec does not read (an experiment's private or evaluation data?); train from a random init (leave FROM unset)" >&2
      exit 2
    }
  done
  earlier=$(mktemp -d)
  cp -r "$FROM/." "$earlier"   # $FROM may be $dest, replaced below
fi
if [ "$bart" = 1 ] && [ -z "${RESUME:-}" ]; then
  # The public topic model (shipped in models/ctcl-topics; k-means over the corpora's
  # tiny-roberta embeddings) and the pairs the spec trains on.
  if [ ! -f models/ctcl-topics/topic_model.safetensors ]; then
    rm -rf "$OUT/ctcl-topics"
    "$DPFT" topics build --corpus "${bart_corpora[@]}" --column "${bart_columns[@]}" \
      --min-words 12 --max-length 128 --model models/tiny-roberta --topics 100 --redo 2 \
      --out "$OUT/ctcl-topics"
    rm -rf models/ctcl-topics && cp -r "$OUT/ctcl-topics" models/ctcl-topics
    {
      echo "# models/ctcl-topics: how it was made"
      echo
      echo "CTCL's universal topic model (docs/ctcl.md), built by \`MODEL=bart bash scripts/pretrain_tiny.sh\`:"
      echo "\`dpft topics build --min-words 12 --max-length 128 --model models/tiny-roberta --topics 100 --redo 2\`"
      echo "over public text only (PubMed, Yelp and Chatbot Arena, CTCL's private and evaluation sets, stay out)."
      echo
      echo "Training text: $(printf '`%s`, ' "${bart_corpora[@]}" | sed 's/, $//')"
    } > models/ctcl-topics/PROVENANCE.md
  fi
  cond=(--doc-type "${bart_types[@]}"); [ "$MODEL" = bart ] || cond=(--empty-condition)
  # The pairs depend only on the topic model and the corpora (embedding them takes minutes): a
  # later stage reuses those of an earlier one while the inputs' contents are the same.
  pairs="$OUT/$MODEL-pairs.csv"
  stamp=$( (sha256sum models/ctcl-topics/topic_model.safetensors models/tiny-roberta/model.safetensors "${bart_corpora[@]}"; echo "${cond[*]}") | sha256sum | cut -d' ' -f1)
  if [ -n "${REBUILD_PAIRS:-}" ] || [ ! -s "$pairs" ] || [ "$(cat "$pairs.sources" 2>/dev/null)" != "$stamp" ]; then
    "$DPFT" topics pairs --topics models/ctcl-topics --corpus "${bart_corpora[@]}" \
      --column "${bart_columns[@]}" "${cond[@]}" --min-words 12 --out "${pairs%.csv}.partial.csv"
    mv "${pairs%.csv}.partial.csv" "$pairs"
    echo "$stamp" > "$pairs.sources"
  else
    echo "pretrain_tiny: reusing $pairs (made from the same topic model and corpora; REBUILD_PAIRS=1 remakes it)"
  fi
fi
pairs_set=()
[ "$bart" = 0 ] || pairs_set=(--set "data.train.path=$OUT/$MODEL-pairs.csv" --set "data.eval.path=$OUT/$MODEL-pairs.csv")
if [ -n "${RESUME:-}" ]; then
  [ -f "$RESUME/privacy_lock.json" ] || { echo "pretrain_tiny: RESUME=$RESUME is not a run directory" >&2; exit 2; }
  if python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1])).get("status") != "ok")' \
       "$RESUME/metrics.json" 2>/dev/null; then
    run=$RESUME   # finished (e.g. started by hand with the spec): export it as it is
  else
    run=$("$DPFT" run --resume "$RESUME" "$@" | tail -n 1)
  fi
elif [ -n "$earlier" ]; then
  run=$("$DPFT" run "$spec" --set model.path="$earlier" "${pairs_set[@]}" --out "$OUT/runs" "$@" | tail -n 1)
else
  rm -rf "$init_dir"
  "$DPFT" model init "${init[@]}" --out "$init_dir" --seed 0
  run=$("$DPFT" run "$spec" --set model.path="$init_dir" "${pairs_set[@]}" --out "$OUT/runs" "$@" | tail -n 1)
fi
[ -f "$run/model/model.safetensors" ] || { echo "pretrain_tiny: no model in $run" >&2; exit 4; }
rm -rf "$dest"
mkdir -p models
cp -r "$run/model" "$dest"
# Does the conditional model read its condition? (own vs shuffled vs empty conditions on the
# held-out pairs; scripts/condition_check.sh)
check=""
if [ "$MODEL" = bart ]; then
  len=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["settings"]["data"]["max_length"])' "$run/privacy_lock.json")
  check=$(DPFT="$DPFT" OUT="$OUT" bash scripts/condition_check.sh "$dest" "$OUT/bart-pairs.csv" "$len")
fi
python3 - "$run" "$MODEL" "$spec" "$earlier" "$*" "${bart_corpora[*]}" "$OBJECTIVE" "$dest" "$check" > "$dest/PROVENANCE.md" <<'PY'
import json, os, sys
run, model, spec, earlier, extra, corpora, objective, dest, check = sys.argv[1:10]
m = json.load(open(run + "/metrics.json"))
e = m.get("eval") or m["non_private"]["eval"]
t = m.get("non_private", m)["timing"]
cfg = json.load(open(run + "/model/config.json"))
data = json.load(open(run + "/privacy_lock.json"))["settings"]["data"]
files = list(dict.fromkeys([data["train"]["path"]] + [x["path"] for x in data.get("train_extra") or []]))
if model.startswith("bart"):  # the spec reads the pairs `dpft topics pairs` made of these files
    files = corpora.split()
resolved, block = {}, ""  # the run's resolved spec: its top-level blocks' "key: value" lines
for line in open(run + "/config.resolved.yaml"):
    if not line.startswith(" "):
        block = line.split(":")[0]
    elif ":" in line and not line.startswith("   "):
        k, v = line.strip().split(":", 1)
        resolved.setdefault(block, {})[k] = v.strip()
print(f"# {dest}: how it was made\n")
what = {"gpt2": "next-token pretraining",
        "roberta": "masked-LM pretraining (15 % of text ids; 80 % <mask>, 10 % random, 10 % kept)",
        "bart": "(condition -> document) pretraining (teacher-forced cross-entropy of the "
                "document given \"Document Type: ...\\nKeywords: ...\"; `dpft topics pairs` with "
                "models/ctcl-topics)",
        "bart-uncond": "unconditional pretraining (the cross-entropy of each document from an empty "
                       "source; `dpft topics pairs --empty-condition`: the documents of models/tiny-bart's "
                       "pairs)"}[model]
if objective == "denoise":
    what = ("denoising pretraining (BART's text infilling: the teacher-forced cross-entropy of each "
            "document given itself with 30 % of its tokens hidden in Poisson(3)-length spans, one "
            "<mask> per span, drawn afresh each step; the documents of models/tiny-bart's pairs)")
start = ("the exported model of the earlier stages below (`FROM=... bash "
         "scripts/pretrain_tiny.sh`; a fresh optimizer and schedule)" if earlier else
         f"random init (`dpft model init --arch {model.split('-')[0]} --preset mini`, seed 0)")
print(f"Made by `{'OBJECTIVE=denoise ' if objective == 'denoise' else ''}MODEL={model} bash scripts/pretrain_tiny.sh`: {start}, "
      f"{cfg.get('hidden_size', cfg.get('n_embd', cfg.get('d_model')))} wide, "
      f"{cfg.get('num_hidden_layers', cfg.get('n_layer', cfg.get('encoder_layers')))} layers"
      f"{' + ' + str(cfg['decoder_layers']) + ' decoder layers' if 'decoder_layers' in cfg else ''}, "
      f"then `dpft run {spec}{' ' + extra if extra else ''}`: {what}, method sgd, AdamW "
      f"(lr {m['train'].get('lr')}), full "
      + (f"training on packed {data['max_length']}-token blocks of public text"
         if not model.startswith("bart") else
         f"training on (condition, document) pairs of public text, documents cut to "
         f"{data['max_length']} tokens" if objective != "denoise" else
         f"training on the documents of those pairs, cut to {data['max_length']} tokens")
      + f"; weights stored in {resolved.get('output', {}).get('save_dtype', 'float32')}.\n")
if files:
    print("Training text (nothing an experiment on this model uses as private or evaluation data; "
          "docs/models.md): " + ", ".join(f"`{f}`" for f in files) + "\n")
tr = resolved.get("train", {})
print("- settings (the run's config.resolved.yaml): " + ", ".join(
    f"{k} {tr[k]}" for k in ("steps", "batch_size", "lr", "warmup_ratio", "schedule", "weight_decay")
    if k in tr) + f", max_length {data['max_length']}")
print(f"- steps {m['train']['steps_done']}, training {'pairs' if model.startswith('bart') else 'blocks'} {m['train']['dataset_size']}, "
      f"train time {t['train_s']:.0f} s, median step {t['median_step_s']:.2f} s, "
      f"run id {m['run']['run_id']}")
unit = "masked-token accuracy" if model == "roberta" else "perplexity"
key = "accuracy" if model == "roberta" else "perplexity"
held = {"gpt2": "held-out wikitext-2 test (next-token)", "roberta": "held-out wikitext-2 test (fixed masks)",
        "bart": "held-out 2 % of the pairs (document given condition)" if objective != "denoise"
                else "held-out 2 % of the documents (document given its infilled self, fixed draw)",
        "bart-uncond": "held-out 2 % of the documents (from an empty source)"}[model]
print(f"- {held}: "
      f"{unit} {e['base'][key]:.4g} before, {e['final'][key]:.4g} after "
      f"(loss {e['base']['loss']:.3f} -> {e['final']['loss']:.3f})")
hist = e.get("history") or []
if hist:
    print(f"- the curve ({unit} at step): " +
          ", ".join(f"{h['step']}: {h[key]:.4g}" for h in hist))
if check:
    print(f"- {check} (`scripts/condition_check.sh`: a model that reads its condition scores its "
          "own lowest)")
if earlier:
    old = open(os.path.join(earlier, "PROVENANCE.md")).read().splitlines()
    print("\n## Earlier stages (the model this stage started from)\n")
    print("\n".join(("#" + l if l.startswith("#") else l) for l in old[1:]).strip())
PY
[ -z "$earlier" ] || rm -rf "$earlier"
cat "$dest/PROVENANCE.md"
