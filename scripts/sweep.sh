#!/usr/bin/env bash
# Sweep `dpft run` over spec files x epsilons x seeds, one predictable directory per combination:
#   OUT/<spec-stem>/eps<E>/s<S>/<name>/<run-id>/     (dpft run SPEC --out OUT/<stem>/eps<E>/s<S>)
# A combination whose directory already holds a metrics.json with status "ok" is skipped, so a
# crashed or interrupted sweep is restarted with the same command; so is one whose run was
# turned into a run file (OUT/<stem>/eps<E>/s<S>.run.json, experiments/run_files.py, as results
# pages keep runs), so a sweep whose finished runs are committed as they land resumes on a new
# machine. A combination whose directory holds an unfinished run with a checkpoint (killed,
# interrupted or stopped; set output.checkpoint_every for long runs) is continued with
# `dpft run --resume RUN_DIR` (the run's own config: extra args are not passed) instead of
# starting over; unfinished runs without a checkpoint (killed before the first) are moved to
# OUT/.stale/ and the combination starts over. A combination that another process is running
# (a `dpft run --out DIR` or `--resume DIR/...` on this machine, e.g. a second sweep over the
# same OUT to use another core) is left to it and counted as running elsewhere. Non-private
# specs (method `sgd`, found with `dpft run --dry-run`, or listed in --no-eps-for) run once per
# seed, without the epsilon override, in OUT/<stem>/noeps/s<S>. A failed run is reported and
# the sweep goes on; the exit status is 1 if any run failed (2 for bad arguments or specs;
# 130/143 when a run was interrupted by SIGINT/SIGTERM, which stops the sweep).
#
# Usage: scripts/sweep.sh --specs "a.yaml b.yaml" --seeds "0 1 2" --eps "1 inf" --out runs/sweep
#          [--dpft build/dpft] [--no-eps-for "sgd.yaml"] [--threads N] [--dry-run]
#          [-- extra dpft run args]
# --threads N: each run's LibTorch threads (dpft --threads N; default: one per core).
# One combination per job (a Slurm array, scripts/slurm/sweep_array.sbatch): --count prints the
# number of combinations and exits; --task I runs only combination I (1-based, the [I/N] of the
# listing), still skipped when done.
set -uo pipefail

usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "sweep: $*" >&2; exit 2; }

SPECS="" SEEDS="" EPS="" OUT="" DPFT="build/dpft" NO_EPS_FOR="" DRY=0 EXTRA=() TASK="" COUNT=0
GLOBAL=()  # dpft's own options, before the subcommand
while [ $# -gt 0 ]; do
  case "$1" in
    --specs) SPECS="${2-}"; shift 2 || die "--specs needs a value" ;;
    --seeds) SEEDS="${2-}"; shift 2 || die "--seeds needs a value" ;;
    --eps) EPS="${2-}"; shift 2 || die "--eps needs a value" ;;
    --out) OUT="${2-}"; shift 2 || die "--out needs a value" ;;
    --dpft) DPFT="${2-}"; shift 2 || die "--dpft needs a value" ;;
    --no-eps-for) NO_EPS_FOR="${2-}"; shift 2 || die "--no-eps-for needs a value" ;;
    --dry-run) DRY=1; shift ;;
    --threads) [[ "${2-}" =~ ^[0-9]+$ ]] || die "--threads needs a number of threads"
               GLOBAL=(--threads "$2"); shift 2 ;;
    --task) TASK="${2-}"; shift 2 || die "--task needs a value" ;;
    --count) COUNT=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ -n "$SPECS" ] || die "--specs is required"
[ -n "$SEEDS" ] || die "--seeds is required"
[ -n "$EPS" ] || die "--eps is required"
[ -n "$OUT" ] || die "--out is required"
[ -x "$DPFT" ] || die "--dpft $DPFT is not an executable (build it with scripts/build.sh)"

