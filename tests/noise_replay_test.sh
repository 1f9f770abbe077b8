#!/usr/bin/env bash
# Noise nobody can replay (issue 68, docs/privacy.md "Noise modes"). The attack: take a DP run's
# export, run its config.resolved.yaml again on public data at sigma and at 2 sigma, subtract the
# two adapters (that is the noise, if it replays) and remove it from the victim's adapter. With
# privacy.noise_seed set the attack recovers the noise-free update (the test has power); with
# keyed noise (the default) the recovered update is no closer to the true one than the release.
# Also: noise.key is private (mode 0600, never exported, gone when the run finishes), a stopped
# keyed run resumes to the same numbers from two copies, a resume without its key is refused,
# and export refuses a seeded run unless told.
# Usage: noise_replay_test.sh PATH/TO/dpft SOURCE_DIR
set -u
DPFT="$1"; SRC="$2"
source "$(dirname "$0")/shell_check.sh"  # $T, pass / fail, finish
cd "$SRC"
ok()  { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }

cat > "$T/s.yaml" <<YAML
name: replay
seed: 3
model: {path: "", peft: {kind: lora, r: 4, alpha: 8, targets: [c_attn]}}
data:
  train: {path: experiments/data/pubmed_sample/train.csv, text_column: text, num_samples: 24}
  max_length: 32
privacy: {noise_multiplier: 1.0, delta: 1.0e-5, sampling_rate: 1.0, clip_norm: 1.0}
train: {steps: 1, micro_batch_size: 24, lr: 0.5, optimizer: sgd}
method: {name: dp-sgd}
YAML
PUBLIC=experiments/data/pubmed_sample/eval.csv
run() { "$DPFT" --quiet run "$@" --out "$T/runs" 2>"$T/err" | tail -1; }

# The truth (sigma 0) and the starting point (lr 0), both on the private data.
TRUE=$(run "$T/s.yaml" --set privacy.noise_multiplier=0)
THETA0=$(run "$T/s.yaml" --set train.lr=0)

# attack MODE SET...: victim on the private rows, exported; attacker reruns the export's config.
attack() {
  local mode="$1"; shift
  local V; V=$(run "$T/s.yaml" "$@")
  [ -f "$V/adapter/adapter_model.safetensors" ] || { bad "$mode: the victim run left no adapter"; cat "$T/err"; return; }
  [ ! -e "$V/noise.key" ] || bad "$mode: noise.key is still in the finished run"
  local E="$T/export-$mode" flag=""
  [ "$mode" = seeded ] && flag="--allow-seeded-noise"
  "$DPFT" --quiet export "$V" --out "$E" $flag >/dev/null 2>"$T/err" || { bad "$mode: export failed"; cat "$T/err"; return; }
  local P1 P2
  P1=$(run "$E/config.resolved.yaml" --set data.train.path=$PUBLIC)
  P2=$(run "$E/config.resolved.yaml" --set data.train.path=$PUBLIC --set privacy.noise_multiplier=2.0)
  python3 - "$mode" "$THETA0" "$TRUE" "$V" "$P1" "$P2" > "$T/verdict" <<'PY'
import json, math, struct, sys
from array import array
def load(d):  # the adapter's tensors, concatenated in name order (float32 -> float)
    b = open(d + "/adapter/adapter_model.safetensors", "rb").read()
    n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); base = 8 + n
    out = []
    for k in sorted(h):
        if k == "__metadata__": continue
        assert h[k]["dtype"] == "F32", h[k]["dtype"]
        s, t = h[k]["data_offsets"]
        a = array("f"); a.frombytes(b[base + s:base + t]); out.extend(a)
    return out
sub = lambda a, b: [x - y for x, y in zip(a, b)]
def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
mode, t0, tr, v, p1, p2 = sys.argv[1], *map(load, sys.argv[2:])
truth = sub(tr, t0)
release = cos(sub(v, t0), truth)
recovered = cos(sub(sub(v, sub(p2, p1)), t0), truth)
print(f"{mode} release {release:.6f} recovered {recovered:.6f}")
ok = recovered > 0.9999 if mode == "seeded" else recovered <= release + 0.05
print("PASS" if ok and release < 0.5 else "FAIL")
PY
  echo "  $(head -1 "$T/verdict")"
  grep -qx PASS "$T/verdict" || { bad "$mode: the attack's outcome is not the expected one ($(head -1 "$T/verdict"))"; return; }
  ok
}
attack seeded --set privacy.noise_seed=11
attack keyed

# A seeded run is refused by export unless told, with the label in the manifest when told.
S=$(run "$T/s.yaml" --set privacy.noise_seed=11)
out=$("$DPFT" export "$S" --out "$T/x1" 2>&1); rc=$?
[ "$rc" = 2 ] && grep -qF -- "--allow-seeded-noise" <<<"$out" && ok || bad "export of a seeded run: exit $rc, want 2 naming --allow-seeded-noise: $out"
grep -q '"noise seeded: not shareable"' "$T/export-seeded/export_manifest.json" && ok || bad "the seeded export is not labelled"
grep -q '"shareable": false' "$T/export-seeded/export_manifest.json" && ok || bad "the seeded export does not say it is not shareable"
grep -q '"mode": "keyed"' "$T/export-keyed/export_manifest.json" && ok || bad "the keyed export does not name its noise mode"

# A stopped keyed run: noise.key mode 0600, never exported; two copies resume to one result;
# without the key the resume is refused (exit 3, naming noise.key) and nothing trains.
R=$(run "$T/s.yaml" --set train.steps=3 --set privacy.sampling_rate=0.5 --stop-after 1)
if [ ! -f "$R/noise.key" ]; then
  bad "a stopped keyed run has no noise.key"
else
  [ "$(stat -c %a "$R/noise.key")" = 600 ] && ok || bad "noise.key has mode $(stat -c %a "$R/noise.key"), want 600"
  cp -r "$R" "$T/copy"; cp -r "$R" "$T/nokey"; rm "$T/nokey/noise.key"
  "$DPFT" --quiet run --resume "$R" >/dev/null 2>"$T/err" || { bad "resume failed"; cat "$T/err"; }
  "$DPFT" --quiet run --resume "$T/copy" >/dev/null 2>"$T/err" || { bad "resume of the copy failed"; cat "$T/err"; }
  if cmp -s "$R/adapter/adapter_model.safetensors" "$T/copy/adapter/adapter_model.safetensors"; then ok
  else bad "two copies of a stopped keyed run resumed to different adapters"; fi
  out=$("$DPFT" run --resume "$T/nokey" 2>&1); rc=$?
  [ "$rc" = 3 ] && grep -qF "noise.key" <<<"$out" && ok || bad "resume without noise.key: exit $rc: $out"
  [ "$(grep -c '"event":"step"' "$T/nokey/metrics.jsonl")" = 1 ] && ok || bad "the keyless resume trained"
fi
for e in "$T"/export-*; do [ ! -e "$e/noise.key" ] && ok || bad "$e holds noise.key"; done

finish noise_replay
