"""`torchdali::flip`, `torchdali::transpose` and `torchdali::gather_windows`: their Python
faces and, beside them, the fake kernels that let `torch.compile` trace them. They take a
list of samples that may differ in shape (one launch per batch on CUDA)."""
from typing import List, Sequence, Union

import numpy as np
import torch

from . import check_samples, load_extension, register_fake
from .pack import batch_views

load_extension()

__all__ = ["flip", "transpose", "gather_windows"]


def flip(images: Union[List[torch.Tensor], torch.Tensor], horizontal: torch.Tensor,
         vertical: torch.Tensor, height_dim: int = 0) -> Union[List[torch.Tensor], torch.Tensor]:
    """Flips sample i left-right where `horizontal[i]` != 0 and upside down where
    `vertical[i]` != 0; dims `height_dim` and `height_dim + 1` of a sample are H and W (HWC:
    0, CHW: 1). Any dtype of 1, 2, 4 or 8 bytes. A list of samples gives a list; a dense
    batch [N, ...] gives one [N, ...] tensor (`flip.dense`)."""
    if isinstance(images, torch.Tensor):
        return torch.ops.torchdali.flip.dense(images, horizontal, vertical, height_dim)
    return torch.ops.torchdali.flip.default(images, horizontal, vertical, height_dim)


def transpose(images: List[torch.Tensor], perm: Sequence[int]) -> List[torch.Tensor]:
    """Permutes each sample's dims: output dim k is input dim `perm[k]`, made contiguous."""
    return torch.ops.torchdali.transpose.default(images, list(perm))


def gather_windows(images: List[torch.Tensor], windows: np.ndarray) -> Union[List[torch.Tensor], torch.Tensor]:
    """Window i = `windows[i]` = (y, x, h, w) of each sample (dims 0 and 1 are rows and
    columns, e.g. HWC), copied in one call: a dense [N, h, w, ...] tensor when the windows
    have one size, else a list of contiguous views of one buffer."""
    windows = np.ascontiguousarray(windows, np.int64)
    flat = torch.ops.torchdali.gather_windows.default(images, torch.from_numpy(windows))
    inner = np.broadcast_to(np.array(images[0].shape[2:], np.int64), (len(windows), images[0].dim() - 2))
    return batch_views(flat, np.concatenate([windows[:, 2:], inner], axis=1))


def _check_images(op, images, min_dims):
    check_samples(op, images, min_dims)
    size = images[0].element_size()
    torch._check_type(size in (1, 2, 4, 8), lambda: (
        f"{op}: elements of {size} bytes ({images[0].dtype}) are not supported"))


def _check_flip(images, horizontal, vertical, height_dim):
    torch._check_value(height_dim >= 0, lambda: f"flip: `height_dim` must be >= 0, got {height_dim}")
    _check_images("flip", images, height_dim + 2)
    n = len(images)
    for name, t in (("horizontal", horizontal), ("vertical", vertical)):
        torch._check_value(t.dim() == 1 and t.shape[0] == n, lambda: (
            f"flip: `{name}` must have shape [{n}] (one flag per sample), got {tuple(t.shape)}"))


@register_fake("torchdali::flip")
def _flip_fake(images, horizontal, vertical, height_dim=0):
    _check_flip(images, horizontal, vertical, height_dim)
    return [torch.empty_like(im, memory_format=torch.contiguous_format) for im in images]


@register_fake("torchdali::flip.dense")
def _flip_dense_fake(images, horizontal, vertical, height_dim=0):
    torch._check_value(images.dim() >= 1, lambda: (
        f"flip: a dense batch needs a leading batch dimension, got shape {tuple(images.shape)}"))
    _check_flip(images.unbind(0), horizontal, vertical, height_dim)
    return torch.empty_like(images, memory_format=torch.contiguous_format)


@register_fake("torchdali::transpose")
def _transpose_fake(images, perm):
    _check_images("transpose", images, 1)
    ndim = images[0].dim()
    torch._check_value(sorted(perm) == list(range(ndim)), lambda: (
        f"transpose: `perm` must be a permutation of 0..{ndim - 1}, got {list(perm)}"))
    return [im.new_empty([im.shape[p] for p in perm]) for im in images]


@register_fake("torchdali::gather_windows")
def _gather_windows_fake(images, windows):
    _check_images("gather_windows", images, 2)
    n = len(images)
    torch._check_value(windows.dim() == 2 and windows.shape[0] == n and windows.shape[1] == 4, lambda: (
        f"gather_windows: `windows` must have shape [{n}, 4], got {tuple(windows.shape)}"))
    return images[0].new_empty(torch.library.get_ctx().new_dynamic_size())
