#!/usr/bin/env bash
# One ctest entry per test source file: runs the file's fast Catch2 cases in one process, so
# LibTorch starts once per file instead of once per case (about 0.5 s each on the dev VM).
# Exit 0: every case passed. Exit 1: a case failed or none matched (Catch2's output names it).
# Exit 77 (ctest: skipped): none failed, and a case WARNed "skipped: ../shared/data/...".
# Usage: catch_group.sh PATH/TO/dpft_tests FILE_NAME_WITHOUT_EXTENSION
set -u
bin="$1"; file="$2"
out=$(mktemp); trap 'rm -f "$out"' EXIT
"$bin" --filenames-as-tags --warn NoTests "[#$file]~[.]~[slow]~[cuda]" >"$out" 2>&1
rc=$?
cat "$out"
[ "$rc" -eq 0 ] || { echo "catch_group: $file: exit $rc" >&2; exit 1; }
if grep -q "skipped: \.\./shared/data" "$out"; then
  echo "catch_group: $file: cases above skipped (../shared/data absent); the others passed"
  exit 77
fi
exit 0
