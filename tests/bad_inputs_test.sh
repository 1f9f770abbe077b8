#!/usr/bin/env bash
# The bad-input corpus (tests/data/bad_inputs/cases.tsv): every hostile spec, data file, model
# checkpoint, tokenizer, tampered resume and bad command line gives its documented exit code and
# a message naming the file / line / key, never crashes (no signal, no "internal error"), and
# leaves no run directory in status "running". ~1 minute on the 2-core dev VM.
# Usage: bad_inputs_test.sh PATH/TO/dpft REPO_ROOT [CASE_NAME...]
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 PATH/TO/dpft REPO_ROOT [CASE...]" >&2; exit 2; }
D=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
ROOT=$(cd "$2" && pwd)
shift 2
only=("$@")
C="$ROOT/tests/data/bad_inputs"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export DPFT_NO_COLOR=1

# The work area: the corpus, a tiny model, and a run stopped after one step.
cp -r "$C" "$W/base"
cd "$W/base" || exit 2
"$D" model init --arch gpt2 --preset tiny --tokenizer "$ROOT/models/tiny-gpt2" --out model \
  --quiet >/dev/null || { echo "bad_inputs: cannot build the tiny model"; exit 1; }
"$D" run base.yaml --stop-after 1 --quiet >"$W/stopped.out" 2>"$W/stopped.err"
R="$W/base/$(tail -1 "$W/stopped.out")"
grep -q '"status": "stopped"' "$R/manifest.json" 2>/dev/null ||
  { echo "bad_inputs: the stopped run for resume cases failed:"; cat "$W/stopped.err"; exit 1; }
R=$(cd "$R" && pwd)
export R D ROOT  # preps may use the run ($R), dpft ($D) and the repository ($ROOT)

pass=0 fail=0 n=0
while IFS=$'\t' read -r name code regex prep cmd; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  if [ ${#only[@]} -gt 0 ] && [[ ! " ${only[*]} " == *" $name "* ]]; then continue; fi
  n=$((n + 1))
  work="$W/case_$name"
  cp -r "$W/base" "$work"  # a fresh copy: cases never see each other's leftovers
  rm -rf "$work/runs"
  mkdir -p "$work/runs"
  cd "$work" || exit 2
  ln -sfn "$R" stopped_run
  why=""
  if [ "$prep" != "-" ] && ! bash -c "$prep" >"$work/prep.log" 2>&1; then
    why="prep failed: $(head -c 300 "$work/prep.log")"
  else
    eval "set -- $cmd"
    timeout 120 "$D" "$@" >"$work/out.txt" 2>"$work/err.txt"
    rc=$?
    err=$(cat "$work/err.txt")
    if [ "$rc" -ne "$code" ]; then
      why="exit $rc, expected $code"
    elif ! grep -qE -- "$regex" "$work/err.txt"; then
      why="message does not match /$regex/"
    elif grep -qiE "internal error|terminate called|Segmentation|Exception raised from" "$work/err.txt"; then
      why="crash or internal error in the message"
    fi
    stranded=$(grep -rl --include=manifest.json '"status": "running"' "$work" 2>/dev/null | head -1)
    [ -z "$why" ] && [ -n "$stranded" ] && why="left a run directory in status running: $stranded"
  fi
  if [ -z "$why" ]; then
    pass=$((pass + 1))
    [ -n "${VERBOSE:-}" ] && echo "ok $name: $(tail -c 300 "$work/err.txt" | tr '\n' ' ')"
  else
    fail=$((fail + 1))
    echo "FAIL $name: $why"
    echo "  dpft $cmd"
    echo "  stderr: $(tail -c 400 "$work/err.txt" 2>/dev/null)"
  fi
  cd "$W" && rm -rf "$work"
done <"$C/cases.tsv"
echo "bad_inputs: $pass of $n cases passed"
[ "$n" -gt 0 ] && [ "$fail" -eq 0 ]