read -r -a spec_list <<<"$SPECS"
read -r -a seed_list <<<"$SEEDS"
read -r -a eps_list <<<"$EPS"
read -r -a no_eps_list <<<"$NO_EPS_FOR"

stem() { local b; b=$(basename "$1"); b="${b%.yaml}"; echo "${b%.yml}"; }

# A spec runs without the epsilon override if --no-eps-for names it (path or file name) or its
# method is sgd (non-private: it would spend eps = inf whatever the override).
declare -A no_eps seen_stem
for spec in "${spec_list[@]}"; do
  [ -f "$spec" ] || die "spec $spec does not exist"
  s=$(stem "$spec")
  [ -z "${seen_stem[$s]-}" ] || die "specs ${seen_stem[$s]} and $spec share the name '$s'"
  seen_stem[$s]="$spec"
  for n in "${no_eps_list[@]}"; do
    [ "$n" = "$spec" ] || [ "$n" = "$(basename "$spec")" ] && no_eps[$spec]=1
  done
  # The spec as given, then (unless --no-eps-for names it) at every epsilon: every epsilon must
  # be accepted by every private spec, found out now, not hours later. One dpft process per spec.
  # A real sweep also runs the pre-flight (the model directory and data files opened, N
  # counted, the releases planned at every epsilon); --dry-run and --count check the specs alone.
  check=()
  [ -z "${no_eps[$spec]-}" ] && check=(--check-eps "${eps_list[@]}")
  [ "$DRY" = 1 ] || [ "$COUNT" = 1 ] && check+=(--no-data)
  dry=$("$DPFT" ${GLOBAL[@]+"${GLOBAL[@]}"} --quiet run "$spec" --dry-run ${check[@]+"${check[@]}"} ${EXTRA[@]+"${EXTRA[@]}"} 2>&1)
  rc=$?
  method=$(sed -n 's/^# dry run: method \([^,]*\),.*/\1/p' <<<"$dry")
  [ -n "$method" ] || die "spec $spec is invalid: $(tail -n 1 <<<"$dry")"
  [ "$method" = sgd ] && no_eps[$spec]=1
  if [ "$rc" != 0 ] && [ -z "${no_eps[$spec]-}" ]; then
    msg=$(tail -n 1 <<<"$dry"); msg=${msg#dpft: error: }
    die "spec $spec ${msg#the spec } (list it in --no-eps-for?)"
  fi
done

# The combinations: spec|eps|seed ("-" = no epsilon override).
combos=()
for spec in "${spec_list[@]}"; do
  if [ -n "${no_eps[$spec]-}" ]; then eps_for=("-"); else eps_for=("${eps_list[@]}"); fi
  for e in "${eps_for[@]}"; do
    for s in "${seed_list[@]}"; do combos+=("$spec|$e|$s"); done
  done
done
total=${#combos[@]}
if [ "$COUNT" = 1 ]; then echo "$total"; exit 0; fi
if [ -n "$TASK" ]; then
  [[ "$TASK" =~ ^[0-9]+$ ]] && [ "$TASK" -ge 1 ] && [ "$TASK" -le "$total" ] ||
    die "--task $TASK: must be one of 1..$total (the combinations; --count prints how many)"
fi

# The run directory under $1 whose metrics.json says status "ok", or the run file $1.run.json
# holding such metrics, if any.
finished_run() {
  local m
  if [ -f "$1.run.json" ] && python3 -c \
    'import json,sys; sys.exit(json.load(open(sys.argv[1]))["metrics"].get("status") != "ok")' \
    "$1.run.json" 2>/dev/null; then
    echo "$1.run.json"
    return 0
  fi
  while IFS= read -r m; do
    if python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1])).get("status") != "ok")' \
      "$m" 2>/dev/null; then
      dirname "$m"
      return 0
    fi
  done < <(find "$1" -name metrics.json 2>/dev/null | sort)
  return 1
}

