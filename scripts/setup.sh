#!/usr/bin/env bash
# Creates .venv with torch + torchvision (a matching CUDA pair; it runs without a GPU too),
# builds torchdali's extension in place and installs NVIDIA DALI, which the benchmark
# compares against. Run again, it installs nothing twice and recompiles only the sources
# that changed (the objects stay in build/temp).
#   bash scripts/setup.sh          # for the benchmark
#   bash scripts/setup.sh --test   # plus pytest, matplotlib, mkdocs and the remote-storage test servers
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$(realpath -m "${VENV:-.venv}")
PY=${PYTHON:-python3}
started=$SECONDS
say() { echo "[setup $(( SECONDS - started ))s] $*"; }
pip() { "$VENV/bin/python" -m pip "$@"; }
has() { "$VENV/bin/python" -c "import $1" 2>/dev/null; }

[ -x "$VENV/bin/python" ] || { say "creating the virtual environment $VENV"; "$PY" -m venv "$VENV"; }
if has "torch, torchvision, numpy, PIL, ninja"; then
  say "torch and torchvision: already installed"
else
  say "installing torch and torchvision (the first time ~5 GB of CUDA wheels: a few minutes)"
  pip install -q --upgrade pip setuptools wheel
  # torch and torchvision together, so pip picks a pair built for each other.
  pip install -q torch torchvision numpy pillow ninja
fi
"$VENV/bin/python" -c "import torch, torchvision; print('  torch', torch.__version__, '| torchvision', torchvision.__version__)"
# nvJPEG's headers and library for our GPU JPEG decoder (built into the extension when found).
if ! "$VENV/bin/python" -c "import glob, nvidia, sys; sys.exit(not any(glob.glob(p + '/cu13/include/nvjpeg.h') for p in nvidia.__path__))" 2>/dev/null; then
  say "installing nvidia-nvjpeg (the GPU JPEG decoder's library)"
  pip install -q nvidia-nvjpeg
fi

if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDA_HOME=/usr/local/cuda  # torch would guess /usr/local from /usr/local/bin/nvcc
fi
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
mkdir -p build
say "building the extension torchdali._C: only what changed since the last build (the first" \
    "build compiles every C++ and CUDA file: ~4 minutes on 2 cores); log in build/setup.log"
# ninja announces each compile as [done/total] ... -c <source>: show those, keep the rest in the log.
if ! "$VENV/bin/python" setup.py build_ext --inplace 2>&1 | tee build/setup.log |
     sed -nu 's|^\[\([0-9]*/[0-9]*\)\].* -c [^ ]*\(csrc/[^ ]*\) .*|  [\1] \2|p'; then
  tail -n 40 build/setup.log
  say "the build failed; the whole log is build/setup.log"
  exit 1
fi
# Registered in the environment once (an editable install: it links the objects built above).
if ! (cd / && "$VENV/bin/python" -c "import torchdali, sys; sys.exit(not torchdali.__file__.startswith('$ROOT/'))") 2>/dev/null; then
  say "registering torchdali in $VENV (editable install)"
  pip install -q --no-build-isolation --no-deps -e . >> build/setup.log 2>&1 ||
    { tail -n 40 build/setup.log; say "the editable install failed; log: build/setup.log"; exit 1; }
fi
"$VENV/bin/python" -c "import torchdali._C, torchdali; print('  torchdali', torchdali.__version__, 'built')"

# NVIDIA DALI: the benchmark's comparison and the tests' oracle (used CPU-only where there is no GPU).
if has nvidia.dali; then
  say "NVIDIA DALI: already installed"
else
  say "installing NVIDIA DALI (~300 MB)"
  pip install -q nvidia-dali-cuda130 || say "NVIDIA DALI could not be installed: its rows and comparison tests will say so"
fi
if [ "${1:-}" = "--test" ]; then
  has "pytest, matplotlib" || { say "installing pytest and matplotlib"; pip install -q pytest matplotlib; }
  has mkdocs || { say "installing mkdocs (the documentation site's builder)"; pip install -q -r docs/requirements.txt; }
  # The remote-storage tests' clients (http, S3) and their S3 server (moto).
  has "aiohttp, s3fs, moto, flask_cors" || { say "installing aiohttp, s3fs and moto (remote-storage tests)";
    pip install -q aiohttp s3fs "moto[s3]" flask flask-cors; }
  # readers.caffe and readers.caffe2's LMDB databases (an optional dependency of theirs).
  has lmdb || { say "installing lmdb (the Caffe readers' tests)"; pip install -q lmdb; }
  # FITS files written by astropy (the FITS reader's tests compare them with DALI's).
  has astropy || { say "installing astropy (the FITS reader's tests)"; pip install -q astropy; }
fi
say "done"
