#!/usr/bin/env bash
# Black-box exit codes and messages of the dpft binary (docs/cli.md).
# Usage: cli_exit_codes.sh PATH/TO/dpft SOURCE_DIR
set -u
DPFT="$1"; SRC="$2"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0; pass=0
expect() {  # expect CODE PATTERN -- command...
  local want="$1" pat="$2"; shift 3
  local out; out=$("$@" 2>&1); local rc=$?
  if [ "$rc" != "$want" ]; then echo "FAIL: '$*' exited $rc, want $want"; echo "$out" | head -5; fail=$((fail+1)); return; fi
  if [ -n "$pat" ] && ! grep -qF -- "$pat" <<<"$out"; then echo "FAIL: '$*' output lacks '$pat'"; echo "$out" | head -5; fail=$((fail+1)); return; fi
  pass=$((pass+1))
}

printf 'name: typo\nprivacy:\n  epsilom: 1\n' > "$T/typo.yaml"
expect 2 'did you mean `privacy.epsilon`?' -- "$DPFT" run "$T/typo.yaml" --out "$T/runs"
expect 2 'privacy.epsilom' -- "$DPFT" run "$T/typo.yaml" --out "$T/runs"
expect 3 "$T/missing.yaml" -- "$DPFT" run "$T/missing.yaml"
expect 2 'privacy.delta: 2 is out of range' -- "$DPFT" config validate "$T/typo.yaml" --set privacy.epsilom=null --set privacy.delta=2
expect 2 '' -- "$DPFT" run
# --check-eps: each epsilon set before the --set overrides (the sweep's order), the first refused
# value named, and only with --dry-run. From the source tree: the pre-flight opens the
# quickstart's data files, which it names relative to it.
Q=(env -C "$SRC" "$DPFT" run experiments/quickstart.yaml)
expect 0 '# dry run at privacy.epsilon=inf: method' -- "${Q[@]}" --dry-run --check-eps 2 inf
expect 2 'does not accept privacy.epsilon=-1: privacy.epsilon: -1 is out of range' -- "${Q[@]}" --dry-run --check-eps 2 -1
expect 2 'privacy.delta: 2 is out of range' -- "${Q[@]}" --dry-run --check-eps 2 --set privacy.delta=2
expect 2 'give it with --dry-run' -- "${Q[@]}" --check-eps 2
out=$("${Q[@]}" --dry-run --check-eps 2 --set privacy.epsilon=8 2>&1)
h8=$("${Q[@]}" --dry-run --set privacy.epsilon=8 2>&1 | sed -n 's/^# dry run: .*config hash \([0-9a-f]*\).*/\1/p')
expect 0 "" -- test -n "$h8"
expect 0 "# dry run at privacy.epsilon=2: method dp-sgd, config hash $h8" -- echo "$out"
expect 2 '' -- "$DPFT" no-such-command
expect 0 'LibTorch' -- "$DPFT" version
expect 0 'epsilon: 3' -- "$DPFT" config dump --set privacy.epsilon=3
expect 3 "does not exist" -- "$DPFT" tokenize --tokenizer "$T/no-tokenizer" --text hi
expect 2 "" -- "$DPFT" tokenize --text hi
for f in "$SRC"/experiments/*.yaml; do expect 0 'pre-flight: data.train' -- env -C "$SRC" "$DPFT" config validate "$f"; done
expect 0 'tensors: 14, parameters: 51' -- "$DPFT" model inspect "$SRC/tests/data/torch_zip_corpus/ok_state_dict.pt"
expect 3 "tensors 'a' [0, 8] and 'b' [4, 12] overlap" -- "$DPFT" model inspect "$SRC/tests/data/safetensors_corpus/bad_overlapping_ranges.safetensors"
expect 2 '' -- "$DPFT" model
# --eps inf is answered as no noise, not as the calibration's lower bracket (0.00098).
expect 0 'epsilon inf: non-private, no noise' -- "$DPFT" account --eps inf --delta 1e-5 --q 0.1 --steps 100
expect 2 'no budget to solve against' -- "$DPFT" account --eps inf --sigma 1 --delta 1e-5 --q 0.1
mkdir -p "$T/no-runs"
expect 3 "$T/no-runs" -- "$DPFT" report "$T/no-runs" --table pe-sgd-table1
expect 2 'pe-sgd-table1, pe-sgd-longtail, pe-sgd-diagnostics' -- "$DPFT" report "$T/no-runs" --table nope

# Waits (up to 60 s) until a file matching the glob $1 exists and is non-empty: the run has
# done a step. Fixed sleeps were flaky on a loaded machine (the run had not started yet).
wait_for_steps() {
  local i f
  for i in $(seq 600); do
    f=$(ls $1 2>/dev/null | head -1)
    [ -n "$f" ] && [ -s "$f" ] && return 0
    sleep 0.1
  done
  return 1
}

# SIGTERM during a run: exit 143, status "interrupted" recorded, metrics.json parseable.
printf 'name: slow\nmethod:\n  name: noop\n  steps: 400\n  step_ms: 25\n' > "$T/slow.yaml"
"$DPFT" --quiet run "$T/slow.yaml" --out "$T/runs" > "$T/slow.out" 2>&1 &
pid=$!
wait_for_steps "$T/runs/slow/*/metrics.jsonl"; sleep 0.2; kill -TERM $pid; wait $pid; rc=$?
if [ "$rc" != 143 ]; then echo "FAIL: SIGTERM run exited $rc, want 143"; fail=$((fail+1)); else pass=$((pass+1)); fi
m=$(ls "$T"/runs/slow/*/metrics.json 2>/dev/null | head -1)
if [ -n "$m" ] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d['status']=='interrupted' and 0 < d['method_result']['steps_done'] < 400 else 1)" "$m"; then
  pass=$((pass+1)); else echo "FAIL: interrupted run did not record status interrupted ($m)"; fail=$((fail+1)); fi

# kill -9 mid-run: every JSON file in the run directory still parses (status "running").
printf 'name: killed\nmethod:\n  name: noop\n  steps: 400\n  step_ms: 10\n' > "$T/killed.yaml"
"$DPFT" --quiet run "$T/killed.yaml" --out "$T/runs" > /dev/null 2>&1 &
pid=$!
wait_for_steps "$T/runs/killed/*/metrics.jsonl"; sleep 0.2; kill -KILL $pid; wait $pid 2>/dev/null
d=$(ls -d "$T"/runs/killed/*/ 2>/dev/null | head -1)
if [ -n "$d" ] && python3 - "$d" <<'PY'
import json, sys, os
d = sys.argv[1]
m = json.load(open(os.path.join(d, "metrics.json")))
man = json.load(open(os.path.join(d, "manifest.json")))
lines = open(os.path.join(d, "metrics.jsonl")).read().split("\n")
for l in lines[:-1]:
    json.loads(l)  # every complete line parses; a torn last fragment is allowed
sys.exit(0 if m["status"] == "running" and man["status"] == "running" else 1)
PY
then pass=$((pass+1)); else echo "FAIL: kill -9 left unparsable or wrong files in '$d'"; fail=$((fail+1)); fi

# kill -9 during DP training, then --resume: the final numbers equal an uninterrupted run's.
# (Embedded default model + shipped PubMed sample; small settings so each run takes seconds, and
# 24 steps so that the run is still going when the poll sees its step-3 checkpoint.)
small=(--set data.train.num_samples=24 --set data.eval.num_samples=6 --set data.max_length=24
       --set train.steps=24 --set privacy.sampling_rate=0.25 --set output.checkpoint_every=1
       --set model.peft.dropout=0.1 --set output.save_model=false --set privacy.noise_seed=0)
( cd "$SRC" && "$DPFT" --quiet run experiments/quickstart.yaml --out "$T/full" "${small[@]}" > /dev/null 2>&1 )
( cd "$SRC" && exec "$DPFT" --quiet run experiments/quickstart.yaml --out "$T/killed" "${small[@]}" > /dev/null 2>&1 ) &
pid=$!
for _ in $(seq 1 600); do  # until a checkpoint at step >= 3 exists (at most 60 s)
  st=$(ls "$T"/killed/quickstart/*/checkpoint/state.json 2>/dev/null | head -1)
  if [ -n "$st" ] && python3 -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['step'] >= 3 else 1)" "$st" 2>/dev/null; then break; fi
  sleep 0.1
