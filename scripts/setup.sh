#!/usr/bin/env bash
# Creates .venv with torch + torchvision (a matching CUDA pair; it runs without a GPU too)
# and builds torchdali in it, compiling the CUDA kernels when nvcc is found.
#   bash scripts/setup.sh          # for the demo / benchmark
#   bash scripts/setup.sh --test   # plus pytest and, if available, NVIDIA DALI as a test oracle
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip "$@"; }
pip install -q --upgrade pip setuptools wheel
# torch and torchvision together, so pip picks a pair built for each other.
pip install -q torch torchvision numpy pillow ninja
"$VENV/bin/python" -c "import torch, torchvision; print('torch', torch.__version__, '| torchvision', torchvision.__version__)"

if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDA_HOME=/usr/local/cuda  # torch would guess /usr/local from /usr/local/bin/nvcc
fi
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
pip install -q --no-build-isolation -e .
"$VENV/bin/python" -c "import torchdali._C, torchdali; print('torchdali', torchdali.__version__, 'built')"

if [ "${1:-}" = "--test" ]; then
  pip install -q pytest
  # The reference implementation, for optional comparison tests (CPU-only use).
  pip install -q nvidia-dali-cuda130 || echo "NVIDIA DALI not installed: the comparison tests will skip"
fi
