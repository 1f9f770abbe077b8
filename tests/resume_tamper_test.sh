#!/usr/bin/env bash
# A run's privacy budget cannot be changed by resuming it (issue 20): every tampering below is
# refused with a message naming what changed, and leaves the run untrained; an untouched copy
# resumes to the end; a finished run is never trained again; a run directory is locked; a
# stopped or interrupted run says so once.
# Usage: resume_tamper_test.sh PATH/TO/dpft SOURCE_DIR
set -u
DPFT="$1"; SRC="$2"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$SRC"
fail=0; pass=0
ok()  { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
steps_in() { grep -c '"event":"step"' "$1/metrics.jsonl"; }

cp experiments/data/pubmed_sample/train.csv "$T/train.csv"
cat > "$T/s.yaml" <<YAML
name: tamper
seed: 0
model: {path: "", peft: {kind: lora, r: 4, alpha: 8, targets: [c_attn]}}
data:
  train: {path: $T/train.csv, text_column: text, num_samples: 60}
  eval: {path: experiments/data/pubmed_sample/eval.csv, text_column: text, num_samples: 8}
  max_length: 32
privacy: {epsilon: 1, delta: 1.0e-5, sampling_rate: 0.2, clip_norm: 1.0, noise_seed: 0}
train: {steps: 6, micro_batch_size: 16, lr: 5.0e-3}
method: {name: dp-sgd}
YAML
out=$("$DPFT" run "$T/s.yaml" --out "$T/runs" --stop-after 2 2>&1); R=$(tail -n 1 <<<"$out")
# One line says why the run stopped and how to continue, and none says it is done; the same
# for Ctrl-C at step 2 (exit 130).
stop_lines() { grep -cE "stopped|interrupted by signal" <<<"$1"; }
if [ "$(stop_lines "$out")" = 1 ] && grep -qF "stopped after 2 steps as asked; checkpoint saved; continue with: dpft run --resume $R" <<<"$out" &&
   ! grep -qF "done:" <<<"$out"; then ok; else bad "--stop-after 2: not one stop line, or a done line"; echo "$out" | tail -4; fi
out=$(DPFT_SIGNAL_AT=step2 "$DPFT" run "$T/s.yaml" --out "$T/runs-sig" 2>&1); rc=$?
if [ "$rc" = 130 ] && [ "$(stop_lines "$out")" = 1 ] && grep -qF "interrupted by signal 2; partial results saved in" <<<"$out" &&
   ! grep -qF "done:" <<<"$out"; then ok; else bad "SIGINT at step 2: exit $rc, not one stop line, or a done line"; echo "$out" | tail -4; fi
S=$("$DPFT" --quiet run "$T/s.yaml" --out "$T/runs" --set seed=1 --stop-after 2 2>/dev/null | tail -1)
if [ ! -d "$R/checkpoint" ] || [ ! -f "$R/privacy_lock.json" ] || [ ! -d "$S/checkpoint" ]; then
  echo "FAIL: the stopped runs have no checkpoint / privacy_lock.json ($R, $S)"; exit 1
fi

# refused NAME CODE PATTERN EDIT: copy R, apply EDIT (shell code; $D is the copy), resume; want
# exit CODE, PATTERN in the message, and no training step after the refusal.
n=0
refused() {
  local name="$1" want="$2" pat="$3" edit="$4"
  n=$((n+1)); local D="$T/copy$n"; cp -r "$R" "$D"
  (D="$D"; eval "$edit") || { bad "$name: the edit failed"; return; }
  local before; before=$(steps_in "$D")
  local out; out=$("$DPFT" run --resume "$D" 2>&1); local rc=$?
  if [ "$rc" != "$want" ]; then bad "$name: --resume exited $rc, want $want"; echo "$out" | tail -3; return; fi
  if ! grep -qF -- "$pat" <<<"$out"; then bad "$name: message lacks '$pat'"; echo "$out" | tail -3; return; fi
  [ "$(steps_in "$D")" = "$before" ] || { bad "$name: the run trained after the refusal"; return; }
  ok
}
cfg() { python3 - "$D/config.resolved.yaml" "$1" "$2" <<'PY'
import sys, re
p, key, val = sys.argv[1:]
block, leaf = key.split(".") if "." in key else (None, key)
out, cur = [], None
for line in open(p).read().split("\n"):
    m = re.match(r"^(\w[\w-]*):", line)
    if m: cur = m.group(1)
    if block is None and re.match(rf"^{leaf}:", line): line = f"{leaf}: {val}"
    elif block == cur and re.match(rf"^  {leaf}:", line): line = f"  {leaf}: {val}"
    out.append(line)
open(p, "w").write("\n".join(out))
PY
}
state() { python3 - "$D/checkpoint/state.json" "$1" <<'PY'
import json, sys
p, code = sys.argv[1:]
j = json.load(open(p)); exec(code); json.dump(j, open(p, "w"))
PY
}

refused "epsilon 8"            2 "privacy.epsilon: 1 when the run started, 8 now" 'cfg privacy.epsilon 8'
refused "epsilon inf"          2 "privacy.epsilon: 1 when the run started, .inf now" 'cfg privacy.epsilon .inf'
refused "delta 1e-3"           2 "privacy.delta: 1e-05 when the run started, 0.001 now" 'cfg privacy.delta 0.001'
refused "noise multiplier 0.3" 2 "privacy.noise_multiplier" 'cfg privacy.epsilon "~" && cfg privacy.noise_multiplier 0.3'
refused "steps 60"             2 "train.steps: 6 when the run started, 60 now" 'cfg train.steps 60'
refused "sampling rate"        2 "privacy.sampling_rate" 'cfg privacy.sampling_rate 0.5'
refused "clip norm"            2 "privacy.clip_norm" 'cfg privacy.clip_norm 10'
refused "accountant"           2 "privacy.accountant" 'cfg privacy.accountant rdp'
refused "seed"                 2 "seed: 0 when the run started, 1 now" 'cfg seed 1'
refused "method"               2 "method.name" 'cfg method.name "{name: sgd}"'
refused "lr edited"            3 "config.resolved.yaml was changed after the run started" 'cfg train.lr 0.5'
refused "data file edited"     2 "sha256" 'cp "$T/train.csv" "$T/train.orig"; sed -i "2s/e/E/" "$T/train.csv"'
cp "$T/train.orig" "$T/train.csv"  # restore the private file for the cases below
refused "ledger emptied"       3 "fails its integrity check" 'state "j[\"ledger\"][\"releases\"] = []"'
refused "step edited"          3 "fails its integrity check" 'state "j[\"step\"] = 5"'
refused "another seed's checkpoint" 3 "belongs to another run" 'rm -rf "$D/checkpoint" && cp -r "$S/checkpoint" "$D/checkpoint"'
refused "lock file removed"    3 "has no privacy_lock.json" 'rm "$D/privacy_lock.json"'
refused "lock file damaged"    3 "is damaged" 'echo "{" > "$D/privacy_lock.json"'
# A forged lock: config, privacy_lock.json and the manifest's config hash all rewritten to
# another budget (epsilon 8, with the plan that goes with it); the checkpoint still carries the
# lock it was written under.
E8=$("$DPFT" --quiet run "$T/s.yaml" --out "$T/runs8" --set privacy.epsilon=8 --stop-after 1 2>/dev/null | tail -1)
refused "lock and config forged" 3 "was written under other privacy settings" 'cp "$E8/config.resolved.yaml" "$D/config.resolved.yaml" && python3 - "$D/privacy_lock.json" "$E8/privacy_lock.json" <<PY
import json, sys
mine, other = (json.load(open(p)) for p in sys.argv[1:])
other["run_nonce"] = mine["run_nonce"]
json.dump(other, open(sys.argv[1], "w"))
PY
python3 - "$D" <<PY
import hashlib, json, sys
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
m["config_sha256"] = hashlib.sha256(open(d + "/config.resolved.yaml", "rb").read()).hexdigest()
json.dump(m, open(d + "/manifest.json", "w"))
PY'
refused "checkpoint removed after steps" 3 "recorded 2 training steps but has no checkpoint" 'rm -rf "$D/checkpoint"'

# Two processes in one run directory: the second is refused while the first holds the lock.
D="$T/locked"; cp -r "$R" "$D"
flock "$D/.lock" sleep 20 & holder=$!
sleep 0.5
out=$("$DPFT" run --resume "$D" 2>&1); rc=$?
kill $holder 2>/dev/null; wait $holder 2>/dev/null
if [ "$rc" = 4 ] && grep -qF "is in use by another dpft process" <<<"$out"; then ok; else bad "concurrent resume: exit $rc"; echo "$out" | tail -2; fi

# The untouched run resumes to the end: 6 steps in all, epsilon within the target.
out=$("$DPFT" --quiet run --resume "$R" 2>&1); rc=$?
if [ "$rc" = 0 ] && python3 - "$R" <<'PY'
import json, sys
m = json.load(open(sys.argv[1] + "/metrics.json"))
ok = m["status"] == "ok" and m["train"]["steps_done"] == 6 and m["privacy"]["releases"][0]["count"] == 6 and m["privacy"]["epsilon"] <= 1.0
sys.exit(0 if ok else 1)
PY
then ok; else bad "the untouched run did not resume to the end (exit $rc)"; echo "$out" | tail -3; fi
out=$("$DPFT" run --resume "$R" 2>&1); rc=$?
if [ "$rc" = 2 ] && grep -qF "already finished" <<<"$out"; then ok; else bad "a finished run was resumed (exit $rc)"; fi

# Killed after the last step (the step-6 checkpoint written; in the final evaluation, or after
# the adapter was saved): --resume finishes the run without training again, with the adapter
# an uninterrupted run writes.
U=$("$DPFT" --quiet run "$T/s.yaml" --out "$T/runs-u" 2>/dev/null | tail -1)
for point in final_eval saved; do
  DPFT_CRASH_AT=$point "$DPFT" --quiet run "$T/s.yaml" --out "$T/runs-$point" > /dev/null 2>&1; rc=$?
  d=$(ls -d "$T/runs-$point"/tamper/*/ | head -1)
  if [ "$rc" != 137 ] || [ ! -d "$d/checkpoint" ]; then bad "crash at $point: exit $rc, no checkpoint"; continue; fi
  out=$("$DPFT" --quiet run --resume "$d" 2>&1); rc=$?
  if [ "$rc" = 0 ] && [ "$(steps_in "$d")" = 6 ] && [ ! -d "$d/checkpoint" ] &&
     cmp -s "$U/adapter/adapter_model.safetensors" "$d/adapter/adapter_model.safetensors" &&
     [ "$(grep -c '"model":"final"' "$d/per_sample.jsonl")" = "$(grep -c '"model":"final"' "$U/per_sample.jsonl")" ]; then ok
  else bad "resume after a crash at $point: exit $rc, $(steps_in "$d") step events, adapter or per_sample.jsonl differ from the uninterrupted run's"; echo "$out" | tail -3; fi
done
# Ctrl-C during the final evaluation: the run completes its outputs and ends ok (exit 0);
# resuming it is refused as finished.
DPFT_SIGNAL_AT=final_eval "$DPFT" --quiet run "$T/s.yaml" --out "$T/runs-int" > /dev/null 2>&1; rc=$?
d=$(ls -d "$T/runs-int"/tamper/*/ | head -1)
st=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['status'])" "$d/metrics.json" 2>/dev/null)
out=$("$DPFT" run --resume "$d" 2>&1); rc2=$?
if [ "$rc" = 0 ] && [ "$st" = ok ] && [ "$rc2" = 2 ] && grep -qF "already finished" <<<"$out"; then ok
else bad "SIGINT in the final evaluation: exit $rc, status $st, resume exit $rc2"; fi

