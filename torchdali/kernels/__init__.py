"""The compiled torch ops of torchdali (`torch.ops.torchdali.*`): one module per kernel
family, each with thin Python functions and, beside them, the fake kernels that let
`torch.compile` trace the ops. Importing a module loads the extension `torchdali._C`."""
import functools
import importlib

import torch
from torch._subclasses.fake_tensor import FakeTensor


def load_extension():
    """Load torchdali._C, which registers the ops, and return it; or explain how to build it."""
    try:
        return importlib.import_module("torchdali._C")
    except ImportError as e:
        raise ImportError(
            "torchdali's C++/CUDA extension (torchdali._C) is not built; build it from the "
            "repository root with `pip install --no-build-isolation -e .` (or "
            "`python setup.py build_ext --inplace`)") from e


def request_cpu_threads(n):
    """The C++ kernels share batches out over at least `n` threads from now on (their own
    pool, csrc/parallel.h, not torch's intra-op threads); returns the pool's size, or None
    where the extension is not built (no kernels to give threads to)."""
    try:
        load_extension()
    except ImportError:
        return None
    torch.ops.torchdali.request_cpu_threads(n)
    return torch.ops.torchdali.cpu_threads()


def register_fake(op):
    """torch.library.register_fake for torchdali's op `op`, refusing a call that mixes
    tensors on the 'meta' device with real ones: the dispatcher then runs the fake kernel
    on the real data and returns uninitialised memory. All-meta calls (shape inference) and
    torch.compile's fake tensors pass."""
    def wrap(fake):
        @functools.wraps(fake)
        def checked(*args, **kwargs):
            tensors = [t for a in (*args, *kwargs.values()) for t in (a if isinstance(a, (list, tuple)) else [a])
                       if isinstance(t, torch.Tensor)]
            meta = [t.device.type == "meta" for t in tensors]
            if any(meta) and not all(meta) and not any(isinstance(t, FakeTensor) for t in tensors):
                real = sorted({str(t.device) for t, m in zip(tensors, meta) if not m})
                raise ValueError(f"{op.split('::')[-1]}: tensors on the 'meta' device mixed with tensors on "
                                 f"{', '.join(real)}; a meta tensor holds no values to compute with")
            return fake(*args, **kwargs)
        return torch.library.register_fake(op)(checked)
    return wrap


MAX_DIMS = 8  # the kernels' limit on a sample's number of dims (csrc: kMaxDims)


def check_samples(op, images, min_dims):
    """Fake-kernel checks shared by the ops over lists of samples: at least one sample,
    all of one rank from `min_dims` to MAX_DIMS and of one dtype (as the C++ checks)."""
    torch._check_value(len(images) > 0, lambda: f"{op}: `images` must hold at least one sample")
    first = images[0]
    for i, im in enumerate(images):
        torch._check_value(im.dim() == first.dim() and min_dims <= im.dim() <= MAX_DIMS, lambda: (
            f"{op}: all samples must have one number of dimensions, from {min_dims} to "
            f"{MAX_DIMS}; sample 0 has shape {tuple(first.shape)}, sample {i} has shape "
            f"{tuple(im.shape)}"))
        torch._check_type(im.dtype == first.dtype, lambda: (
            f"{op}: all samples must have one dtype; sample 0 is {first.dtype}, sample {i} is "
            f"{im.dtype}"))