# The newest unfinished run directory under $1 that has a checkpoint to continue from, if any.
resumable_run() {
  local st r=""
  while IFS= read -r st; do r=$(dirname "$(dirname "$st")"); done \
    < <(find "$1" -path '*/checkpoint/state.json' 2>/dev/null | sort)
  [ -n "$r" ] && echo "$r"
}

# The pid of a process running the combination in DIR (dpft run --out DIR, or --resume of a
# run under DIR), if any.
running_elsewhere() {
  pgrep -f -- "(--out $1|--resume $1/[^ ]*)( |$)" | head -n 1 | grep .
}

i=0 ran=0 skipped=0 failed=0 busy=0
for c in "${combos[@]}"; do
  IFS='|' read -r spec e s <<<"$c"
  i=$((i + 1))
  [ -z "$TASK" ] || [ "$i" = "$TASK" ] || continue
  if [ "$e" = "-" ]; then
    dir="$OUT/$(stem "$spec")/noeps/s$s"
    args=(run "$spec" --set seed="$s" --out "$dir" "${EXTRA[@]}")
  else
    dir="$OUT/$(stem "$spec")/eps$e/s$s"
    args=(run "$spec" --set seed="$s" --set privacy.epsilon="$e" --out "$dir" "${EXTRA[@]}")
  fi
  tag="[$i/$total] $(stem "$spec") eps=$([ "$e" = - ] && echo none || echo "$e") seed=$s"
  if done_dir=$(finished_run "$dir"); then
    echo "$tag: skipped (done: $done_dir)"
    skipped=$((skipped + 1))
    continue
  fi
  if pid=$(running_elsewhere "$dir"); then
    echo "$tag: left to the process running it (pid $pid)"
    busy=$((busy + 1))
    continue
  fi
  verb=run
  if resume_dir=$(resumable_run "$dir"); then
    verb=resume
    args=(run --resume "$resume_dir")
  elif [ "$DRY" != 1 ] && [ -d "$dir" ] && ! pgrep -f -- "--out $dir( |$)" > /dev/null; then
    # Runs killed before their first checkpoint: nothing to continue. Moved aside (not deleted)
    # so that the fresh run is the combination's only run directory (run files: one per
    # combination).
    while IFS= read -r m; do
      stale=$(dirname "$m")
      aside="$OUT/.stale/${stale#"$OUT"/}"
      mkdir -p "$(dirname "$aside")" && mv "$stale" "$aside" &&
        echo "$tag: moved an unfinished run without a checkpoint to $aside"
    done < <(find "$dir" -name metrics.json 2>/dev/null | sort)
  fi
  if [ "$DRY" = 1 ]; then
    echo "$tag: would $verb: $DPFT ${GLOBAL[*]+"${GLOBAL[*]} "}${args[*]}"
    continue
  fi
  mkdir -p "$dir"
  t0=$(date +%s.%N)
  "$DPFT" ${GLOBAL[@]+"${GLOBAL[@]}"} "${args[@]}" >>"$dir/sweep.log" 2>&1
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" = 0 ]; then
    echo "$tag: $([ "$verb" = run ] && echo ran || echo resumed) (${secs}s) -> $(finished_run "$dir" || echo "$dir (no ok metrics.json?)")"
    ran=$((ran + 1))
  else
    echo "$tag: FAILED (exit $rc, ${secs}s; log: $dir/sweep.log)"
    failed=$((failed + 1))
    if [ "$rc" = 130 ] || [ "$rc" = 143 ]; then
      echo "sweep: interrupted; rerun the same command to continue" >&2
      exit "$rc"
    fi
  fi
done
echo "sweep: $total combinations${TASK:+ (task $TASK only)}: $ran ran, $skipped skipped, $failed failed$([ "$busy" = 0 ] || echo ", $busy running elsewhere")"
[ "$failed" = 0 ] || exit 1