done
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
kd=$(ls -d "$T"/killed/quickstart/*/ | head -1)
if [ ! -f "$kd/checkpoint/state.json" ]; then echo "FAIL: the killed run left no checkpoint (finished before the kill?)"; fail=$((fail+1)); fi
( cd "$SRC" && "$DPFT" --quiet run --resume "$kd" > /dev/null 2>&1 ); rc=$?
fm=$(ls "$T"/full/quickstart/*/metrics.json | head -1)
if [ "$rc" = 0 ] && python3 - "$fm" "$kd/metrics.json" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
ok = b["status"] == "ok" and all(a[k] == b[k] for k in ("eval", "privacy")) and a["non_private"]["history"] == b["non_private"]["history"]
resumed = any(json.loads(l).get("event") == "resume" for l in open(sys.argv[2].replace("metrics.json", "metrics.jsonl")) if l.strip())
sys.exit(0 if ok and resumed and b["privacy"]["releases"][0]["count"] == 24 else 1)
PY
then pass=$((pass+1)); else echo "FAIL: kill -9 + --resume (rc $rc) did not reproduce the uninterrupted run ($kd)"; fail=$((fail+1)); fi

# A full disk (simulated: file size limit 3 KiB, SIGXFSZ ignored, so writes fail with EFBIG):
# the run fails with the write error it hit, recorded as failed, never left "running".
( cd "$SRC" && ulimit -f 3 && trap '' XFSZ && exec "$DPFT" --quiet run experiments/quickstart.yaml \
    --out "$T/full_disk" "${small[@]}" > "$T/full_disk.out" 2> "$T/full_disk.err" ); rc=$?
