#!/usr/bin/env bash
# `dpft account --spec` is exact for every spec under experiments/ (issue 20):
#  - every spec: the plan's epsilon equals `dpft account --sigma S --q Q --steps T` for the
#    planned release (N counted from the spec's data, or --dataset-size 1000 where the data or
#    model are placeholders), and is within the spec's privacy.epsilon;
#  - runnable specs: a run's spent epsilon equals the prediction exactly: shortened with --set
#    (mode fast), or as written (mode full: quickstart and dp_sgd/pubmed_eps1, minutes);
#  - `--eps` below the spend exits 2, and a fixed noise multiplier is reported, not 0.
# Exits 77 (ctest: skipped) when ../shared/data is absent and nothing but the shipped specs ran.
# Usage: account_specs_test.sh PATH/TO/dpft SOURCE_DIR [fast|full]
set -u
DPFT="$1"; SRC="$2"; MODE="${3:-fast}"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$SRC"
fail=0; pass=0; skipped=0
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
field() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); v=j$2; print(v)" "$1"; }

# 1. Every spec: the plan (one `account --spec` process for them all, as a sweep checks its
#    specs) against an independent accountant call per distinct release (`account --sigma ...`,
#    all of them answered by one `account --queries` process; section 4 checks that a query's
#    answer equals its own process's).
python3 - "$DPFT" > "$T/part1.out" <<'PY'
import json, subprocess, sys, glob
dpft = sys.argv[1]
cache, fails, passes = {}, 0, 0
def account(args):
    return subprocess.run([dpft, "--quiet", "account"] + args + ["--json"], capture_output=True, text=True)
def plans(fs, extra=()):  # {spec: its JSON line}, from one process
    out = account(["--spec"] + list(fs) + list(extra))
    got = {}
    for line in out.stdout.splitlines():
        j = json.loads(line)
        got[j["spec"]] = j
    missing = [f for f in fs if f not in got]
    if missing: print(f"FAIL: account --spec over {len(fs)} specs printed nothing for {missing[:3]} (exit {out.returncode}): {out.stderr.strip().splitlines()[-1:]}")
    return got
specs = sorted(f for f in glob.glob("experiments/**/*.yaml", recursive=True) if "/prompts/" not in f)
got = plans(specs)
retry = [f for f, j in got.items() if "error" in j and "give --dataset-size N" in j["error"]]
if len(retry) >= 2: got.update(plans(retry, ["--dataset-size", "1000"]))
elif retry:
    o = account(["--spec", retry[0], "--dataset-size", "1000"])
    got[retry[0]] = json.loads(o.stdout) if o.returncode == 0 else {"error": o.stderr}
def query(r, d, acc, err):  # the flags of `dpft account` for one release by itself
    return (f"--sigma {r['noise_multiplier']!r} --q {r['sampling_rate']!r} --steps {r['count']} "
            f"--delta {d!r} --accountant {acc} --eps-error {err!r}")
def alone(r, d, acc, err):  # its epsilon from the independent call (nan: no answer, a failure)
    return cache.get(query(r, d, acc, err), float("nan"))
# The independent calls every check below needs, answered by one `account --queries` process.
for j in got.values():
    rs = j.get("releases") or []
    if "error" in j or not rs or any(r["noise_multiplier"] == 0 for r in rs): continue
    for r in rs:
        for d in {j["delta"], j["delta"] / len(rs)}:
            cache[query(r, d, j["accountant"], j.get("eps_error", 0.01))] = None
o = subprocess.run([dpft, "--quiet", "account", "--queries", "-", "--json"],
                   input="".join(q + "\n" for q in cache), capture_output=True, text=True)
for line in o.stdout.splitlines():
    a = json.loads(line)
    if "epsilon" in a: cache[a["query"]] = a["epsilon"]
for q in [q for q, v in cache.items() if v is None]:
    print(f"FAIL: account --queries (exit {o.returncode}) did not answer '{q}': {o.stderr.strip().splitlines()[-1:]}")
    del cache[q]
