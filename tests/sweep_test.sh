#!/usr/bin/env bash
# scripts/sweep.sh: the dry-run listing, one run per seed for sgd specs, skipping combinations
# whose directory holds an ok run, going on after a failed run (exit 1), rejecting an epsilon a
# spec does not accept (exit 2). Runs the noop method, so it takes seconds.
# Usage: sweep_test.sh PATH/TO/dpft SOURCE_DIR
set -u
DPFT="$1"; SRC="$2"
SWEEP="$SRC/scripts/sweep.sh"
source "$(dirname "$0")/shell_check.sh"

printf 'name: a\nmethod:\n  name: noop\n' > "$T/a.yaml"
printf 'name: b\nmethod: {name: sgd}\n' > "$T/b.yaml"
printf 'name: c\nmethod:\n  name: noop\n' > "$T/c.yaml"

# Dry run: 2 eps x 2 seeds for a, 2 seeds (no eps override) for the sgd spec b and for c, which
# --no-eps-for names.
out=$(bash "$SWEEP" --dpft "$DPFT" --specs "$T/a.yaml $T/b.yaml $T/c.yaml" --seeds "0 1" \
      --eps "1 inf" --no-eps-for c.yaml --out "$T/out" --dry-run 2>&1); rc=$?
check "dry run exits 0 (rc $rc)" [ "$rc" = 0 ]
check "dry run lists 8 combinations" [ "$(grep -c 'would run' <<<"$out")" = 8 ]
check "a eps 1 seed 0 command" has "$out" "[1/8] a eps=1 seed=0: would run: $DPFT run $T/a.yaml --set seed=0 --set privacy.epsilon=1 --out $T/out/a/eps1/s0"
check "a eps inf seed 1 directory" has "$out" "[4/8] a eps=inf seed=1: would run: $DPFT run $T/a.yaml --set seed=1 --set privacy.epsilon=inf --out $T/out/a/epsinf/s1"
check "sgd spec once per seed, no eps" has "$out" "[5/8] b eps=none seed=0: would run: $DPFT run $T/b.yaml --set seed=0 --out $T/out/b/noeps/s0"
check "--no-eps-for spec" has "$out" "[8/8] c eps=none seed=1: would run: $DPFT run $T/c.yaml --set seed=1 --out $T/out/c/noeps/s1"
check "dry run writes nothing" [ ! -e "$T/out" ]
# --threads N (before or after the other flags): each run gets dpft --threads N.
out=$(bash "$SWEEP" --dpft "$DPFT" --threads 1 --specs "$T/a.yaml" --seeds 0 --eps 1 --out "$T/out" --dry-run 2>&1)
check "--threads reaches each run" has "$out" "[1/1] a eps=1 seed=0: would run: $DPFT --threads 1 run $T/a.yaml --set seed=0"
out=$(bash "$SWEEP" --dpft "$DPFT" --specs "$T/a.yaml" --seeds 0 --eps 1 --out "$T/out" --threads two --dry-run 2>&1); rc=$?
check "--threads two refused (rc $rc)" [ "$rc" = 2 ]
check "--threads two: the message" has "$out" "--threads needs a number of threads"

# A fake finished run is skipped; a failed one is not.
mkdir -p "$T/out/a/eps1/s0/a/run1" "$T/out/a/eps1/s1/a/run1"
printf '{\n    "schema": "dpft.metrics/1",\n    "status": "ok"\n}\n' > "$T/out/a/eps1/s0/a/run1/metrics.json"
printf '{\n    "schema": "dpft.metrics/1",\n    "status": "failed"\n}\n' > "$T/out/a/eps1/s1/a/run1/metrics.json"
out=$(bash "$SWEEP" --dpft "$DPFT" --specs "$T/a.yaml" --seeds "0 1" --eps "1" --out "$T/out" --dry-run 2>&1)
check "ok run skipped" has "$out" "[1/2] a eps=1 seed=0: skipped (done: $T/out/a/eps1/s0/a/run1)"
check "failed run redone" has "$out" "[2/2] a eps=1 seed=1: would run"
# A run kept as a run file (experiments/run_files.py) counts as done; a failed one does not.
mkdir -p "$T/out/f/eps1"
printf '{"metrics":{"schema":"dpft.metrics/2","status":"ok"}}\n' > "$T/out/f/eps1/s0.run.json"
printf '{"metrics":{"schema":"dpft.metrics/2","status":"failed"}}\n' > "$T/out/f/eps1/s1.run.json"
printf 'name: f\nmethod:\n  name: noop\n' > "$T/f.yaml"
out=$(bash "$SWEEP" --dpft "$DPFT" --specs "$T/f.yaml" --seeds "0 1" --eps "1" --out "$T/out" --dry-run 2>&1)
check "run file skipped" has "$out" "[1/2] f eps=1 seed=0: skipped (done: $T/out/f/eps1/s0.run.json)"
check "failed run file redone" has "$out" "[2/2] f eps=1 seed=1: would run"

