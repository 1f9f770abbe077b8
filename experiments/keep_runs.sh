#!/usr/bin/env bash
# Keep a sweep's finished runs as run files, in place, so that they can be committed as they
# land and a sweep interrupted on one machine resumes on another (scripts/sweep.sh skips a
# combination whose s<S>.run.json holds an ok run). For every combination directory under OUT
# (OUT/<stem>/eps<E>/s<S>) whose run's metrics.json says status "ok" and that no running dpft
# writes to, experiments/compact_results.py keeps what the results pages read and
# experiments/run_files.py turns it into OUT/<stem>/eps<E>/s<S>.run.json. Unfinished and
# failed runs are left as they are, and so are runs that wrote a synthetic set (metrics
# `synthetic`: ctcl, PE) not yet scored (no `synthetic_eval`: compaction drops the set; score
# it with dpft eval-synthetic --run, as experiments/ctcl/run.sh does, first), unless
# --unscored says their sets are not wanted (a learning-rate selection sweep, whose tables read
# the validation loss only; the sets are dropped). Prints each file it makes.
# Usage: experiments/keep_runs.sh [--unscored] OUT
set -euo pipefail
unscored=0
[ "${1:-}" = --unscored ] && { unscored=1; shift; }
[ $# = 1 ] && [ -d "$1" ] || { echo "keep_runs: usage: keep_runs.sh [--unscored] OUT (a sweep's --out directory)" >&2; exit 2; }
here=$(dirname "$0")
find "$1" -name metrics.json | sort | while IFS= read -r m; do
  run=$(dirname "$m")
  combo=$(dirname "$(dirname "$run")")
  [[ "$(basename "$combo")" =~ ^s[0-9]+$ ]] || continue
  python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1])).get("status") != "ok")' "$m" || continue
  if [ "$unscored" = 0 ] && python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); sys.exit(not ("synthetic" in m and not m.get("synthetic_eval")))' "$m"; then
    echo "keep_runs: $run: its synthetic set is not scored yet (dpft eval-synthetic --run); left as it is" >&2
    continue
  fi
  if pgrep -f -- "--out $combo( |$)" > /dev/null; then continue; fi
  python3 "$here/compact_results.py" "$combo" > /dev/null
  python3 "$here/run_files.py" "$combo" > /dev/null
  find "$combo" -depth -type d -empty -delete 2>/dev/null || true
  echo "$combo.run.json"
done
