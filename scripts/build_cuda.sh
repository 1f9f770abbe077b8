#!/usr/bin/env bash
# Build dpft against a CUDA LibTorch, on a GPU machine (CI never runs this; it builds against
# Debian's CPU LibTorch through scripts/build.sh).
#
# LibTorch: TORCH_PREFIX, a directory holding TorchConfig.cmake or a parent of one (an unpacked
# libtorch, or share/cmake of a PyTorch install); default: the cmake prefix of the python3
# PyTorch, `python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'`.
#
# The other libraries (yaml-cpp, nlohmann-json, fmt, spdlog, CLI11, PCRE2, SentencePiece, OpenSSL's libcrypto,
# Catch2) come from the machine when it has them; on a machine without them (and without a
# registry to install them from), from Debian .deb files unpacked with `dpkg -x` into
# $BUILD_DIR/deps: put the .debs in DEBS_DIR (default third_party/debs), which
# `scripts/build_cuda.sh --fetch-debs` fills on a Debian machine that has apt (run it there,
# then copy or carry the folder). Binaries get an rpath to the unpacked libraries.
#
# Usage: scripts/build_cuda.sh [--fetch-debs] [extra cmake args]
# Env: TORCH_PREFIX, DEBS_DIR, BUILD_DIR (default build-cuda), JOBS (default: all cores),
#      TARGET (default all: dpft and the test suite), DPFT_GLOO (ON: try data parallel; default OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
DEBS_DIR=${DEBS_DIR:-third_party/debs}
BUILD_DIR=${BUILD_DIR:-build-cuda}
TARGET=${TARGET:-all}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

# Debian 12 packages with the headers, CMake configs and shared libraries dpft links.
DEB_PKGS=(libyaml-cpp-dev libyaml-cpp0.7 nlohmann-json3-dev libfmt-dev libfmt9 libspdlog-dev
          libspdlog1.10 libcli11-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0
          libpcre2-posix3 libutf8proc-dev libutf8proc2 libssl-dev libssl3 catch2 libstemmer-dev
          libstemmer0d libsentencepiece-dev libsentencepiece0)

if [ "${1:-}" = "--fetch-debs" ]; then
  shift
  mkdir -p "$DEBS_DIR"
  (cd "$DEBS_DIR" && apt-get download "${DEB_PKGS[@]}")
  echo "build_cuda.sh: $(ls "$DEBS_DIR"/*.deb | wc -l) .deb files in $DEBS_DIR"
  exit 0
fi

if [ -z "${TORCH_PREFIX:-}" ]; then
  TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) || {
    echo "build_cuda.sh: no TORCH_PREFIX and python3 has no torch; set TORCH_PREFIX to an" \
         "unpacked libtorch or a PyTorch install's share/cmake" >&2
    exit 2
  }
fi
if ! find -L "$TORCH_PREFIX" -maxdepth 4 -name TorchConfig.cmake | grep -q .; then
  echo "build_cuda.sh: no TorchConfig.cmake under TORCH_PREFIX=$TORCH_PREFIX" >&2
  exit 2
fi
echo "build_cuda.sh: LibTorch from $TORCH_PREFIX"

prefixes="$TORCH_PREFIX"
cmake_args=()
if compgen -G "$DEBS_DIR/*.deb" > /dev/null; then
  deps="$(realpath -m "$BUILD_DIR")/deps"
  mkdir -p "$deps"
  for d in "$DEBS_DIR"/*.deb; do dpkg -x "$d" "$deps"; done
  multiarch=$(ls "$deps/usr/lib" | grep -- '-linux-gnu$' | head -1)
  lib="$deps/usr/lib/$multiarch"
  # Debian's .pc files say prefix=/usr: point them at where they were unpacked.
  sed -i "s|^prefix=/usr\$|prefix=$deps/usr|" "$lib"/pkgconfig/*.pc
  export PKG_CONFIG_PATH="$lib/pkgconfig:$deps/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  prefixes="$prefixes;$deps/usr;$lib/cmake"
  cmake_args+=("-DCMAKE_BUILD_RPATH=$lib"
               "-DCMAKE_INCLUDE_PATH=$deps/usr/include" "-DCMAKE_LIBRARY_PATH=$lib"
               "-DOPENSSL_ROOT_DIR=$deps/usr")
  echo "build_cuda.sh: unpacked $(ls "$DEBS_DIR"/*.deb | wc -l) .deb files into $deps"
fi

# Data parallel (Gloo) against a PyTorch wheel's LibTorch has not been built or run yet (no GPU
# session since it landed): off unless DPFT_GLOO=ON asks to try it.
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} \
  "-DCMAKE_PREFIX_PATH=$prefixes" "-DDPFT_GLOO=${DPFT_GLOO:-OFF}" "${cmake_args[@]}" "$@"
cmake --build "$BUILD_DIR" -j "$JOBS" --target "$TARGET"
"$BUILD_DIR/dpft" version
echo "built: $BUILD_DIR/dpft (target $TARGET)"
