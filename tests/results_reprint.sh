#!/usr/bin/env bash
# The results pages (docs/results/*.md) re-print their tables from the run files committed beside
# them. A table printed by a command is preceded in its page by a marker line
#   <!-- reprint: COMMAND -->
# COMMAND is `dpft report ...` or `experiments/pe_sgd/per_seed.py ...`, with paths relative to
# the repository root (globs allowed; no quotes, variables or other shell syntax). This runs
# COMMAND in the repository root (`dpft` is the binary given) and requires its standard output to
# be, line for line, the lines that follow the marker, and the line after those to be blank or
# the end of the page. Hand-written tables carry no marker. Fails when no marker is found.
# Reads only; 18 tables took 26 s on a busy 2-core VM.
# Usage: results_reprint.sh PATH/TO/dpft [REPO_ROOT [PAGE.md...]]
#   REPO_ROOT defaults to the parent of this script's directory; PAGEs to REPO_ROOT/docs/results/*.md.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 PATH/TO/dpft [REPO_ROOT [PAGE.md...]]" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
DPFT="$1"
[[ "$DPFT" = /* ]] || DPFT="$PWD/$DPFT"
ROOT=$(cd "${2:-$HERE/..}" && pwd)
shift $(($# >= 2 ? 2 : 1))
pages=()
for p in "$@"; do [[ "$p" = /* ]] && pages+=("$p") || pages+=("$PWD/$p"); done
[ ${#pages[@]} -gt 0 ] || pages=("$ROOT"/docs/results/*.md)
[ -x "$DPFT" ] || { echo "results_reprint: $DPFT is not an executable" >&2; exit 2; }
source "$HERE/shell_check.sh"
export PYTHONIOENCODING=utf-8
cd "$ROOT"

# reprint PAGE LINENO COMMAND: runs COMMAND and compares its output with the page from the line
# after LINENO (1-based, the marker's); the page's lines are in the array `page`.
reprint() {
  local name="$1" at="$2" cmd="$3" word rc=0 out
  local where="$name:$at: $cmd"
  case "$cmd" in
    *[\$\`\;\|\&\<\>\(\)\'\"\\]*)
      echo "$where: the command has shell syntax; only words and globs are allowed"; return 1 ;;
  esac
  local -a words argv
  read -ra words <<<"$cmd"
  case "${words[0]:-} ${words[1]:-}" in
    "dpft report") argv=("$DPFT") ;;
    "experiments/pe_sgd/per_seed.py "*) argv=(python3 experiments/pe_sgd/per_seed.py) ;;
    *) echo "$where: not a dpft report or per_seed.py command"; return 1 ;;
  esac
  local -a expanded=()
  for word in "${words[@]:1}"; do
    if [[ "$word" == *.jsonl/* && -f "${word%%.jsonl/*}.jsonl" ]]; then
      expanded+=("$word")  # PACK/SUB: the command reads SUB's globs inside the run pack
    elif [[ "$word" == *[*?[]* ]]; then
      local -a hits=()
      mapfile -t hits < <(compgen -G "$word" | LC_ALL=C sort)
      [ ${#hits[@]} -gt 0 ] || { echo "$where: $word matches nothing"; return 1; }
      expanded+=("${hits[@]}")
    else
      expanded+=("$word")
    fi
  done
  out=$("${argv[@]}" "${expanded[@]}" 2>"$T/stderr") || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "$where: exit status $rc"; sed 's/^/  stderr: /' "$T/stderr"; return 1
  fi
  local -a got
  mapfile -t got <<<"$out"
  if [ -z "$out" ]; then echo "$where: printed nothing"; return 1; fi
  local i
  for i in "${!got[@]}"; do
    local line=$((at + 1 + i))
    local want="${page[at + i]-<end of page>}"
    if [ "$want" != "${got[i]}" ]; then
      echo "$where: page line $line differs from output line $((i + 1))"
      echo "  page:    $want"
      echo "  printed: ${got[i]}"
      return 1
    fi
  done
  local after=$((at + ${#got[@]}))
  if [ "$after" -lt "${#page[@]}" ] && [ -n "${page[after]}" ]; then
    echo "$where: page line $((after + 1)) follows the printed table but was not printed"
    echo "  page:    ${page[after]}"
    return 1
  fi
}

marker='^<!-- reprint: (.*[^ ]) *-->$'
markers=0
for p in "${pages[@]}"; do
  [ -f "$p" ] || { echo "FAIL: $p is not a file"; fail=$((fail + 1)); continue; }
  mapfile -t page <"$p"
  name=${p#"$ROOT"/}
  for n in "${!page[@]}"; do
    if [[ "${page[n]}" =~ $marker ]]; then
      markers=$((markers + 1))
      check "$name:$((n + 1)) reprints" reprint "$name" "$((n + 1))" "${BASH_REMATCH[1]}"
    fi
  done
done
check "at least one reprint marker in ${pages[*]}" [ "$markers" -gt 0 ]
finish "results_reprint ($markers tables)"