# Real runs through a wrapper that fails seed 1: the sweep goes on and exits 1.
printf '#!/usr/bin/env bash\nfor a in "$@"; do [ "$a" = seed=1 ] && [[ "$*" != *--dry-run* ]] && { echo boom >&2; exit 4; }; done\nexec "%s" "$@"\n' "$DPFT" > "$T/dpft-flaky"
chmod +x "$T/dpft-flaky"
out=$(bash "$SWEEP" --dpft "$T/dpft-flaky" --specs "$T/a.yaml $T/b.yaml" --seeds "0 1 2" --eps "1" \
      --out "$T/real" -- --set method.name=noop 2>&1); rc=$?
check "a failed run makes the sweep exit 1 (rc $rc)" [ "$rc" = 1 ]
check "failed run reported" has "$out" "a eps=1 seed=1: FAILED (exit 4"
check "runs after the failure" has "$out" "[3/6] a eps=1 seed=2: ran ("
check "summary" has "$out" "sweep: 6 combinations: 4 ran, 0 skipped, 2 failed"
check "ok metrics.json in the predictable directory" \
  python3 -c 'import json,glob,sys; f=glob.glob(sys.argv[1]+"/real/a/eps1/s2/a/*/metrics.json"); sys.exit(not (len(f)==1 and json.load(open(f[0]))["status"]=="ok"))' "$T"
# Restarted with the real binary: the finished runs are skipped, the failed ones run.
out=$(bash "$SWEEP" --dpft "$DPFT" --specs "$T/a.yaml $T/b.yaml" --seeds "0 1 2" --eps "1" \
      --out "$T/real" -- --set method.name=noop 2>&1); rc=$?
check "restart exits 0 (rc $rc)" [ "$rc" = 0 ]
check "restart skips 4, runs 2" has "$out" "sweep: 6 combinations: 2 ran, 4 skipped, 0 failed"
# experiments/keep_runs.sh turns the finished runs into run files in place; the sweep then skips
# them all.
out=$(bash "$SRC/experiments/keep_runs.sh" "$T/real" 2>&1); rc=$?
check "keep_runs exits 0 (rc $rc)" [ "$rc" = 0 ]
check "keep_runs made 6 run files" [ "$(find "$T/real" -name '*.run.json' | wc -l)" = 6 ]
check "keep_runs left no run directory" [ -z "$(find "$T/real" -name metrics.json)" ]
check "a run file where its combination was" [ -f "$T/real/a/eps1/s2.run.json" ]
check "its run directory removed" [ ! -e "$T/real/a/eps1/s2" ]
check "the run file keeps where the run came from (manifest git_commit, threads)" python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["manifest"]
sys.exit(not (set(m) >= {"git_commit", "threads", "start_time"} and "command_line" not in m))' "$T/real/a/eps1/s2.run.json"
out=$(bash "$SWEEP" --dpft "$DPFT" --specs "$T/a.yaml $T/b.yaml" --seeds "0 1 2" --eps "1" \
      --out "$T/real" -- --set method.name=noop 2>&1)
check "run files skipped" has "$out" "sweep: 6 combinations: 0 ran, 6 skipped, 0 failed"

# A run stopped with a checkpoint (as a killed long run with output.checkpoint_every leaves it)
# is continued with --resume, not started over.
cat > "$T/r.yaml" <<YAML
name: r
seed: 0
model: {path: "", peft: {kind: lora, r: 4, alpha: 8, targets: [c_attn]}}
data:
  train: {path: $SRC/experiments/data/pubmed_sample/train.csv, text_column: text, num_samples: 40}
  eval: {path: $SRC/experiments/data/pubmed_sample/eval.csv, text_column: text, num_samples: 4}
  max_length: 16
