#!/usr/bin/env bash
# Numbers stay (issue 68, part 7): runs each method's shortened small spec with two dpft
# binaries and compares what they wrote: adapters / models and synthetic sets byte for byte,
# metrics.json (eval, privacy, history, config hash) as JSON without timing, memory and the new
# binary's noise block; provenance files and safetensors headers up to the run id. Use it around a refactor that must not change any number.
#   scripts/numbers_stay.sh OLD_DPFT NEW_DPFT [--new-set key=value ...] [--set key=value ...]
# --new-set is given to the new binary only (e.g. privacy.noise_seed=SEED to draw the noise an
# older binary drew from `seed`: use the word SEED, replaced by each spec's seed); --set to both
# (privacy.noise_seed=SEED between two binaries with keyed noise). Needs
# ../shared/data. ONLY=TEXT runs the specs whose line holds TEXT. Prints one line per spec and
# "numbers_stay: N passed, M failed".
set -u
OLD="$1"; NEW="$2"; shift 2
NEWSET=(); BOTHSET=()
while [ $# -gt 0 ]; do
  case "$1" in --new-set) NEWSET+=("$2"); shift 2 ;; --set) BOTHSET+=("$2"); shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;; esac
done
cd "$(dirname "$0")/.."
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
short=(--set train.steps=2 --set data.train.num_samples=40 --set data.eval.num_samples=4 --set data.max_length=32)
proj=(--set method.synthetic_size=12 --set method.generation.max_new_tokens=8 --set method.generation.min_new_tokens=4)
pe=(--set method.iterations=2 --set method.num_synthetic=6 --set method.generation.max_new_tokens=8 --set method.generation.min_new_tokens=4)
ctcl=(--set method.generation.num_synthetic=6 --set method.generation.max_new_tokens=8 --set "method.generation.subsets=[3]")
sft=(--set method.name=dp-sft --set method.k=2 --set method.stage1.steps=2 --set train.steps=4)
# spec | extra --set arguments
specs=(
  "experiments/quickstart.yaml|"
  "experiments/pe_sgd/small/pubmed-pe_sgd.yaml|${proj[*]}"
  "experiments/pe_sgd/small/pubmed-pe_sgd_fixsample.yaml|${proj[*]}"
  "experiments/pe_sgd/small/pubmed-pdp_sgd.yaml|${proj[*]}"
  "experiments/pe_sgd/small/pubmed-gep.yaml|${proj[*]} --set method.k=4"
  "experiments/pe_sgd/small/pubmed-inpro.yaml|${proj[*]}"
  "experiments/pe_sgd/small/pubmed-sft_dp_sgd.yaml|${proj[*]}"
  "experiments/quickstart.yaml|${sft[*]}"
  "experiments/quickstart.yaml|${sft[*]} --set method.budget=split"
  "experiments/denoise/small/e2e-denoise.yaml|--set eval.nlg.at_steps=[2] --set eval.nlg.max_new_tokens=8"
  "experiments/ctcl/small/pubmed-ctcl.yaml|${ctcl[*]}"
  "experiments/ctcl/small/pubmed-pe.yaml|${pe[*]}"
  "experiments/ctcl/small/pubmed-aug_pe.yaml|${pe[*]}"
)
pass=0; fail=0
for entry in "${specs[@]}"; do
  [ -n "${ONLY:-}" ] && [[ "$entry" != *"$ONLY"* ]] && continue
  spec=${entry%%|*}; read -r -a extra <<< "${entry#*|}"
  seed=$("$NEW" --quiet config dump "$spec" 2>/dev/null | sed -n 's/^seed: //p')
  ns=(); for s in "${NEWSET[@]}"; do ns+=(--set "${s//SEED/$seed}"); done
  bs=(); for s in "${BOTHSET[@]}"; do bs+=(--set "${s//SEED/$seed}"); done
  a=$("$OLD" --quiet run "$spec" --out "$T/old" "${short[@]}" "${extra[@]}" "${bs[@]}" 2>"$T/old.err" | tail -1)
  b=$("$NEW" --quiet run "$spec" --out "$T/new" "${short[@]}" "${extra[@]}" "${bs[@]}" "${ns[@]}" 2>"$T/new.err" | tail -1)
  if [ ! -f "$a/metrics.json" ] || [ ! -f "$b/metrics.json" ]; then
    echo "FAIL $spec ${extra[*]}: a run failed: $(tail -1 "$T/old.err") | $(tail -1 "$T/new.err")"
    fail=$((fail+1)); continue
  fi
  verdict=$(python3 - "$a" "$b" <<'PY'
import filecmp, json, os, re, sys
a, b = sys.argv[1:3]
def clean(m, run):  # without timing, memory, the run id, the new noise block and the run's path
    if isinstance(m, dict):
        return {k: clean(v, run) for k, v in m.items()
                if k not in ("timing", "memory", "run_id", "noise", "tokens_per_s")
                and not k.endswith("_s") and "seconds" not in k}
    if isinstance(m, list): return [clean(x, run) for x in m]
    if isinstance(m, str): return m.replace(run, "RUN")
    return m
def without_run_id(raw):  # a run id is the run's start time: provenance records it
    return re.sub(rb'run_id\\?": ?\\?"[0-9a-zA-Z_-]*', b'run_id:RUN', raw)
def same_file(x, y):  # byte for byte, but for the run id in provenance (JSON, safetensors header)
    return filecmp.cmp(x, y, shallow=False) or \
        without_run_id(open(x, "rb").read()) == without_run_id(open(y, "rb").read())
bad = []
ma, mb = (clean(json.load(open(os.path.join(d, "metrics.json"))), d) for d in (a, b))
for k in sorted(set(ma) | set(mb)):
    if ma.get(k) != mb.get(k): bad.append(f"metrics.{k}")
files = 0
for root, _, names in os.walk(a):
    for n in names:
        rel = os.path.relpath(os.path.join(root, n), a)
        if not (n.endswith(".safetensors") or rel.startswith("synthetic")): continue
        files += 1
        other = os.path.join(b, rel)
        if not os.path.exists(other) or not same_file(os.path.join(a, rel), other):
            bad.append(rel)
print(("differ: " + ", ".join(bad)) if bad else f"identical ({files} files, metrics)")
PY
)
  case "$verdict" in identical*) pass=$((pass+1)); echo "ok   $spec ${extra[*]}: $verdict" ;;
                     *) fail=$((fail+1)); echo "FAIL $spec ${extra[*]}: $verdict" ;; esac
done
echo "numbers_stay: $pass passed, $fail failed"
[ "$fail" = 0 ]
