#!/usr/bin/env bash
# Methods read like their algorithm boxes, and the CLI stays thin (issue 68, part 6):
#   every function in cli/ fits in 100 lines;
#   every method's run function (Method::run overrides, the DP-SGD and projection loops) fits in
#   80 lines (about a screen: the algorithm, its plumbing elsewhere).
# A function is counted from its signature's first line to its closing brace (clang-format's
# layout: a definition at column 0 ends at a lone "}", a member defined in its class at two
# spaces ends at "  }"). Checked on the tree and, for power, on a planted one.
# Usage: tests/function_length_test.sh [REPO_ROOT]
set -uo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || exit 2
. tests/shell_check.sh

# lengths FILE...: "LINES FILE:LINE NAME" for every function definition (column 0, or a member
# defined in its class body at two spaces).
lengths() {
  awk '
    FNR == 1 { start = 0; body = 0; indent = "" }
    # a signature at column 0 (not a namespace, type, macro, comment or closing brace)
    !start && /^[A-Za-z_].*\(/ && !/^(namespace|struct|class|enum|using|template|extern|static_assert)[ <{]/ && !/;[ ]*$/ {
      start = FNR; sig = $0; indent = ""; body = 0
    }
    # a member function defined in its class
    !start && /^  [A-Za-z_][A-Za-z0-9_:<>,* &]* [A-Za-z_][A-Za-z0-9_]*\(/ && !/;[ ]*$/ && !/^  (return|if|for|while|switch|case|throw|else)[ (]/ {
      start = FNR; sig = $0; indent = "  "; body = 0
    }
    start && !body {
      if ($0 ~ /\{.*\}[ ]*;?[ ]*$/) { start = 0; next }  # defined on one line
      if ($0 ~ /\{[ ]*$/) body = 1
      else if ($0 ~ /;[ ]*$/ || FNR - start > 8) start = 0
      next
    }
    start && body && $0 == indent "}" {
      name = sig; sub(/^[ ]+/, "", name); sub(/\(.*/, "", name)
      printf "%d %s:%d %s\n", FNR - start + 1, FILENAME, start, name
      start = 0; body = 0
    }
  ' "$@"
}

# over LIMIT FILTER FILE...: the functions over LIMIT lines whose name matches FILTER (awk ERE).
over() {
  local limit=$1 filter=$2; shift 2
  lengths "$@" | awk -v L="$limit" -v F="$filter" '$1 > L && $NF ~ F'
}

RUNS='(::run|^run|run_dp_sgd|run_projection)$'
check_tree() {  # check_tree ROOT LABEL: 0 when every limit holds; prints the offenders
  local root=$1 bad
  bad=$( (cd "$root" && over 100 '.' $(find cli -name '*.cpp' | sort)
          cd "$root" && over 80 "$RUNS" $(find methods -name '*.cpp' | sort)) )
  [ -z "$bad" ] && return 0
  echo "$bad" | sed 's/^/  over the limit: /'
  return 1
}

check "no cli/ function over 100 lines, no method run function over 80" check_tree "$ROOT"

# Not vacuous: the scan finds the run functions it limits (Method::run overrides, the loops).
runs=$(lengths $(find methods -name '*.cpp') | awk -v F="$RUNS" '$NF ~ F' | wc -l)
check "the scan sees the methods' run functions ($runs)" [ "$runs" -ge 14 ]
clis=$(lengths $(find cli -name '*.cpp') | wc -l)
check "the scan sees the cli functions ($clis)" [ "$clis" -ge 30 ]

# Power: a planted cli function of 101 lines and a run function of 81 are caught, and functions
# of exactly 100 and 80 lines pass.
plant() {  # plant FILE SIGNATURE LINES: a definition of LINES lines in all
  { echo "$2 {"; for ((i = 0; i < $3 - 2; ++i)); do echo "  x();"; done; echo "}"; } > "$1"
}
mkdir -p "$T/ok/cli" "$T/ok/methods/m" "$T/bad/cli" "$T/bad/methods/m"
plant "$T/ok/cli/a.cpp" "void register_a(CLI::App& app)" 100
plant "$T/ok/methods/m/m.cpp" "nlohmann::json MMethod::run(RunContext& ctx, train::TrainInputs& in)" 80
plant "$T/bad/cli/a.cpp" "void register_a(CLI::App& app)" 101
plant "$T/bad/methods/m/m.cpp" "nlohmann::json MMethod::run(RunContext& ctx, train::TrainInputs& in)" 81
{ echo "class N {"; echo " public:"; echo "  nlohmann::json run(RunContext& ctx) override {";
  for ((i = 0; i < 79; ++i)); do echo "    y();"; done; echo "  }"; echo "};"; } > "$T/bad/methods/m/n.cpp"
check "planted functions at the limits pass" check_tree "$T/ok"
bad=$(check_tree "$T/bad")
check "a planted 101-line cli function is caught" has "$bad" "cli/a.cpp:1 void register_a"
check "a planted 81-line run function is caught" has "$bad" "methods/m/m.cpp:1 nlohmann::json MMethod::run"
check "a planted 81-line run member in its class is caught" has "$bad" "methods/m/n.cpp:3 nlohmann::json run"
finish function_length
