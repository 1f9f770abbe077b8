#!/usr/bin/env bash
# tests/catch_group.sh's verdicts, checked against a fake test binary (no LibTorch, < 1 s):
#   all passed -> 0; passed with a "skipped: ../shared/data" WARN -> 77 (ctest: Not Run);
#   a failure -> 1 even when another case skipped (fail dominates); no case matched -> 1;
# and the binary is asked for exactly the file's fast cases.
# Usage: tests/catch_group_test.sh [REPO_ROOT]
set -uo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || exit 2
. tests/shell_check.sh

# The fake binary prints $FAKE_OUT, records its arguments and exits with $FAKE_RC.
cat >"$T/fake" <<'FAKE'
#!/usr/bin/env bash
printf '%s\n' "$@" >"$FAKE_ARGS"
printf '%s\n' "$FAKE_OUT"
exit "$FAKE_RC"
FAKE
chmod +x "$T/fake"
export FAKE_ARGS="$T/args"

# verdict OUT RC: catch_group.sh's exit status for a binary printing OUT and exiting with RC.
verdict() {
  FAKE_OUT="$1" FAKE_RC="$2" bash tests/catch_group.sh "$T/fake" test_demo >"$T/log" 2>&1
  echo $?
}
skip='WARNING: skipped: ../shared/data/glue/rte absent'
check "all passed -> 0" [ "$(verdict 'All tests passed (3 assertions in 2 test cases)' 0)" = 0 ]
check "skip + passed -> 77" [ "$(verdict "$skip" 0)" = 77 ]
check "skip message explains itself" grep -q "skipped (../shared/data absent)" "$T/log"
check "skip + failure -> 1" [ "$(verdict "$skip" 1)" = 1 ]
check "failure -> 1" [ "$(verdict 'test cases: 2 | 1 failed' 1)" = 1 ]
check "failure names the file" grep -q "catch_group: test_demo: exit 1" "$T/log"
check "no case matched (Catch2 exit 2) -> 1" [ "$(verdict 'No test cases matched' 2)" = 1 ]
check "binary output is passed through" grep -q "No test cases matched" "$T/log"
# A skip message about anything but ../shared/data is not a skip.
check "other WARN + passed -> 0" [ "$(verdict 'WARNING: skipped: no GPU' 0)" = 0 ]

verdict ok 0 >/dev/null
args=$(cat "$T/args")
check "asks for the file's cases only" has "$args" "[#test_demo]"
check "excludes hidden, slow and cuda cases" has "$args" "~[.]~[slow]~[cuda]"
check "uses file names as tags" has "$args" "--filenames-as-tags"
check "an empty selection is an error" has "$args" "NoTests"
finish catch_group_test