privacy: {epsilon: 1, delta: 1.0e-5, sampling_rate: 0.2, clip_norm: 1.0}
train: {steps: 4, micro_batch_size: 16, lr: 5.0e-3}
method: {name: dp-sgd}
YAML
bash "$SWEEP" --dpft "$DPFT" --specs "$T/r.yaml" --seeds 0 --eps 1 --out "$T/res" -- --stop-after 2 > /dev/null 2>&1
check "the stopped run left a checkpoint" [ -n "$(find "$T/res" -path '*/checkpoint/state.json')" ]
out=$(bash "$SWEEP" --dpft "$DPFT" --specs "$T/r.yaml" --seeds 0 --eps 1 --out "$T/res" --dry-run 2>&1)
check "dry run says it would resume" has "$out" "r eps=1 seed=0: would resume: $DPFT run --resume $T/res/r/eps1/s0/r/"
out=$(bash "$SWEEP" --dpft "$DPFT" --specs "$T/r.yaml" --seeds 0 --eps 1 --out "$T/res" 2>&1); rc=$?
check "resume exits 0 (rc $rc)" [ "$rc" = 0 ]
check "resumed, reported" has "$out" "r eps=1 seed=0: resumed ("
check "one run directory, finished by the resume, with 4 steps" python3 -c '
import json, glob, sys
d = glob.glob(sys.argv[1] + "/res/r/eps1/s0/r/*/")
m = json.load(open(d[0] + "manifest.json")) if len(d) == 1 else {}
steps = {json.loads(l)["step"] for l in open(d[0] + "metrics.jsonl") if "\"event\":\"step\"" in l} if d else set()
sys.exit(not (len(d) == 1 and m.get("status") == "ok" and m.get("resumed") and steps == {1, 2, 3, 4}))' "$T"

# A run killed before its first checkpoint (status running, no checkpoint, no process) is moved
# to OUT/.stale and the combination starts over: one run directory per combination again.
d=$(find "$T/res/r/eps1/s0/r" -mindepth 1 -maxdepth 1 -type d | head -n 1)
python3 -c 'import json,sys; p=sys.argv[1]+"/metrics.json"; m=json.load(open(p)); m["status"]="running"; json.dump(m,open(p,"w"))' "$d"
rm -rf "$d/checkpoint"
out=$(bash "$SWEEP" --dpft "$DPFT" --specs "$T/r.yaml" --seeds 0 --eps 1 --out "$T/res" 2>&1); rc=$?
check "a stale run: the sweep exits 0 (rc $rc)" [ "$rc" = 0 ]
check "a stale run is moved aside, reported" has "$out" "moved an unfinished run without a checkpoint to $T/res/.stale/r/eps1/s0/r/"
check "a stale run: ran again, one run directory" [ "$(find "$T/res/r/eps1/s0" -name metrics.json | wc -l)" = 1 ]
check "a stale run: kept under .stale" [ "$(find "$T/res/.stale" -name metrics.json | wc -l)" = 1 ]

# A combination another process is running (here a stand-in whose command line names its
# --out, as `dpft run` does) is left to it: not started twice, not moved aside as stale.
busy_dir="$T/res/r/eps1/s1"
mkdir -p "$busy_dir"
bash -c 'sleep 30; :' _ --out "$busy_dir" &
busy_pid=$!
out=$(bash "$SWEEP" --dpft "$DPFT" --specs "$T/r.yaml" --seeds "0 1" --eps 1 --out "$T/res" 2>&1); rc=$?
kill "$busy_pid" 2>/dev/null; wait "$busy_pid" 2>/dev/null
check "a busy combination: the sweep exits 0 (rc $rc)" [ "$rc" = 0 ]
check "a busy combination is left to its process" has "$out" "[2/2] r eps=1 seed=1: left to the process running it (pid $busy_pid)"
check "a busy combination: counted" has "$out" "sweep: 2 combinations: 0 ran, 1 skipped, 0 failed, 1 running elsewhere"
check "a busy combination: nothing started in it" [ -z "$(find "$busy_dir" -name metrics.json)" ]

