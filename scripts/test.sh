#!/usr/bin/env bash
# Setup (Debian packages) + configure + build (-j2) + the fast test suite through ctest.
# Tests tagged [slow] are skipped here; run them with: build/tests/dpft_tests "[slow]"
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
TARGET=all bash scripts/build.sh "$@"
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j 2 -L fast
