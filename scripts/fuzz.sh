#!/usr/bin/env bash
# Build the libFuzzer targets with clang (ASan + UBSan) into build-fuzz/ and fuzz each for
# SECONDS (default 180), seeded with the checked-in corpora. New inputs go to build-fuzz/corpus/,
# crashes to build-fuzz/crashes/. Needs Debian clang + libclang-rt-14-dev. Not run by CI.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (targets: fuzz_safetensors fuzz_torch_zip)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-180}; shift || true
TARGETS=("$@"); [ ${#TARGETS[@]} -gt 0 ] || TARGETS=(fuzz_safetensors)
B=${BUILD_DIR:-build-fuzz}
CXX=${CXX:-clang++} cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDPFT_FUZZ=ON \
  -DDPFT_TESTS=OFF -DDPFT_PCH=OFF > /dev/null
for t in "${TARGETS[@]}"; do
  cmake --build "$B" -j "${JOBS:-2}" --target "$t"
  dict=()
  case "$t" in
    fuzz_safetensors) seeds=tests/data/safetensors_corpus; dict=(-dict=tests/fuzz/safetensors.dict) ;;
    fuzz_torch_zip) seeds=tests/data/torch_zip_corpus ;;
  esac
  mkdir -p "$B/corpus/$t" "$B/crashes/$t"
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
    "$B/tests/fuzz/$t" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -rss_limit_mb=4096 \
    -artifact_prefix="$B/crashes/$t/" "${dict[@]}" "$B/corpus/$t" "$seeds"
done