# compact_results keeps what the denoise tables and plots read (eval steps_to_accuracy, nlg,
# history) and drops the rest of eval.
mkdir -p "$T/cmp/x/eps1/s0/x/20260101-000000-s0"
printf '{"schema":"dpft.metrics/2","status":"ok","eval":{"base":{"loss":1.5},"final":{"loss":1.25},"history":[{"step":50,"loss":1.4}],"steps_to_accuracy":{"reference":0.7},"nlg":[{"step":50,"bleu":0.1}],"scratch":[1,2]}}\n' \
  > "$T/cmp/x/eps1/s0/x/20260101-000000-s0/metrics.json"
python3 "$SRC/experiments/compact_results.py" "$T/cmp" > /dev/null
check "compaction keeps eval base, final, history, steps_to_accuracy, nlg and drops the rest" python3 -c '
import json, sys
e = json.load(open(sys.argv[1]))["eval"]
sys.exit(list(e) != ["base", "final", "history", "steps_to_accuracy", "nlg"] or e["final"]["loss"] != 1.25)' \
  "$T/cmp/x/eps1/s0/x/20260101-000000-s0/metrics.json"

# compact_results and run_files keep what the ctcl-* tables read (synthetic_eval with its subset
# entries, synthetic, run.label_column): the tables read the same from the run files.
mkdir -p "$T/ct/pubmed-ctcl/eps4/s0/c/20260101-000000-s0" "$T/ct/yelp-downstream_dpft/eps4/s0/y/20260101-000000-s0"
printf '%s\n' '{"schema":"dpft.metrics/2","status":"ok","run":{"label":"CTCL","method":"ctcl","seed":0,"dataset":"d/pubmed/dev.csv"},"privacy":{"target_epsilon":4.0},"synthetic":{"requested":800,"kept":790},"synthetic_eval":{"main":{"downstream_lm":{"next_token_accuracy":0.25,"perplexity":300.5},"mauve":{"mauve":0.5},"fid":0.125,"synthetic":{"requested":800}},"n50":{"downstream_lm":{"next_token_accuracy":0.2,"perplexity":400.0},"synthetic":{"requested":50,"subset":true}}},"ctcl":{"histogram":[1,2]}}' \
  > "$T/ct/pubmed-ctcl/eps4/s0/c/20260101-000000-s0/metrics.json"
printf '%s\n' '{"schema":"dpft.metrics/2","status":"ok","run":{"label":"Downstream DPFT","method":"dp-sgd","seed":0,"dataset":"d/yelp/dev.csv","label_column":"label2"},"privacy":{"target_epsilon":4.0},"eval":{"final":{"loss":1.5,"accuracy":0.375,"classification":{"accuracy":0.375}}}}' \
  > "$T/ct/yelp-downstream_dpft/eps4/s0/y/20260101-000000-s0/metrics.json"
cp -r "$T/ct" "$T/ct_dir"
python3 "$SRC/experiments/compact_results.py" "$T/ct" > /dev/null && python3 "$SRC/experiments/run_files.py" "$T/ct" > /dev/null
for table in ctcl-generative ctcl-scaling ctcl-classification; do
  before=$("$DPFT" report "$T/ct_dir" --table "$table" 2>/dev/null)
  after=$("$DPFT" report "$T/ct" --table "$table" 2>/dev/null)
  check "compaction keeps the $table table" [ -n "$before" -a "$after" = "$before" ]
done
check "the scaling table has the subset" has "$("$DPFT" report "$T/ct" --table ctcl-scaling 2>/dev/null)" "N_syn=50"

