#!/usr/bin/env bash
# Data parallel over c10d Gloo on this machine (issue 21, part 4): `dpft run --nproc 2` gives
# the numbers of a one-process run (per-step loss and batch size, final eval, epsilon) for
# dp-sgd (per example and per user) and pe-sgd; rank 0 alone writes the run directory; a rank killed mid-run ends the
# other with a clear error (no hang), and the run resumes, with 2 ranks or with 1, to the
# numbers of the uninterrupted run. Exit 77 (skipped) when this dpft was built without Gloo.
# Usage: dist_test.sh PATH/TO/dpft SOURCE_DIR
set -u
DPFT="$1"; SRC="$2"
source "$(dirname "$0")/shell_check.sh"
cd "$SRC"
export DPFT_DIST_TIMEOUT=120  # a hang fails the test in minutes, not in the default 30
export TMPDIR="$T/tmp"        # where ranks other than 0 keep their scratch run directories
mkdir -p "$TMPDIR"

cat > "$T/dp.yaml" <<YAML
name: dp
seed: 3
model: {path: "", peft: {kind: lora, r: 4, alpha: 8, targets: [c_attn], dropout: 0}}
data:
  train: {path: experiments/data/pubmed_sample/train.csv, text_column: text, num_samples: 60}
  eval: {path: experiments/data/pubmed_sample/eval.csv, text_column: text, num_samples: 8}
  max_length: 32
privacy: {epsilon: 2, delta: 1.0e-5, sampling_rate: 0.25, clip_norm: 0.5, noise_seed: 3}
train: {steps: 6, micro_batch_size: 4, lr: 1.0e-2}
output: {non_private_stats: true, checkpoint_every: 1}
method: {name: dp-sgd}
YAML

# same METRICS_A METRICS_B: per-step loss and |B|, final eval loss/accuracy within 1e-5
# (relative), epsilon identical.
same() {
  python3 - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
def close(x, y): return abs(x - y) <= 1e-5 * max(1.0, abs(x), abs(y))
ha, hb = a["non_private"]["history"], b["non_private"]["history"]
bad = []
if len(ha) != len(hb) or len(ha) == 0: bad.append(f"history lengths {len(ha)} vs {len(hb)}")
for x, y in zip(ha, hb):
    if x["batch_size"] != y["batch_size"]: bad.append(f"step {x['step']}: |B| {x['batch_size']} vs {y['batch_size']}")
    if not close(x["loss"], y["loss"]): bad.append(f"step {x['step']}: loss {x['loss']} vs {y['loss']}")
for k in ("loss", "accuracy"):
    x, y = a["eval"]["final"][k], b["eval"]["final"][k]
    if not close(x, y): bad.append(f"final {k} {x} vs {y}")
if a["privacy"]["epsilon"] != b["privacy"]["epsilon"]: bad.append("epsilon differs")
if a["status"] != "ok" or b["status"] != "ok": bad.append("status not ok")
print("; ".join(bad) if bad else f"equal over {len(ha)} steps, final loss {a['eval']['final']['loss']:.6f}")
sys.exit(1 if bad else 0)
PY
}

# dp-sgd: 1 rank, then 2 ranks (the same noise: privacy.noise_seed is set).
R1=$("$DPFT" --quiet run "$T/dp.yaml" --out "$T/one" 2>"$T/one.err" | tail -1)
out=$("$DPFT" --quiet run "$T/dp.yaml" --out "$T/two" --nproc 2 2>"$T/two.err"); rc=$?
if [ "$rc" = 2 ] && grep -q "built without Gloo" "$T/two.err"; then
  echo "skipped: this dpft was built without Gloo (install libgloo-dev and rebuild)"; exit 77
fi
check "2-rank dp-sgd exits 0 (rc $rc: $(tail -3 "$T/two.err"))" [ "$rc" = 0 ]
check "one line on stdout, the run directory" [ "$(wc -l <<<"$out")" = 1 ] 
R2=$(tail -1 <<<"$out")
check "2-rank dp-sgd equals 1 rank" same "$R1/metrics.json" "$R2/metrics.json"
check "one run directory (rank 1 writes none)" [ "$(ls "$T/two/dp" | wc -l)" = 1 ]
check "manifest records world_size 2" grep -q '"world_size": 2' "$R2/manifest.json"
check "no scratch directory left" [ -z "$(ls "$TMPDIR")" ]

