#!/usr/bin/env bash
# Does a conditional BART read its condition? Scores a model's held-out (condition -> document)
# pairs three ways: with each document's own condition, with the conditions shuffled among the
# documents (a fixed permutation), and with empty conditions. A model that uses its condition
# has the lowest loss with its own; one that ignores it scores all three alike (docs/models.md:
# models/tiny-bart as first trained did, to 1e-7). Prints one line, for PROVENANCE.md:
#   condition check (N held-out pairs, M tokens): loss own A, shuffled B, empty C
# The losses are `dpft run`'s base evaluation (before its single training step, at lr 1e-12,
# which nothing keeps): the model as given, teacher-forced, mean over target tokens.
# Usage: scripts/condition_check.sh MODEL PAIRS.csv [MAX_LENGTH] [N]
#   PAIRS.csv: `dpft topics pairs` output (columns condition, text); its held-out 2 % (the
#   hash split experiments/pretrain/tiny_bart.yaml holds out), the first N (default 300) of them.
# Env: DPFT (default build/dpft), OUT (default build/pretrain).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "condition_check: usage: condition_check.sh MODEL PAIRS.csv [MAX_LENGTH] [N]" >&2; exit 2; }
model=$1 pairs=$2 max_length=${3:-64} n=${4:-300}
[[ "$max_length" =~ ^[1-9][0-9]*$ && "$n" =~ ^[1-9][0-9]*$ ]] || {
  echo "condition_check: MAX_LENGTH ($max_length) and N ($n) must be positive integers" >&2; exit 2; }
DPFT=${DPFT:-build/dpft}
OUT=${OUT:-build/pretrain}
[ -f "$model/config.json" ] || { echo "condition_check: $model holds no model" >&2; exit 2; }
[ -f "$pairs" ] || { echo "condition_check: $pairs does not exist" >&2; exit 2; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/condition_check.XXXXXX")
trap 'rm -rf "$dir"' EXIT
# The held-out rows (hash split [0.98, 1), as the spec's eval block), then the three variants.
python3 - "$pairs" "$dir" "$n" <<'PY' || exit 2
import csv, hashlib, random, sys
pairs, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
csv.field_size_limit(1 << 30)
reader = csv.DictReader(open(pairs, newline="", encoding="utf-8"))
missing = [c for c in ("condition", "text") if c not in (reader.fieldnames or [])]
if missing:
    sys.exit(f"condition_check: {pairs} has no column {' or '.join(missing)} (its header: "
             f"{', '.join(reader.fieldnames or []) or 'none'}); give the pairs `dpft topics pairs` writes")
rows = list(reader)
# data/lm_dataset.hpp hash_fraction: the top 53 bits of SHA-256(text)[:8] over 2^53.
frac = lambda t: (int(hashlib.sha256(t.encode()).hexdigest()[:16], 16) >> 11) / 2**53
held = [r for r in rows if frac(r["text"]) >= 0.98][:n]
if len(held) < 10:
    sys.exit(f"condition_check: only {len(held)} held-out pairs in {pairs}")
perm = list(range(len(held)))
random.Random(0).shuffle(perm)
for name, cond in (("own", lambda i: held[i]["condition"]),
                   ("shuffled", lambda i: held[perm[i]]["condition"]),
                   ("empty", lambda i: "")):
    with open(f"{out}/{name}.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["condition", "text"])
        for i, r in enumerate(held):
            w.writerow([cond(i), r["text"]])
print(len(held), file=open(f"{out}/n", "w"))
PY
cols=", prompt_column: condition, text_column: text"
cat > "$dir/spec.yaml" <<EOF
name: condition-check
seed: 0
model: {path: $model, peft: {kind: full, targets: [all]}}
data:
  task: seq2seq
  train: {path: $dir/own.csv$cols}
  eval: {path: $dir/own.csv$cols}
  eval_sets:
    - {name: shuffled, path: $dir/shuffled.csv$cols}
    - {name: empty, path: $dir/empty.csv$cols}
  max_length: $max_length
privacy: {epsilon: .inf}
train: {steps: 1, batch_size: 1, lr: 1.0e-12}
method: {name: sgd}
output: {non_private_stats: true}
EOF
run=$("$DPFT" run "$dir/spec.yaml" --out "$dir/runs" --threads 1 2>"$dir/err" | tail -n 1) || {
  echo "condition_check: scoring with $DPFT failed:" >&2; tail -n 5 "$dir/err" >&2; exit 4; }
python3 - "$run/metrics.json" "$(cat "$dir/n")" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
e = m.get("eval") or {}
if "base" not in e:  # the eval rows are training rows: the block is non_private
    e = m["non_private"]["eval"]
b = e["base"]
print(f"condition check ({sys.argv[2]} held-out pairs, {b['tokens']} target tokens): loss own "
      f"{b['loss']:.6f}, shuffled {b['sets']['shuffled']['loss']:.6f}, empty "
      f"{b['sets']['empty']['loss']:.6f}")
PY