# keep_runs leaves a run whose synthetic set is not scored yet (compaction would drop the set).
mkdir -p "$T/ks/x/eps1/s0/x/20260101-000000-s0"
printf '{"schema":"dpft.metrics/2","status":"ok","synthetic":{"requested":8}}\n' > "$T/ks/x/eps1/s0/x/20260101-000000-s0/metrics.json"
out=$(bash "$SRC/experiments/keep_runs.sh" "$T/ks" 2>&1)
check "keep_runs: an unscored synthetic set is left" [ ! -e "$T/ks/x/eps1/s0.run.json" -a -f "$T/ks/x/eps1/s0/x/20260101-000000-s0/metrics.json" ]
check "keep_runs: says why" has "$out" "its synthetic set is not scored yet"
mkdir -p "$T/ks2" && cp -r "$T/ks/x" "$T/ks2/"
bash "$SRC/experiments/keep_runs.sh" --unscored "$T/ks2" > /dev/null 2>&1
check "keep_runs --unscored: kept, set unscored" [ -f "$T/ks2/x/eps1/s0.run.json" ]
out=$(bash "$SRC/experiments/keep_runs.sh" --unscored 2>&1); rc=$?
check "keep_runs --unscored without OUT exits 2 (rc $rc)" [ "$rc" = 2 ]
printf '{"schema":"dpft.metrics/2","status":"ok","synthetic":{"requested":8},"synthetic_eval":{"main":{"fid":1.5}}}\n' > "$T/ks/x/eps1/s0/x/20260101-000000-s0/metrics.json"
bash "$SRC/experiments/keep_runs.sh" "$T/ks" > /dev/null 2>&1
check "keep_runs: kept once scored" [ -f "$T/ks/x/eps1/s0.run.json" ]

# A denoise run keeps a slim trace: every 10th step and the last, with only the plotted fields.
mkdir -p "$T/cmp2/x/eps1/s0/x/20260101-000000-s0"
python3 -c '
import json, sys
h = [{"step": s, "loss": 0.5, "denoise": {"blocks": 4, "fraction_denoised": s / 10, "sigma_e": 1,
      "diagnostics": {"improvement": s / 100, "cosine_before": 0.1, "cosine_after": 0.2,
                      "layers": [{"name": "w", "improvement": 0}]}}} for s in range(1, 13)]
m = {"schema": "dpft.metrics/2", "status": "ok",
     "non_private": {"history": h, "denoise_diagnostics": {"improvement_mean": 0.04}, "big": [1]}}
open(sys.argv[1], "w").write(json.dumps(m))' "$T/cmp2/x/eps1/s0/x/20260101-000000-s0/metrics.json"
python3 "$SRC/experiments/compact_results.py" "$T/cmp2" > /dev/null
check "compaction keeps a denoise trace (steps 10 and 12, plotted fields) and the summary" python3 -c '
import json, sys
n = json.load(open(sys.argv[1]))["non_private"]
h = n.get("history", [])
ok = [x["step"] for x in h] == [10, 12] and h[1]["denoise"] == {"fraction_denoised": 1.2,
     "diagnostics": {"improvement": 0.12, "cosine_before": 0.1, "cosine_after": 0.2}}
sys.exit(not (ok and n.get("denoise_diagnostics") == {"improvement_mean": 0.04} and "big" not in n))' \
  "$T/cmp2/x/eps1/s0/x/20260101-000000-s0/metrics.json"

# run_files writes per-sample lines by columns (float32 losses as their shortest decimal) and
# dpft report reads the same long-tail table from the run file as from the run directory; a
# file of lines is repacked to the same columns.
mkdir -p "$T/ps/p/eps1/s0/p/20260101-000000-s0"
python3 -c '
import json, struct, sys
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
m = {"schema": "dpft.metrics/2", "status": "ok", "run": {"label": "PE-SGD", "seed": 0, "dataset": "d/x.csv"},
     "privacy": {"target_epsilon": 1.0}, "eval": {"base": {"loss": 2.5, "accuracy": 0.1}, "final": {"loss": 2.25, "accuracy": 0.2}}}
open(sys.argv[1] + "/metrics.json", "w").write(json.dumps(m))
lines = [{"model": t, "index": i, "loss": f32(1 + i / 7 - (t == "final") * i / 13), "accuracy": i / 3}
         for t in ("base", "final") for i in range(20)]
open(sys.argv[1] + "/per_sample.jsonl", "w").write("".join(json.dumps(l) + "\n" for l in lines))' \
  "$T/ps/p/eps1/s0/p/20260101-000000-s0"
cp -r "$T/ps" "$T/ps_dir"
python3 "$SRC/experiments/run_files.py" "$T/ps" > /dev/null
check "run file with per-sample columns" python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))["per_sample"]
sys.exit(not (p["layout"] == "columns/1" and p["float32"] == ["loss"] and p["models"]["base"]["index"] == list(range(20))
              and p["models"]["base"]["accuracy"][1] == 1 / 3))' "$T/ps/p/eps1/s0.run.json"