for f in specs:
    j = got.get(f, {"error": "no output"})
    if "error" in j:
        print(f"FAIL: {f}: account --spec failed: {j['error'].strip().splitlines()[-1:]}"); fails += 1; continue
    rs, eps, tgt = j["releases"], j["epsilon"], j.get("target_epsilon")
    if not rs:
        ok = j.get("note") == "this method makes no DP release"
    elif any(r["noise_multiplier"] == 0 for r in rs):
        ok = eps == "inf"
    elif len(rs) != 1:
        # Several releases (dp-sft's two stages): the composition spends at least what its
        # dearest part spends alone at delta and at most the parts' sum at delta / n (basic
        # composition), each part from an independent call; 0.02 = twice the PRV error.
        n, acc, err = len(rs), j["accountant"], j.get("eps_error", 0.01)
        lo = max(alone(r, j["delta"], acc, err) for r in rs)
        hi = sum(alone(r, j["delta"] / n, acc, err) for r in rs)
        ok = lo - 0.02 <= eps <= hi + 0.02 and (tgt is None or tgt == "inf" or eps <= tgt * (1 + 1e-9))
        if not ok: print(f"FAIL: {f}: {n} releases: plan epsilon {eps}, parts alone {lo}, basic composition {hi}, target {tgt}")
    else:
        ind = alone(rs[0], j["delta"], j["accountant"], j.get("eps_error", 0.01))
        ok = ind == eps and (tgt is None or tgt == "inf" or eps <= tgt * (1 + 1e-9))
        if not ok: print(f"FAIL: {f}: plan epsilon {eps}, independent {ind}, target {tgt}")
    if ok: passes += 1
    else: fails += 1
print(f"PART1 {passes} {fails} {len(specs)}")
PY
cat "$T/part1.out" | grep FAIL
read -r _ p1 f1 nspecs < <(grep '^PART1' "$T/part1.out")
pass=$((pass+p1)); fail=$((fail+f1))
[ "${nspecs:-0}" -ge 50 ] || bad "only ${nspecs:-0} specs found under experiments/"

# 2. Runs spend exactly what account --spec predicted.
short=(--set train.steps=2 --set data.train.num_samples=40 --set data.eval.num_samples=4 --set data.max_length=32)
proj=(--set method.synthetic_size=12 --set method.generation.max_new_tokens=8 --set method.generation.min_new_tokens=4)
run_and_compare() {  # spec, --set args...
  local f="$1"; shift
  local pred; pred=$("$DPFT" --quiet account --spec "$f" --json "$@" 2>&1 | python3 -c "import json,sys; print(json.load(sys.stdin)['epsilon'])") ||
    { bad "$f: account --spec $*: no prediction"; return; }
  local d; d=$("$DPFT" --quiet run "$f" --out "$T/runs" "$@" 2> "$T/run.err" | tail -1)
  [ -f "$d/metrics.json" ] || { bad "$f: the run failed: $(tail -2 "$T/run.err")"; return; }
  local spent; spent=$(field "$d/metrics.json" '["privacy"]["epsilon"]')
  local st; st=$(field "$d/metrics.json" '["status"]')
  if [ "$st" = ok ] && [ "$spent" = "$pred" ]; then pass=$((pass+1)); else bad "$f $*: predicted $pred, spent $spent (status $st)"; fi
}
shared_ok=1; [ -f ../shared/data/pe_sgd_text/pubmed/dev.csv ] || shared_ok=0
if [ "$MODE" = full ]; then
  run_and_compare experiments/quickstart.yaml
  if [ $shared_ok = 1 ]; then run_and_compare experiments/dp_sgd/pubmed_eps1.yaml; else skipped=$((skipped+1)); fi
else
  run_and_compare experiments/quickstart.yaml "${short[@]}"
  run_and_compare experiments/quickstart.yaml "${short[@]}" --set privacy.epsilon=null --set privacy.noise_multiplier=0.8
  if [ $shared_ok = 1 ]; then
    for m in pe_sgd gep sgd; do
      x=(); [ $m != sgd ] && x=("${proj[@]}")
      [ $m = gep ] && x+=(--set method.k=4)
      run_and_compare experiments/pe_sgd/small/pubmed-$m.yaml "${short[@]}" "${x[@]}"
    done
  else skipped=$((skipped+1)); fi
fi

# 3. The budget check of account --spec can fire, and a fixed sigma is reported.
out=$("$DPFT" account --spec experiments/quickstart.yaml --set privacy.epsilon=null --set privacy.noise_multiplier=0.3 --eps 1 2>&1); rc=$?
if [ "$rc" = 2 ] && grep -qF "more than the target" <<<"$out" && grep -qE "^epsilon +30\.4" <<<"$out"; then pass=$((pass+1)); else bad "over-budget spec: exit $rc"; echo "$out" | tail -3; fi
out=$("$DPFT" account --spec experiments/quickstart.yaml --eps 2 2>&1); rc=$?
[ "$rc" = 0 ] && pass=$((pass+1)) || bad "a spec within --eps 2 exited $rc"
out=$("$DPFT" account --spec experiments/quickstart.yaml --delta 1e-6 2>&1); rc=$?
[ "$rc" = 2 ] && grep -qF -- "--delta conflicts with --spec" <<<"$out" && pass=$((pass+1)) || bad "--delta with --spec exited $rc"

