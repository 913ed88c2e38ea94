#!/usr/bin/env bash
# Installs everything troupe's build and tests need: Debian 12's packages, then LibTorch 2
# from PyTorch's pinned wheel in a Python environment of the project's (scripts/torch-env.sh).
# Idempotent: when everything is already there it returns in about a second.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libcaf-dev
  libucx-dev ucx-utils
  libtomlplusplus-dev
  libspdlog-dev libfmt-dev
  libgtest-dev
  libcli11-dev
  liburing-dev
  nlohmann-json3-dev
  libprotobuf-dev protobuf-compiler
  iproute2
  openmpi-bin slurm-wlm munge
  clang libclang-rt-14-dev
  python3-venv
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

bash "$(dirname "$0")/torch-env.sh" install