check "float32 losses written short" grep -qF '"loss":[1,1.1428572,' "$T/ps/p/eps1/s0.run.json"
from_dir=$("$DPFT" report "$T/ps_dir" --table pe-sgd-longtail 2>/dev/null)
from_file=$("$DPFT" report "$T/ps" --table pe-sgd-longtail 2>/dev/null)
check "long-tail table from the run file = from the run directory" [ -n "$from_dir" -a "$from_file" = "$from_dir" ]
python3 -c '
import json, sys
d = sys.argv[1] + "/p/eps1/s0/p/20260101-000000-s0"
run = {"metrics": json.load(open(d + "/metrics.json")), "per_sample": [json.loads(l) for l in open(d + "/per_sample.jsonl")]}
open(sys.argv[2], "w").write(json.dumps(run))' "$T/ps_dir" "$T/lines.run.json"
python3 "$SRC/experiments/run_files.py" --repack "$T/lines.run.json" > /dev/null
check "repack gives the columns run_files writes" python3 -c '
import json, sys
a, b = (json.load(open(p))["per_sample"] for p in sys.argv[1:])
sys.exit(a != b)' "$T/lines.run.json" "$T/ps/p/eps1/s0.run.json"

# run_files --pack: run files into one pack (a line per run, with its path); dpft report reads
# the pack, and PACK/SUB, as it reads the directory; --unpack gives the files back byte for
# byte; a different run under a path the pack holds is refused, the pack left as it was.
PY="$SRC/experiments/run_files.py"
mkdir -p "$T/ps/q/eps1" && sed 's/"seed":0/"seed":3/' "$T/ps/p/eps1/s0.run.json" > "$T/ps/q/eps1/s3.run.json"
python3 "$PY" --pack "$T/ps" "$T/ps_runs.jsonl" > /dev/null; rc=$?
check "pack exits 0 (rc $rc)" [ "$rc" = 0 ]
check "one line per run, sorted by path" python3 -c '
import json, sys
paths = [json.loads(l)["path"] for l in open(sys.argv[1])]
sys.exit(paths != ["p/eps1/s0.run.json", "q/eps1/s3.run.json"])' "$T/ps_runs.jsonl"
from_pack=$("$DPFT" report "$T/ps_runs.jsonl/p" --table pe-sgd-longtail 2>/dev/null)
check "long-tail table from PACK/SUB = from the run directory" [ -n "$from_pack" -a "$from_pack" = "$from_dir" ]
from_pack=$("$DPFT" report "$T/ps_runs.jsonl/*/eps1/s0" --table pe-sgd-longtail 2>/dev/null)
check "PACK/SUB with a glob and a run file's stem selects that run" [ "$from_pack" = "$from_dir" ]
both=$("$DPFT" report "$T/ps_runs.jsonl" --table pe-sgd-table1 2>/dev/null)
check "the whole pack: both runs in the table (2 seeds: mean ± std)" grep -qE '^\| PE-SGD \| [0-9.]+ ± [0-9.]+ \|' <<<"$both"
python3 "$PY" --unpack "$T/ps_runs.jsonl" "$T/unpacked" > /dev/null
check "unpack gives the run files back byte for byte" diff -r "$T/ps" "$T/unpacked"
check "runs() reads PACK/SUB as the directory" python3 -c '
import sys
sys.path.insert(0, sys.argv[1])
import run_files
a = [r for _, r in run_files.runs(sys.argv[2])]
b = [r for _, r in run_files.runs(sys.argv[3])]
sys.exit(not (len(a) == 1 and a == b))' "$SRC/experiments" "$T/ps_runs.jsonl/p/eps1/s0" "$T/ps/p"
out=$(python3 "$PY" --pack "$T/ps" "$T/ps_runs.jsonl")
check "packing the same runs again adds nothing" has "$out" "0 runs added, 2 in all"
cp "$T/ps_runs.jsonl" "$T/ps_runs.before"
mkdir -p "$T/ps2/p/eps1"
sed 's/"seed":0/"seed":7/' "$T/ps/p/eps1/s0.run.json" > "$T/ps2/p/eps1/s0.run.json"
out=$(python3 "$PY" --pack "$T/ps2" "$T/ps_runs.jsonl" 2>&1); rc=$?
check "a different run under a path the pack holds is refused (rc $rc)" [ "$rc" != 0 ]
check "the refusal names the path" has "$out" "already holds p/eps1/s0.run.json"
check "the refused pack is unchanged" cmp -s "$T/ps_runs.jsonl" "$T/ps_runs.before"

