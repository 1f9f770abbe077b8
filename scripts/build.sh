#!/usr/bin/env bash
# Configure and build dpft (Release) into build/. Extra args go to cmake, e.g.
#   scripts/build.sh -DDPFT_SANITIZE=ON        (ASan + UBSan; use a separate BUILD_DIR)
# Env: BUILD_DIR (default build), JOBS (default 2), TARGET (default dpft: the executable only;
# all: also the test suite, as scripts/test.sh builds it).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}
TARGET=${TARGET:-dpft}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "$@"
cmake --build "$BUILD_DIR" -j "$JOBS" --target "$TARGET"
echo "built: $BUILD_DIR/dpft${TARGET:+ (target $TARGET)}"
