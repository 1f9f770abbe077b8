# Helpers for the shell tests (sourced): a temporary directory $T removed on exit, check
# DESCRIPTION COMMAND... (counts a pass when the command succeeds, prints FAIL otherwise),
# has / hasnt TEXT NEEDLE (fixed-string search), count TEXT REGEX (matching lines), and
# finish NAME (prints the tally; its status is the test's).
T=$(mktemp -d); [ -n "${KEEP_T:-}" ] && echo "T=$T" || trap 'rm -rf "$T"' EXIT
fail=0; pass=0
check() {
  local what="$1"; shift
  if "$@"; then pass=$((pass + 1)); else echo "FAIL: $what"; fail=$((fail + 1)); fi
}
has() { grep -qF -- "$2" <<<"$1"; }
hasnt() { ! grep -qF -- "$2" <<<"$1"; }
count() { grep -c -- "$2" <<<"$1"; }
finish() {
  echo "$1: $pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