# privacy.unit user (rows 3k..3k+2 of the file one user): each rank takes whole users, clips
# each user's summed gradient, and the sum over ranks is the one-process run's.
awk 'NR == 1 {print "text,who"; next} {print $0 ",u" int((NR - 2) / 3)}' \
  experiments/data/pubmed_sample/train.csv > "$T/users.csv"
USER_SET=(--set privacy.unit=user --set data.train.user_column=who --set "data.train.path=$T/users.csv"
          --set data.train.num_samples=0 --set privacy.sampling_rate=0.1)
U1=$("$DPFT" --quiet run "$T/dp.yaml" --out "$T/u1" "${USER_SET[@]}" 2>"$T/u1.err" | tail -1)
U2=$("$DPFT" --quiet run "$T/dp.yaml" --out "$T/u2" --nproc 2 "${USER_SET[@]}" 2>"$T/u2.err" | tail -1)
check "2-rank user-level dp-sgd runs ($(tail -2 "$T/u2.err"))" [ -f "$U2/metrics.json" ]
check "2-rank user-level dp-sgd equals 1 rank" same "$U1/metrics.json" "$U2/metrics.json"
check "  over 134 users, several rows each" python3 -c "
import json, sys
m = json.load(open('$U2/metrics.json'))
h = m['non_private']['history']
sys.exit(0 if m['privacy']['unit']['count'] == 134 and any(x.get('rows', 0) > x['batch_size'] for x in h) else 1)"

# Keyed noise (the default; the specs above set noise_seed so that runs can be compared): rank 0
# alone holds the key, the run finishes with 1 rank's epsilon and leaves no key behind.
out=$("$DPFT" --quiet run "$T/dp.yaml" --out "$T/keyed" --nproc 2 --set privacy.noise_seed=null 2>"$T/keyed.err"); rc=$?
RK=$(tail -1 <<<"$out")
check "2-rank keyed dp-sgd exits 0 (rc $rc: $(tail -2 "$T/keyed.err"))" [ "$rc" = 0 ]
check "2-rank keyed dp-sgd: mode keyed, 1 rank's epsilon" python3 -c "
import json, sys
a, b = (json.load(open(p)) for p in ('$R1/metrics.json', '$RK/metrics.json'))
sys.exit(0 if b['privacy']['noise']['mode'] == 'keyed' and a['privacy']['epsilon'] == b['privacy']['epsilon'] and b['status'] == 'ok' else 1)"
check "2-rank keyed dp-sgd: no noise.key left" [ ! -e "$RK/noise.key" ]

# A rank killed after step 3: the other ends with the data-parallel error, no hang.
start=$(date +%s)
DPFT_CRASH_AT=step3 DPFT_CRASH_RANK=1 "$DPFT" --quiet run "$T/dp.yaml" --out "$T/kill" --nproc 2 \
  >/dev/null 2>"$T/kill.err"; rc=$?
took=$(( $(date +%s) - start ))
check "killed rank: the run fails (rc $rc)" [ "$rc" != 0 ]
check "killed rank: rank 0 names the failed collective ($(grep -m1 'rank 0' "$T/kill.err"))" \
  grep -q "data parallel: rank 0 of 2: .* failed .*another rank failed, was killed" "$T/kill.err"