# 4. Several specs in one process: each line equals that spec's own process (the E2E pair shares
#    its data, so the second line is the memoised count), and a spec that fails is reported with
#    its exit status while the others are still accounted.
many=(experiments/quickstart.yaml experiments/denoise/small/e2e-dp_sgd.yaml experiments/denoise/small/e2e-denoise.yaml)
[ -f ../shared/data/e2e/trainset.csv ] || many=(experiments/quickstart.yaml experiments/example.yaml)
"$DPFT" --quiet account --spec "${many[@]}" /nonexistent.yaml --json > "$T/many.jsonl" 2> "$T/many.err"; rc=$?
for f in "${many[@]}"; do "$DPFT" --quiet account --spec "$f" --json > "$T/one.json" 2>&1 || echo "exit $?" >> "$T/one.json"
  if python3 - "$T/many.jsonl" "$T/one.json" "$f" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
one = json.load(open(sys.argv[2]))
mine = [l for l in lines if l["spec"] == sys.argv[3]]
sys.exit(0 if len(mine) == 1 and {k: v for k, v in mine[0].items() if k != "spec"} == one else 1)
PY
  then pass=$((pass+1)); else bad "account --spec over several specs: $f differs from its own process"; fi
done
if [ "$rc" = 3 ] && grep -qF '"spec":"/nonexistent.yaml"' "$T/many.jsonl" && [ "$(wc -l < "$T/many.jsonl")" = $(( ${#many[@]} + 1 )) ]; then
  pass=$((pass+1)); else bad "account --spec with a missing spec among others: exit $rc, $(wc -l < "$T/many.jsonl") lines"; fi

# 5. `account --queries`: each line's answer equals that line's own process (section 1 relies on
#    it); a bad line is reported with its exit status and line number, the others still answered.
printf '%s\n' '--sigma 0.9 --q 0.02 --steps 500 --delta 1e-5' '# a comment' \
  '--eps 3 --dataset-size 5000 --batch-size 64 --epochs 2 --delta 1e-6 --accountant rdp' \
  '--sigma 1 --q 1.5 --steps 10 --delta 1e-5' '--sigma 0.7 --q 0.01 --steps 300 --delta 1e-5 --with-gaussian 10' > "$T/queries.txt"
"$DPFT" --quiet account --queries "$T/queries.txt" --json > "$T/answers.jsonl" 2> "$T/answers.err"; rc=$?
[ "$rc" = 2 ] && pass=$((pass+1)) || bad "account --queries with a bad line exited $rc, want 2"
n=0
while IFS= read -r q; do
  case "$q" in '#'*) continue ;; esac
  n=$((n+1))
  # shellcheck disable=SC2086 # the line's flags, split as the shell would
  "$DPFT" --quiet account $q --json > "$T/own.json" 2> /dev/null; own_rc=$?
  if python3 - "$T/answers.jsonl" "$T/own.json" "$q" "$own_rc" "$n" <<'PY'
import json, sys
answers = [json.loads(l) for l in open(sys.argv[1])]
q, own_rc, n = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
mine = [a for a in answers if a["query"] == q]
if len(answers) != 4 or len(mine) != 1: sys.exit(1)
a = mine[0]
if own_rc != 0:  # the bad line: its exit status and its line number (the comment counts)
    sys.exit(0 if a.get("exit_code") == own_rc and a.get("line") == 4 and "--q 1.5" in a["error"] else 1)
own = json.load(open(sys.argv[2]))
sys.exit(0 if {k: v for k, v in a.items() if k != "query"} == own else 1)
PY
  then pass=$((pass+1)); else bad "account --queries: line '$q' differs from its own process (exit $own_rc)"; fi
done < "$T/queries.txt"
[ "$n" = 4 ] || bad "account --queries: $n queries read back"

echo "account_specs ($MODE): $pass passed, $fail failed, $skipped groups skipped (no ../shared/data)"
[ "$fail" -eq 0 ] || exit 1
[ "$skipped" -eq 0 ] || exit 77
