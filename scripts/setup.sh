#!/usr/bin/env bash
# Install dpft's build and test dependencies from Debian packages. Idempotent.
# Usage: scripts/setup.sh            (as root, or with sudo available)
set -euo pipefail

PKGS=(
  build-essential cmake git
  libtorch-dev libopenblas0-pthread
  libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libyaml-cpp-dev catch2
  pkg-config libpcre2-dev libutf8proc-dev libssl-dev libstemmer-dev libsentencepiece-dev
  libgloo-dev libfaiss-dev
  python3 python3-numpy python3-scipy python3-torch python3-nltk gnuplot-nox
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup.sh: need root or sudo to install: ${PKGS[*]}" >&2; exit 1
  fi
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup.sh: all ${#PKGS[@]} packages already installed"
else
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Debian's libtorch links the generic libblas.so.3; make sure the alternative points at OpenBLAS
# (reference BLAS is ~20x slower on a 768x768 linear layer).
arch_dir="/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"
for cand in "$arch_dir/openblas-pthread/libblas.so.3"; do
  if [ -e "$cand" ]; then
    cur=$(readlink -f "$arch_dir/libblas.so.3" 2>/dev/null || true)
    if [ "$cur" != "$(readlink -f "$cand")" ]; then
      $SUDO update-alternatives --set "libblas.so.3-$(basename "$arch_dir")" "$cand" || true
    fi
  fi
done
echo "setup.sh: done"