# eval-synthetic's downstream LM interrupted (SIGINT at its step 2): an error saying so (exit
# 4), never a score of the half-trained model, and nothing recorded in the run it scores.
mkdir -p "$T/scored/synthetic"
python3 -c 'import csv,json,sys
for r in list(csv.DictReader(open(sys.argv[1])))[:40]: print(json.dumps({"text": r["text"]}))' \
  "$T/train.csv" > "$T/scored/synthetic/synthetic.jsonl"
printf '{"status": "ok"}\n' > "$T/scored/metrics.json"
# A WordPiece vocabulary made here (the special tokens, single characters and their ## forms,
# the sample's commonest words), so that this check needs nothing from ../shared/data.
mkdir -p "$T/vocab"
python3 -c 'import collections,csv,re,string,sys
c=collections.Counter(w for r in csv.DictReader(open(sys.argv[1])) for w in re.findall(r"[a-z]+",r["text"].lower()))
chars=string.ascii_lowercase+string.digits
toks=["[PAD]","[UNK]","[CLS]","[SEP]","[MASK]"]+list(chars+string.punctuation)+["##"+x for x in chars]
toks+=[w for w,_ in c.most_common(300) if w not in toks]
print("\n".join(toks))' "$T/train.csv" > "$T/vocab/vocab.txt"
for d in uninterrupted killed nockpt; do cp -r "$T/scored" "$T/$d"; done  # (paths are in the configs)
es() {  # eval-synthetic --run DIR of a 4-step downstream LM (checkpoints every step)
  "$DPFT" eval-synthetic --run "$1" --keep-work \
    --real experiments/data/pubmed_sample/eval.csv --embedder models/tiny-roberta --max-length 16 --k 3 \
    --lm --lm-tokenizer "$T/vocab" --lm-preset tiny --lm-steps 4 \
    --lm-batch 8 --lm-max-length 16 --max-real 50 2>&1
}
lm_score() { python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))["synthetic_eval"]["main"]["downstream_lm"]
print(d["next_token_accuracy"], d["perplexity"], d["loss"])' "$1/metrics.json" 2>/dev/null; }
lm_runs() { ls -d "$1"/eval_synthetic.work/lm-runs/eval-synthetic-lm/*/ 2>/dev/null; }
out=$(DPFT_SIGNAL_AT=step2 es "$T/scored"); rc=$?
if [ "$rc" = 4 ] && grep -qF "ended 'interrupted' before its last step" <<<"$out" &&
   grep -qF "run the same command again: it continues" <<<"$out" &&
   ! grep -q synthetic_eval "$T/scored/metrics.json"; then ok
else bad "eval-synthetic with its downstream LM interrupted: exit $rc: $out"; fi
es "$T/uninterrupted" > /dev/null; U_SCORE=$(lm_score "$T/uninterrupted")
# The same command again continues that downstream run from its step-2 checkpoint (no second
# run; 4 steps in all) and records the score an uninterrupted evaluation records, exactly.
out=$(es "$T/scored"); rc=$?
runs=$(lm_runs "$T/scored")
if [ "$rc" = 0 ] && [ -n "$U_SCORE" ] && [ "$(lm_score "$T/scored")" = "$U_SCORE" ] &&
   grep -qF "continuing the unfinished downstream run" <<<"$out" &&
   [ "$(wc -l <<<"$runs")" = 1 ] && [ "$(steps_in "$runs")" = 4 ]; then ok
else bad "eval-synthetic run again after an interrupt: exit $rc, score '$(lm_score "$T/scored")' vs uninterrupted '$U_SCORE', runs: $runs"; echo "$out" | tail -5; fi
# Killed (SIGKILL, no signal to checkpoint on) after step 3: its periodic checkpoint is continued.
DPFT_CRASH_AT=step3 es "$T/killed" > /dev/null; rc=$?
out=$(es "$T/killed"); rc2=$?
runs=$(lm_runs "$T/killed")
if [ "$rc" = 137 ] && [ "$rc2" = 0 ] && [ "$(lm_score "$T/killed")" = "$U_SCORE" ] &&
   grep -qF "continuing the unfinished downstream run" <<<"$out" &&
   [ "$(wc -l <<<"$runs")" = 1 ] && [ "$(steps_in "$runs")" = 4 ]; then ok
else bad "eval-synthetic run again after a kill at step 3: exit $rc then $rc2, score '$(lm_score "$T/killed")' vs '$U_SCORE'"; echo "$out" | tail -5; fi
# An unfinished run that cannot be continued (its checkpoint gone after recorded steps) is
# left as it is, with a warning, and a new downstream run gives the same score.
DPFT_SIGNAL_AT=step2 es "$T/nockpt" > /dev/null; rm -rf "$(lm_runs "$T/nockpt")checkpoint"
out=$(es "$T/nockpt"); rc=$?
if [ "$rc" = 0 ] && [ "$(lm_score "$T/nockpt")" = "$U_SCORE" ] &&
   grep -qF "starting a new downstream run" <<<"$out" && [ "$(lm_runs "$T/nockpt" | wc -l)" = 2 ]; then ok
else bad "eval-synthetic with an unfinished run lacking its checkpoint: exit $rc, score '$(lm_score "$T/nockpt")' vs '$U_SCORE'"; echo "$out" | tail -5; fi

# The same for --classify: its downstream classifier interrupted at step 2, then the same
# command continues it (one run, 4 steps) to the score of an uninterrupted evaluation.
# Labels made here: whether a text mentions "patients" (a and b), on both sides.
mkdir -p "$T/clf/synthetic"
python3 -c 'import csv,json,sys
rows=list(csv.DictReader(open(sys.argv[1])))
lab=lambda t: "a" if "patients" in t else "b"
with open(sys.argv[2],"w") as f:
  for r in rows[:40]: f.write(json.dumps({"text": r["text"], "label": lab(r["text"])})+"\n")
w=csv.writer(open(sys.argv[3],"w",newline="")); w.writerow(["text","label"])
for r in csv.DictReader(open(sys.argv[4])): w.writerow([r["text"], lab(r["text"])])' \
  "$T/train.csv" "$T/clf/synthetic/synthetic.jsonl" "$T/real_labelled.csv" experiments/data/pubmed_sample/eval.csv
printf '{"status": "ok"}\n' > "$T/clf/metrics.json"
cp -r "$T/clf" "$T/clf_uninterrupted"
ec() {  # eval-synthetic --run DIR of a 4-step downstream classifier (checkpoints every step)
  "$DPFT" eval-synthetic --run "$1" --keep-work \
    --real "$T/real_labelled.csv" --embedder models/tiny-roberta --max-length 16 --k 3 \
    --classify --classifier-from models/tiny-roberta --labels a b --label-column label \
    --clf-steps 4 --clf-batch 8 --clf-max-length 16 --max-real 50 2>&1
}
clf_score() { python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))["synthetic_eval"]["main"]["downstream_classifier"]
print(d["accuracy"], d["loss"])' "$1/metrics.json" 2>/dev/null; }
clf_runs() { ls -d "$1"/eval_synthetic.work/classifier-runs/eval-synthetic-classifier/*/ 2>/dev/null; }
out=$(DPFT_SIGNAL_AT=step2 ec "$T/clf"); rc=$?
recorded=$(grep -c synthetic_eval "$T/clf/metrics.json")
ec "$T/clf_uninterrupted" > /dev/null; C_SCORE=$(clf_score "$T/clf_uninterrupted")
out2=$(ec "$T/clf"); rc2=$?
runs=$(clf_runs "$T/clf")
if [ "$rc" = 4 ] && [ "$recorded" = 0 ] &&
   [ "$rc2" = 0 ] && [ -n "$C_SCORE" ] && [ "$(clf_score "$T/clf")" = "$C_SCORE" ] &&
   grep -qF "continuing the unfinished downstream run" <<<"$out2" &&
   [ "$(wc -l <<<"$runs")" = 1 ] && [ "$(steps_in "$runs")" = 4 ]; then ok
else bad "eval-synthetic --classify interrupted then run again: exit $rc then $rc2, score '$(clf_score "$T/clf")' vs uninterrupted '$C_SCORE', runs: $runs"; echo "$out" | tail -3; echo "$out2" | tail -5; fi

echo "resume_tamper: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
