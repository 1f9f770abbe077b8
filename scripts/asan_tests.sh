#!/usr/bin/env bash
# Build dpft with AddressSanitizer + UndefinedBehaviorSanitizer into build-asan/ (a separate
# build dir) and run the checkpoint I/O tests under them. Extra args select other tests, e.g.
#   scripts/asan_tests.sh "[safetensors]"      (default)
#   scripts/asan_tests.sh "[privacy]"
# Env: BUILD_DIR (default build-asan), JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build-asan}
TARGET=all bash scripts/build.sh -DDPFT_SANITIZE=ON
# LibTorch itself is not instrumented (its allocations are still leak-checked).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
"$BUILD_DIR/tests/dpft_tests" "${@:-[safetensors]}"
