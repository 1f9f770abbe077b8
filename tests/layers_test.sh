#!/usr/bin/env bash
# The one-way layers of docs/architecture.md, checked on the source tree:
#   cli/ -> methods/ -> data/ -> core/        (an arrow = "may include")
# and, inside core/, the levels of docs/architecture.md ("Levels inside core"): a directory
# includes only itself and directories of lower levels (so core/run/ never includes core/train/,
# and core/privacy/ includes only core/privacy/ and core/util/).
# Every #include of a layer above is reported with file:line; every .cpp of a layer must be in
# that layer's explicit source list in CMakeLists.txt (and no list names a missing file).
# Usage: tests/layers_test.sh [REPO_ROOT]
set -uo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || exit 2
. tests/shell_check.sh

violations=0
# forbid DIR PATTERN WHY: no file under DIR may include a path matching PATTERN.
forbid() {
  local dir=$1 pattern=$2 why=$3 hits
  hits=$(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]*\"($pattern)" "$dir" \
           --include='*.hpp' --include='*.cpp' --include='*.h' --include='*.in' || true)
  if [ -n "$hits" ]; then
    while IFS= read -r h; do echo "layers: $h  <- $why"; done <<< "$hits"
    violations=$((violations + $(wc -l <<< "$hits")))
  fi
}
forbid core  'data/|methods/|cli/' "core/ includes only core/"
forbid data  'methods/|cli/'       "data/ includes only core/ and data/"
forbid methods 'cli/'              "methods/ includes core/, data/ and methods/"
forbid core/run 'core/train/'      "core/run/ never includes core/train/ (train uses run)"
# core/privacy/ is the bottom of core (with core/util/): the mechanisms, accountants and noise
# know nothing of specs, runs or models (the spec's privacy block becomes ledger settings in
# core/config/ledger_options.hpp).
forbid core/privacy 'core/(config|run|train|model|data|lm|grad|project|eval|dist)/' \
  "core/privacy/ includes only core/privacy/ and core/util/"
# Levels inside core: a new directory needs a level here and in docs/architecture.md.
declare -A LEVEL=([util]=0 [model]=1 [tokenizer]=1 [privacy]=1 [dist]=1 [denoise]=1
  [config]=2 [lm]=2 [generate]=2 [topics]=2 [project]=2 [grad]=3 [run]=3 [synth]=3 [eval]=3
  [report]=4 [train]=4)
for d in core/*/; do
  n=$(basename "$d")
  if [ -z "${LEVEL[$n]:-}" ]; then
    echo "layers: core/$n/ has no level (tests/layers_test.sh LEVEL, docs/architecture.md)"
    violations=$((violations + 1))
    continue
  fi
  up=""
  for m in "${!LEVEL[@]}"; do
    if [ "$m" != "$n" ] && [ "${LEVEL[$m]}" -ge "${LEVEL[$n]}" ]; then up="$up|$m"; fi
  done
  forbid "core/$n" "core/(${up#|})/" "core/$n/ (level ${LEVEL[$n]}) includes only lower levels"
done
check "no include runs against the layers ($violations found)" [ "$violations" = 0 ]

# The include scan saw the tree (not vacuous): each layer has files and includes.
for d in core data methods cli; do
  n=$(grep -rlE '^#include "' "$d" --include='*.cpp' | wc -l)
  check "$d/ has source files with includes ($n)" [ "$n" -gt 0 ]
done

# Explicit source lists: CMakeLists.txt's DPFT_<LAYER>_SOURCES name exactly the layer's .cpp files
# (but cli/main.cpp, the executable's, and core/tokenizer/sentencepiece_shim.cpp, the module
# libdpft_spm.so).
listed() {  # the files of one set(...) block of CMakeLists.txt
  awk -v name="$1" '$0 ~ "^set\\(" name "$" {on=1; next} on {print} on && /\)/ {exit}' \
    CMakeLists.txt | tr ' ()' '\n\n\n' | grep '\.cpp$' | sort
}
for layer in core data methods cli; do
  var="DPFT_$(tr a-z A-Z <<< "$layer")_SOURCES"
  want=$(find "$layer" -name '*.cpp' ! -path 'cli/main.cpp' ! -path 'core/tokenizer/sentencepiece_shim.cpp' | sort)
  have=$(listed "$var")
  check "$var lists the $(wc -l <<< "$want") .cpp files of $layer/" [ "$want" = "$have" ]
  if [ "$want" != "$have" ]; then diff <(echo "$want") <(echo "$have") | sed 's/^/  /'; fi
done
finish layers_test
