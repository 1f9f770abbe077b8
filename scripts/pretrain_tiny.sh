#!/usr/bin/env bash
# Rebuild the embedded default model, models/tiny-gpt2, from scratch: a random-init GPT-2
# `mini` (d 128, 4 layers, GPT-2 tokenizer; dpft model init), pretrained with method sgd on the
# public text of ../shared/data (experiments/pretrain/tiny_gpt2.yaml), exported in fp16 with
# its tokenizer and a PROVENANCE.md. Run it with a copy of the binary (DPFT=/tmp/dpft) if you
# rebuild meanwhile: relinking build/dpft kills a running process.
# Long runs span sessions: the run checkpoints every 50 steps; after an interruption,
# RESUME=RUN_DIR continues it (dpft run --resume) and exports when it finishes.
# Env: DPFT (default build/dpft), OUT (default build/pretrain), RESUME (a run directory), extra
# args go to `dpft run` (e.g. --set train.steps=6000 --set eval.every=500).
set -euo pipefail
cd "$(dirname "$0")/.."
DPFT=${DPFT:-build/dpft}
OUT=${OUT:-build/pretrain}
[ -d ../shared/data/lm_text_misc ] || { echo "pretrain_tiny: ../shared/data is missing" >&2; exit 3; }
if [ -n "${RESUME:-}" ]; then
  run=$("$DPFT" run --resume "$RESUME" "$@" | tail -n 1)
else
  rm -rf "$OUT/init"
  "$DPFT" model init --arch gpt2 --preset mini --tokenizer ../shared/data/gpt2_tokenizer --out "$OUT/init" --seed 0
  run=$("$DPFT" run experiments/pretrain/tiny_gpt2.yaml --set model.path="$OUT/init" --out "$OUT/runs" "$@" | tail -n 1)
fi
[ -f "$run/model/model.safetensors" ] || { echo "pretrain_tiny: no model in $run" >&2; exit 4; }
rm -rf models/tiny-gpt2
mkdir -p models
cp -r "$run/model" models/tiny-gpt2
python3 - "$run" > models/tiny-gpt2/PROVENANCE.md <<'PY'
import json, sys
m = json.load(open(sys.argv[1] + "/metrics.json"))
# wikitext-2 test shares some short lines (headings) with the training text, so dpft reports
# its evaluation under non_private (the data is public either way).
e = m.get("eval") or m["non_private"]["eval"]
t = m.get("non_private", m)["timing"]
print("# models/tiny-gpt2: how it was made\n")
print("Made by `bash scripts/pretrain_tiny.sh` (random init: `dpft model init --arch gpt2 --preset mini`,")
print("seed 0; then `dpft run experiments/pretrain/tiny_gpt2.yaml`, method sgd, AdamW, full training")
print("on packed public text from ../shared/data; weights stored in float16).\n")
print(f"- steps {m['train']['steps_done']}, training blocks {m['train']['dataset_size']} of 128 tokens, "
      f"train time {t['train_s']:.0f} s, median step {t['median_step_s']:.2f} s, run id {m['run']['run_id']}")
print(f"- wikitext-2 test (packed 128-token blocks): perplexity {e['base']['perplexity']:.1f} before, "
      f"{e['final']['perplexity']:.1f} after; token accuracy {e['final']['accuracy']:.4f}")
hist = e.get("history") or []
if hist:
    print("- the curve (wikitext-2 test perplexity at step): " +
          ", ".join(f"{h['step']}: {h['perplexity']:.1f}" for h in hist))
PY
cat models/tiny-gpt2/PROVENANCE.md
