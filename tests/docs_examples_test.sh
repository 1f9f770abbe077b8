#!/usr/bin/env bash
# Docs that cannot rot: every command line of README.md's and docs/cli.md's example blocks
# (fenced as ```sh example) runs and exits 0, from a scratch directory that sees the
# repository's experiments/ and models/ (outputs land in the scratch directory). Power: a
# planted block with a command that fails must be reported.
# Usage: docs_examples_test.sh PATH/TO/dpft SOURCE_DIR
set -u
DPFT="$1"; SRC="$2"
source "$(dirname "$0")/shell_check.sh"
mkdir -p "$T/work"
ln -s "$SRC/experiments" "$T/work/experiments"
ln -s "$SRC/models" "$T/work/models"
# The command lines of a Markdown file's ```sh example blocks, one per line.
examples() { awk '/^```sh example/ { on = 1; next } /^```/ { on = 0 } on && NF && $1 !~ /^#/' "$1"; }
# Runs each example line of FILE with `dpft` as the binary under test; prints the failures.
run_examples() {
  local file="$1" n=0 line out rc
  while IFS= read -r line; do
    n=$((n + 1))
    out=$(cd "$T/work" && DPFT_BIN="$DPFT" bash -c "dpft() { \"\$DPFT_BIN\" \"\$@\"; }; $line" 2>&1)
    rc=$?
    if [ "$rc" != 0 ]; then echo "FAIL: $file: '$line' exited $rc: $(tail -n 2 <<<"$out")"; fi
    check "$(basename "$file"): $line" [ "$rc" = 0 ]
  done < <(examples "$file")
  check "$(basename "$file") has example lines ($n)" [ "$n" -gt 0 ]
}
run_examples "$SRC/README.md"
run_examples "$SRC/docs/cli.md"
# Power: a planted failing example is caught.
printf '# x\n\n```sh example\ndpft run no-such-spec.yaml\n```\n' > "$T/planted.md"
before=$fail
run_examples "$T/planted.md" > /dev/null
check "a failing example is reported" [ "$fail" = $((before + 1)) ]
fail=$before
finish docs_examples