if [ "$rc" = 4 ] && grep -q "File too large" "$T/full_disk.err" &&
   ! grep -rq --include=manifest.json '"status": "running"' "$T/full_disk"; then
  pass=$((pass+1))
else
  echo "FAIL: full disk: rc $rc, want 4 with the write error and no run left running"; head -3 "$T/full_disk.err"; fail=$((fail+1))
fi

# The busy-machine warning (cli/app.cpp): with the cores taken by spinning processes, a run warns
# before it starts (here one refused at once: its spec is missing), a dry run (it computes nothing)
# does not. The warning needs more than one thread, so a one-core machine skips this.
cores=$(nproc)
if [ "$cores" -gt 1 ]; then
  spinners=()
  for _ in 1 2; do bash -c 'while :; do :; done' & spinners+=($!); done
  sleep 0.3
  busy_run() { "$DPFT" --threads "$cores" run "$T/missing.yaml" 2>&1; }
  warned1=$(busy_run)
  dry=$("$DPFT" --threads "$cores" run "$SRC/experiments/quickstart.yaml" --dry-run --no-data 2>&1); dry_rc=$?
  warned2=$(busy_run)
  kill "${spinners[@]}" 2>/dev/null; wait "${spinners[@]}" 2>/dev/null
  expect 0 'the machine is busy' -- echo "$warned1"
  expect 0 'the machine is busy' -- echo "$warned2"
  expect 0 "$T/missing.yaml" -- echo "$warned1"
  if [ "$dry_rc" = 0 ] && grep -q '^# dry run' <<<"$dry" && ! grep -q 'the machine is busy' <<<"$dry"; then
    pass=$((pass+1))
  else
    echo "FAIL: a dry run on a busy machine (rc $dry_rc) warned or did not dry-run:"; echo "$dry" | head -3; fail=$((fail+1))
  fi
else
  echo "SKIP: the busy-machine warning (one core: it never warns)"
fi

echo "cli_exit_codes: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
