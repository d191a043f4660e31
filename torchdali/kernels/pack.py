"""Batches gathered into one buffer: `torchdali::pack` for torch tensors and its inverse
`torchdali::unpack` (their Python faces, and pack's fake kernel that lets `torch.compile`
trace it; unpack is traced through to aten's views), and `gather_arrays` for NumPy arrays,
which ops cannot take."""
from typing import List, Optional, Tuple, Union

import numpy as np
import torch

from . import load_extension, register_fake

_C = load_extension()

__all__ = ["pack", "unpack", "batch_views", "gather_arrays"]


def pack(samples: List[torch.Tensor], pin_memory: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """CPU `samples` (one dtype and number of dims, any shapes) copied back to back into one
    1-D buffer, pinned when `pin_memory` (the staging of a host-to-GPU copy), and their
    shapes as int64 [N, ndim]. One C++ call: the copies run on torchdali's CPU threads without
    the GIL."""
    if not samples:  # no tensor for the dispatcher to pick a kernel by
        raise ValueError("pack: `samples` must hold at least one tensor")
    return torch.ops.torchdali.pack.default(list(samples), pin_memory)


@register_fake("torchdali::pack")
def _pack_fake(samples, pin_memory=False):
    torch._check_value(len(samples) > 0, lambda: "pack: `samples` must hold at least one tensor")
    ndim = samples[0].dim()
    for i, s in enumerate(samples):
        torch._check_value(s.dim() == ndim, lambda: (
            f"pack: all `samples` must have the same number of dims; sample 0 has {ndim}, sample {i} has {s.dim()}"))
        torch._check_type(s.dtype == samples[0].dtype, lambda: (
            f"pack: all `samples` must have the same dtype; sample 0 is {samples[0].dtype}, sample {i} is {s.dtype}"))
    total = sum(s.numel() for s in samples)
    return samples[0].new_empty((total,)), torch.empty((len(samples), ndim), dtype=torch.int64)


def unpack(flat: torch.Tensor, shapes: np.ndarray) -> List[torch.Tensor]:
    """The samples laid back to back in `flat` (1-D) as views of it, of the shapes in the rows
    of `shapes` ([N, ndim]): the inverse of pack, in one C++ loop."""
    shapes = np.asarray(shapes, np.int64)
    return torch.ops.torchdali.unpack.default(flat, shapes.reshape(-1).tolist(), shapes.shape[1])


def batch_views(flat: torch.Tensor, shapes: np.ndarray) -> Union[torch.Tensor, List[torch.Tensor]]:
    """The samples laid back to back in `flat`, of the shapes in the rows of `shapes`
    ([N, ndim]): one [N, ...] view when the shapes agree, else a view per sample."""
    shapes = np.asarray(shapes, np.int64).reshape(len(shapes), -1)
    if not len(shapes):
        return []
    if (shapes == shapes[0]).all():
        return flat.view((len(shapes),) + tuple(shapes[0].tolist()))
    return unpack(flat, shapes)


def gather_arrays(arrays: List[np.ndarray]) -> Optional[torch.Tensor]:
    """NumPy arrays of one shape and dtype (at least 1D, C-contiguous) copied into one dense
    [N, ...] tensor, in C++ without the GIL; None, copying nothing, when they are not all
    such arrays (take them one by one then)."""
    first = arrays[0] if len(arrays) else None
    if type(first) is not np.ndarray or not first.ndim or first.dtype.hasobject:
        return None
    try:
        dtype = torch.from_numpy(first[:0]).dtype
    except (TypeError, ValueError):  # a NumPy type or byte order torch lacks
        return None
    out = torch.empty((len(arrays),) + first.shape, dtype=dtype)
    return out if _C.gather_arrays(arrays, out.data_ptr(), first.nbytes) else None
