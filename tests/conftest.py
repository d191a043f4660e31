import numpy as np
import pytest
import torch

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def dali_or_skip():
    """NVIDIA DALI as an oracle, where installed (CPU-only use)."""
    return pytest.importorskip("nvidia.dali")


def as_numpy_batch(tl):
    """A TensorList (ours or DALI's) as a list of NumPy arrays."""
    if hasattr(tl, "as_cpu"):
        tl = tl.as_cpu()
    return [np.array(tl.at(i)) for i in range(len(tl))]
