#!/usr/bin/env bash
# Installs, from Debian 12's packages, everything troupe's build and tests need.
# Idempotent: when every package is already present it returns in well under a second.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libcaf-dev
  libucx-dev ucx-utils
  libtomlplusplus-dev
  libspdlog-dev libfmt-dev
  libtorch-dev
  libopenblas0-openmp
  libgtest-dev
  libcli11-dev
  liburing-dev
  nlohmann-json3-dev
  iproute2
  clang libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "setup: installing ${missing[*]}" >&2
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
