#!/usr/bin/env bash
# Rebuild a shipped base model from scratch (no pretrained weights can be downloaded here):
#   MODEL=gpt2 (default)  models/tiny-gpt2, the embedded default: a random-init GPT-2 `mini`
#                         (d 128, 4 layers, GPT-2 tokenizer), next-token pretraining
#                         (experiments/pretrain/tiny_gpt2.yaml)
#   MODEL=roberta         models/tiny-roberta: a random-init RoBERTa `mini` with a masked-LM
#                         head (RoBERTa BPE tokenizer), masked-LM pretraining
#                         (experiments/pretrain/tiny_roberta.yaml)
# Both train with method sgd on public text from ../shared/data that no experiment on the model
# uses as private or evaluation data, and are exported in fp16 with their tokenizer and a
# PROVENANCE.md (steps, time, held-out curve). Run it with a copy of the binary (DPFT=/tmp/dpft)
# if you rebuild meanwhile: relinking build/dpft kills a running process.
# Long runs span sessions: the run checkpoints every 50 steps; after an interruption,
# RESUME=RUN_DIR continues it (dpft run --resume) and exports when it finishes. Where the
# checkpoint may not survive (a new machine each session), train in stages instead:
# FROM=models/tiny-gpt2 starts a new run from that exported model (fresh optimizer state and
# schedule; --set train.steps=N sizes the stage to the time at hand) and the new PROVENANCE.md
# keeps the earlier stages' record below its own. FROM must show, stage by stage, that it saw
# only files the spec reads (its PROVENANCE.md's "Training text" lines); the first stage starts
# from a random init.
# Env: MODEL, DPFT (default build/dpft), OUT (default build/pretrain), RESUME (a run directory),
# FROM (an exported model to continue from);
# extra args go to `dpft run` (e.g. --set train.steps=100 for a short trial).
set -euo pipefail
cd "$(dirname "$0")/.."
DPFT=${DPFT:-build/dpft}
OUT=${OUT:-build/pretrain}
MODEL=${MODEL:-gpt2}
case "$MODEL" in
  gpt2) init=(--arch gpt2 --preset mini --tokenizer ../shared/data/gpt2_tokenizer)
        init_dir="$OUT/init" ;;
  roberta) init=(--arch roberta --preset mini --head mlm --tokenizer ../shared/data/roberta_tokenizer)
           init_dir="$OUT/roberta-init" ;;
  *) echo "pretrain_tiny: MODEL=$MODEL: use gpt2 or roberta" >&2; exit 2 ;;
esac
spec=experiments/pretrain/tiny_$MODEL.yaml
dest=models/tiny-$MODEL
[ -d ../shared/data/lm_text_misc ] || { echo "pretrain_tiny: ../shared/data is missing" >&2; exit 3; }
earlier=""
if [ -n "${FROM:-}" ]; then
  [ -f "$FROM/config.json" ] || { echo "pretrain_tiny: FROM=$FROM holds no model" >&2; exit 2; }
  [ -z "${RESUME:-}" ] || { echo "pretrain_tiny: set FROM or RESUME, not both" >&2; exit 2; }
  # A stage may only continue a model that saw nothing but this spec's public text: every stage
  # in $FROM's PROVENANCE.md must list its training files ("Training text ..."), each one the
  # spec reads (a model that saw an experiment's private data must not become a base model).
  allowed=$("$DPFT" config dump "$spec" | grep -o 'path: [^,}]*' | sed 's/path: //' | sort -u)
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
if [ -n "${RESUME:-}" ]; then
  run=$("$DPFT" run --resume "$RESUME" "$@" | tail -n 1)
elif [ -n "$earlier" ]; then
  run=$("$DPFT" run "$spec" --set model.path="$earlier" --out "$OUT/runs" "$@" | tail -n 1)
else
  rm -rf "$init_dir"
  "$DPFT" model init "${init[@]}" --out "$init_dir" --seed 0
  run=$("$DPFT" run "$spec" --set model.path="$init_dir" --out "$OUT/runs" "$@" | tail -n 1)
fi
[ -f "$run/model/model.safetensors" ] || { echo "pretrain_tiny: no model in $run" >&2; exit 4; }
rm -rf "$dest"
mkdir -p models
cp -r "$run/model" "$dest"
python3 - "$run" "$MODEL" "$spec" "$earlier" "$*" > "$dest/PROVENANCE.md" <<'PY'
import json, os, sys
run, model, spec, earlier, extra = sys.argv[1:6]
m = json.load(open(run + "/metrics.json"))
e = m.get("eval") or m["non_private"]["eval"]
t = m.get("non_private", m)["timing"]
cfg = json.load(open(run + "/model/config.json"))
data = json.load(open(run + "/privacy_lock.json"))["settings"]["data"]
files = list(dict.fromkeys([data["train"]["path"]] + [x["path"] for x in data.get("train_extra") or []]))
print(f"# models/tiny-{model}: how it was made\n")
what = ("next-token pretraining" if model == "gpt2" else
        "masked-LM pretraining (15 % of text ids; 80 % <mask>, 10 % random, 10 % kept)")
start = ("the exported model of the earlier stages below (`FROM=... bash "
         "scripts/pretrain_tiny.sh`; a fresh optimizer and schedule)" if earlier else
         f"random init (`dpft model init --arch {model} --preset mini`, seed 0)")
print(f"Made by `MODEL={model} bash scripts/pretrain_tiny.sh`: {start}, "
      f"{cfg.get('hidden_size', cfg.get('n_embd'))} wide, {cfg.get('num_hidden_layers', cfg.get('n_layer'))} layers, "
      f"then `dpft run {spec}{' ' + extra if extra else ''}`: {what}, method sgd, AdamW "
      f"(lr {m['train'].get('lr')}), full "
      "training on packed 128-token blocks of public text; weights stored in float16.\n")
if files:
    print("Training text (nothing an experiment on this model uses as private or evaluation data; "
          "docs/models.md): " + ", ".join(f"`{f}`" for f in files) + "\n")
print(f"- steps {m['train']['steps_done']}, training blocks {m['train']['dataset_size']}, "
      f"train time {t['train_s']:.0f} s, median step {t['median_step_s']:.2f} s, "
      f"run id {m['run']['run_id']}")
unit = "perplexity" if model == "gpt2" else "masked-token accuracy"
key = "perplexity" if model == "gpt2" else "accuracy"
print(f"- held-out wikitext-2 test ({'next-token' if model == 'gpt2' else 'fixed masks'}): "
      f"{unit} {e['base'][key]:.4g} before, {e['final'][key]:.4g} after "
      f"(loss {e['base']['loss']:.3f} -> {e['final']['loss']:.3f})")
hist = e.get("history") or []
if hist:
    print(f"- the curve ({unit} at step): " +
          ", ".join(f"{h['step']}: {h[key]:.4g}" for h in hist))
if earlier:
    old = open(os.path.join(earlier, "PROVENANCE.md")).read().splitlines()
    print("\n## Earlier stages (the model this stage started from)\n")
    print("\n".join(("#" + l if l.startswith("#") else l) for l in old[1:]).strip())
PY
[ -z "$earlier" ] || rm -rf "$earlier"
cat "$dest/PROVENANCE.md"
