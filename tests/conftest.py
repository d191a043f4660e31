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


def random_images(sizes, c, dtype, device, seed=0):
    """HWC images of the given (h, w) sizes with values over 0..255, for kernel tests."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.uint8:
        ims = [torch.randint(0, 256, (h, w, c), generator=g, dtype=torch.uint8) for h, w in sizes]
    else:
        ims = [(torch.rand(h, w, c, generator=g) * 255).to(dtype) for h, w in sizes]
    return [im.to(device) for im in ims]


def assert_one_buffer(batch):
    """The TensorList's samples are consecutive views of one [N, ...] tensor: the kernel
    wrote a dense batch, and as_torch() hands it over without a copy."""
    samples = batch.as_torch_list()
    step = samples[0].numel() * samples[0].element_size()
    assert all(s.data_ptr() == samples[0].data_ptr() + k * step for k, s in enumerate(samples))
    assert batch.as_torch().data_ptr() == samples[0].data_ptr()