# An epsilon a spec rejects stops the sweep before anything runs.
out=$(bash "$SWEEP" --dpft "$DPFT" --specs "$T/a.yaml" --seeds "0" --eps "0" --out "$T/bad" 2>&1); rc=$?
check "rejected eps exits 2 (rc $rc)" [ "$rc" = 2 ]
check "rejected eps named" has "$out" "does not accept privacy.epsilon=0"
check "nothing run" [ ! -e "$T/bad" ]
out=$(bash "$SWEEP" --dpft "$DPFT" --specs "$T/a.yaml" --seeds "0" --out "$T/bad" 2>&1); rc=$?
check "missing --eps exits 2 (rc $rc)" [ "$rc" = 2 ]

# One combination per Slurm array task: --count, --task, and the sbatch template run directly
# with the variables Slurm sets.
n=$(bash "$SWEEP" --dpft "$DPFT" --specs "$T/a.yaml $T/b.yaml $T/c.yaml" --seeds "0 1" \
    --eps "1 inf" --no-eps-for c.yaml --out "$T/out" --count 2>&1)
check "--count prints the 8 combinations ($n)" [ "$n" = 8 ]
out=$(bash "$SWEEP" --dpft "$DPFT" --specs "$T/a.yaml $T/b.yaml $T/c.yaml" --seeds "0 1" \
      --eps "1 inf" --no-eps-for c.yaml --out "$T/out" --task 5 --dry-run 2>&1); rc=$?
check "--task 5 exits 0 (rc $rc)" [ "$rc" = 0 ]
check "--task 5 lists one combination" [ "$(grep -c 'would run' <<<"$out")" = 1 ]
check "--task 5 is the listing's fifth" has "$out" "[5/8] b eps=none seed=0: would run: $DPFT run $T/b.yaml --set seed=0 --out $T/out/b/noeps/s0"
out=$(bash "$SWEEP" --dpft "$DPFT" --specs "$T/a.yaml" --seeds "0" --eps "1" --out "$T/out" \
      --task 2 --dry-run 2>&1); rc=$?
check "--task beyond the combinations exits 2 (rc $rc)" [ "$rc" = 2 ]
check "--task error names the range" has "$out" "must be one of 1..1"
SBATCH="$SRC/scripts/slurm/sweep_array.sbatch"
out=$(cd "$SRC" && SLURM_ARRAY_TASK_ID=2 SLURM_SUBMIT_DIR="$SRC" bash "$SBATCH" --dpft "$DPFT" \
      --specs "$T/a.yaml" --seeds "0 1" --eps "1" --out "$T/arr" -- --set method.name=noop 2>&1); rc=$?
check "array task 2 exits 0 (rc $rc)" [ "$rc" = 0 ]
check "array task 2 ran seed 1 only" has "$out" "sweep: 2 combinations (task 2 only): 1 ran, 0 skipped, 0 failed"
check "its run is in the predictable directory" [ -n "$(ls "$T/arr/a/eps1/s1/a" 2>/dev/null)" ]
check "seed 0 was left to task 1" [ ! -e "$T/arr/a/eps1/s0" ]
out=$(cd "$SRC" && SLURM_ARRAY_TASK_ID=2 bash "$SBATCH" --dpft "$DPFT" --specs "$T/a.yaml" \
      --seeds "0 1" --eps "1" --out "$T/arr" -- --set method.name=noop 2>&1)
check "a resubmitted task skips its finished run" has "$out" "0 ran, 1 skipped, 0 failed"
out=$(bash "$SBATCH" --specs "$T/a.yaml" 2>&1); rc=$?
check "outside an array the template exits 2 (rc $rc)" [ "$rc" = 2 ]

finish "sweep_test"
