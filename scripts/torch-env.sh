#!/usr/bin/env bash
# The Python environment that holds troupe's LibTorch: PyTorch's pinned wheel (its LibTorch,
# CMake package and the nvidia-* CUDA libraries it loads), in a folder the project owns,
# shared by every clone on the machine:
#   ${TROUPE_TORCH_VENV:-${XDG_CACHE_HOME:-~/.cache}/troupe/torch-<version>}
# It is also the Python that checks troupe's files (tests/python) and runs the PyTorch
# peers of scripts/.
#   scripts/torch-env.sh install        make it, or leave it as it is when it holds the pins
#   scripts/torch-env.sh venv           print its folder (the peers' PEERS_VENV)
#   scripts/torch-env.sh python         print its python
#   scripts/torch-env.sh cmake-prefix   print torch.utils.cmake_prefix_path (CMake's
#                                       cmake/TroupeTorch.cmake asks this)
set -euo pipefail
shopt -s extglob  # installed(): either kind of metadata folder

torch_version=2.15.0
# transformers and safetensors: what hf_test holds troupe's Hugging Face folders to;
# megatron-core: what megatron_data_test holds troupe's datasets to (tokenizers comes with
# transformers); tensorboard: the reader monitor_test holds troupe's event files to;
# deepspeed: its launcher, which launchers_test starts troupe's ranks under.
pins=("torch==$torch_version" "numpy==2.4.6" "transformers==5.25.0" "safetensors==0.8.0" "megatron-core==0.16.1"
  "tensorboard==2.21.0" "deepspeed==0.19.8")
venv=${TROUPE_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/troupe/torch-$torch_version}
python=$venv/bin/python

installed() {
  [[ -x "$python" ]] || return 1
  local site
  site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || return 1
  for pin in "${pins[@]}"; do
    local name=${pin%%==*}
    # A wheel leaves NAME-VERSION.dist-info; deepspeed (an sdist installed by setup.py) an egg-info.
    compgen -G "$site/${name//-/_}-${pin##*==}@(.dist-info|-py*.egg-info)" >/dev/null || return 1
  done
}

install() {
  installed && return 0
  if [[ ! -x "$python" ]]; then
    echo "torch-env: creating $venv" >&2
    mkdir -p "$(dirname "$venv")"
    # Debian's python3, whose venv module scripts/setup.sh installs (python3-venv).
    local base=/usr/bin/python3
    [[ -x $base ]] || base=python3
    "$base" -m venv "$venv"
  fi
  echo "torch-env: installing ${pins[*]} into $venv (about 4 GB the first time)" >&2
  "$python" -m pip install --quiet --disable-pip-version-check "${pins[@]}" >&2
}

case "${1:-}" in
  install) install ;;
  venv) echo "$venv" ;;
  python) echo "$python" ;;
  cmake-prefix)
    if ! installed; then
      echo "no PyTorch $torch_version in $venv" >&2
      exit 1
    fi
    "$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)'
    ;;
  *)
    echo "usage: scripts/torch-env.sh install|venv|python|cmake-prefix" >&2
    exit 2
    ;;
esac
