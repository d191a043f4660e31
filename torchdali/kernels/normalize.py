"""`torchdali::normalize`: its Python face and, beside it, the fake kernel that lets
`torch.compile` trace it."""
from typing import List

import torch

from . import MAX_DIMS as _MAX_DIMS, load_extension, register_fake

load_extension()

__all__ = ["normalize"]

_IN_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.float16, torch.float32)
_OUT_DTYPES = (torch.float32, torch.float16, torch.uint8, torch.int8, torch.int16, torch.int32)


def normalize(images: List[torch.Tensor], mean: List[torch.Tensor], inv_std: List[torch.Tensor],
              shift: float = 0.0, out_dtype: torch.dtype = torch.float32) -> List[torch.Tensor]:
    """`out = (in - mean) * inv_std + shift` per sample (float32 math), rounded half away from
    zero and saturated to `out_dtype`.

    `mean` and `inv_std`: 1 tensor (shared) or one per sample, each with the sample's number
    of dims and extents 1 (broadcast along that dim) or the sample's; e.g. [1, 1, C] for HWC
    images normalized per channel. Returns one tensor per sample, of its shape.
    """
    return torch.ops.torchdali.normalize.default(images, mean, inv_std, float(shift), out_dtype)


def _check_params(name, params, images):
    n = len(images)
    torch._check_value(len(params) in (1, n), lambda: (
        f"normalize: `{name}` must hold 1 tensor (shared) or {n} (one per sample), got "
        f"{len(params)}"))
    for i, im in enumerate(images):
        p = params[0 if len(params) == 1 else i]
        ok = p.dim() == im.dim() and all(a == 1 or a == b for a, b in zip(p.shape, im.shape))
        torch._check_value(ok, lambda: (
            f"normalize: `{name}` of shape {tuple(p.shape)} does not broadcast to sample {i} of "
            f"shape {tuple(im.shape)} (each extent must be 1 or the sample's)"))


@register_fake("torchdali::normalize")
def _normalize_fake(images, mean, inv_std, shift, out_dtype):
    torch._check_value(len(images) > 0, lambda: "normalize: `images` must hold at least one sample")
    first = images[0]
    torch._check_type(first.dtype in _IN_DTYPES, lambda: (
        f"normalize: `images` must be uint8, int8, int16, int32, float16 or float32, got "
        f"{first.dtype}"))
    torch._check_type(out_dtype in _OUT_DTYPES, lambda: (
        f"normalize: `out_dtype` must be float32, float16, uint8, int8, int16 or int32, got "
        f"{out_dtype}"))
    for i, im in enumerate(images):
        torch._check_value(im.dim() <= _MAX_DIMS, lambda: (
            f"normalize: samples may have at most {_MAX_DIMS} dims, sample {i} has shape "
            f"{tuple(im.shape)}"))
        torch._check_type(im.dtype == first.dtype, lambda: (
            f"normalize: all samples must have one dtype; sample 0 is {first.dtype}, sample {i} "
            f"is {im.dtype}"))
    _check_params("mean", mean, images)
    _check_params("inv_std", inv_std, images)
    return [torch.empty_like(im, dtype=out_dtype, memory_format=torch.contiguous_format)
            for im in images]