check "killed rank: the launcher names rank 1" grep -q "rank 1 ended with exit code 137" "$T/kill.err"
check "killed rank: ended in ${took} s, well within the timeout" [ "$took" -lt 100 ]
K=$(ls -d "$T"/kill/dp/*/)
K=${K%/}
check "killed rank: a checkpoint to resume from" [ -f "$K/checkpoint/state.json" ]
cp -r "$K" "$T/kill_copy"
out=$("$DPFT" --quiet run --resume "$K" --nproc 2 2>"$T/res2.err"); rc=$?
check "resume with 2 ranks exits 0 (rc $rc: $(tail -2 "$T/res2.err"))" [ "$rc" = 0 ]
check "resumed on 2 ranks equals the uninterrupted run" same "$R1/metrics.json" "$K/metrics.json"
out=$("$DPFT" --quiet run --resume "$T/kill_copy" 2>"$T/res1.err"); rc=$?
check "resume with 1 rank exits 0 (rc $rc: $(tail -2 "$T/res1.err"))" [ "$rc" = 0 ]
check "resumed on 1 rank equals the uninterrupted run" same "$R1/metrics.json" "$T/kill_copy/metrics.json"

# pe-sgd: G and H computed in shards and gathered; rank 0 projects; each rank generates its
# share of the prompt batches of every evolved set (the initial one is rank 0's).
cat > "$T/pe.yaml" <<YAML
name: pe
seed: 5
model: {path: "", peft: {kind: lora, r: 4, alpha: 8, targets: [c_attn], dropout: 0}}
data:
  train: {path: experiments/data/pubmed_sample/train.csv, text_column: text, num_samples: 60}
  eval: {path: experiments/data/pubmed_sample/eval.csv, text_column: text, num_samples: 8}
  max_length: 32
privacy: {epsilon: 2, delta: 1.0e-5, sampling_rate: 0.25, clip_norm: 1.0, noise_seed: 5}
train: {steps: 3, micro_batch_size: 4, lr: 1.0e-2}
output: {non_private_stats: true}
method:
  name: pe-sgd
  prompts: experiments/prompts/pubmed.yaml
  synthetic_size: 7
  variation_fold: 2
  # several batches: generation is sharded; min_new_tokens: the embedded model may end a
  # rewrite at once (every sample empty is an error, rightly)
  generation: {max_new_tokens: 8, min_new_tokens: 8, batch_size: 2}
YAML
P1=$("$DPFT" --quiet run "$T/pe.yaml" --out "$T/pe1" 2>"$T/pe1.err" | tail -1)
P2=$("$DPFT" --quiet run "$T/pe.yaml" --out "$T/pe2" --nproc 2 2>"$T/pe2.err" | tail -1)
check "2-rank pe-sgd runs ($(tail -2 "$T/pe2.err"))" [ -f "$P2/metrics.json" ]
check "2-rank pe-sgd equals 1 rank" same "$P1/metrics.json" "$P2/metrics.json"
check "2-rank pe-sgd: the same synthetic sets" diff -r "$P1/synthetic" "$P2/synthetic"
check "2-rank pe-sgd: every rank's generated tokens counted" python3 -c '
import json, sys
a, b = (json.load(open(p + "/metrics.json"))["synthetic"] for p in sys.argv[1:3])
k = lambda m: (m["random_api"]["tokens"], m["variational_api"]["tokens"], m["variational_api"]["samples"])
sys.exit(not (k(a) == k(b) and k(a)[1] > 0))' "$P1" "$P2"

# Launch errors are clear: a world whose rank 0 never comes.
out=$(RANK=1 WORLD_SIZE=2 MASTER_PORT=1 DPFT_DIST_TIMEOUT=3 "$DPFT" --quiet run "$T/dp.yaml" \
      --out "$T/lonely" 2>&1); rc=$?
check "a rank without rank 0 fails (rc $rc)" [ "$rc" = 4 ]
check "  and says it could not join ($out)" has "$out" "could not join the world"
out=$(WORLD_SIZE=2 "$DPFT" --quiet run "$T/dp.yaml" --nproc 2 2>&1); rc=$?
check "--nproc inside a launched world is refused (rc $rc)" [ "$rc" = 2 ]

out=$(WORLD_SIZE=2 "$DPFT" --quiet run "$T/dp.yaml" 2>&1); rc=$?
check "WORLD_SIZE without RANK is refused (rc $rc)" [ "$rc" = 2 ]
check "  naming RANK" has "$out" "WORLD_SIZE is set but RANK is not"

# Two ranks started by hand (as torchrun would), rank 1 with another spec: both stop with exit
# 2 naming rank 1, before anything is trained.
port=$((20000 + RANDOM % 20000))
RANK=0 WORLD_SIZE=2 MASTER_PORT=$port "$DPFT" --quiet run "$T/dp.yaml" --out "$T/mis" \
  >/dev/null 2>"$T/mis0.err" &
p0=$!
RANK=1 WORLD_SIZE=2 MASTER_PORT=$port "$DPFT" --quiet run "$T/dp.yaml" --out "$T/mis" \
  --set train.lr=0.5 >/dev/null 2>"$T/mis1.err"; rc1=$?
wait $p0; rc0=$?
check "another spec on rank 1: rank 0 exits 2 (rc $rc0: $(tail -1 "$T/mis0.err"))" [ "$rc0" = 2 ]
check "another spec on rank 1: rank 1 exits 2 (rc $rc1)" [ "$rc1" = 2 ]
check "  rank 0 names rank 1" grep -q "rank(s) 1 resolved another spec" "$T/mis0.err"
check "  rank 1 names rank 1" grep -q "rank(s) 1 resolved another spec" "$T/mis1.err"
check "  nothing trained" [ "$(cat "$T"/mis/dp/*/metrics.jsonl 2>/dev/null | grep -c '"event":"step"')" = 0 ]

finish dist_test
