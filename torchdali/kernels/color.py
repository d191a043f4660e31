"""`torchdali::color_transform`: its Python face and, beside it, the fake kernel that lets
`torch.compile` trace it."""
from typing import List, Union

import torch

from . import load_extension, register_fake

load_extension()

__all__ = ["color_transform"]

_IN_DTYPES = (torch.uint8, torch.float16, torch.float32)
_OUT_DTYPES = (torch.float32, torch.float16, torch.uint8, torch.int8, torch.int16, torch.int32)


def color_transform(images: Union[List[torch.Tensor], torch.Tensor], matrices: torch.Tensor,
                    offsets: torch.Tensor,
                    out_dtype: torch.dtype = None) -> Union[List[torch.Tensor], torch.Tensor]:
    """Applies a per-sample affine colour transform to channel-last images of any sizes.

    `out = matrices[i] @ pixel + offsets[i]` for every pixel of sample i (float32 math),
    rounded half away from zero and saturated to `out_dtype` (default: the input dtype).
    `matrices`: [N, C, C], `offsets`: [N, C]; returns one tensor per image, of its shape, or
    for a dense batch [N, ..., C] one tensor of its shape (`color_transform.dense`).
    """
    if out_dtype is None:
        out_dtype = images[0].dtype
    if isinstance(images, torch.Tensor):
        return torch.ops.torchdali.color_transform.dense(images, matrices, offsets, out_dtype)
    return torch.ops.torchdali.color_transform.default(images, matrices, offsets, out_dtype)


def _check_color(images, matrices, offsets, out_dtype):
    n = len(images)
    torch._check_value(n > 0, lambda: "color_transform: `images` must hold an image")
    c = images[0].shape[-1]
    for i, im in enumerate(images):
        torch._check_value(im.dim() >= 2, lambda: (
            f"color_transform: `images` must be channel-last (HWC), sample {i} has shape "
            f"{tuple(im.shape)}"))
        torch._check_value(im.shape[-1] == c, lambda: (
            f"color_transform: all `images` must have the same number of channels; sample 0 "
            f"has {c}, sample {i} has {im.shape[-1]}"))
        torch._check_type(im.dtype == images[0].dtype and im.dtype in _IN_DTYPES,
                          lambda: f"color_transform: bad `images` dtype {im.dtype}")
    torch._check_value(tuple(matrices.shape) == (n, c, c), lambda: (
        f"color_transform: `matrices` must have shape [{n}, {c}, {c}], got "
        f"{tuple(matrices.shape)}"))
    torch._check_value(tuple(offsets.shape) == (n, c), lambda: (
        f"color_transform: `offsets` must have shape [{n}, {c}], got {tuple(offsets.shape)}"))
    torch._check_type(out_dtype in _OUT_DTYPES,
                      lambda: f"color_transform: unsupported `out_dtype` {out_dtype}")


@register_fake("torchdali::color_transform")
def _color_transform_fake(images, matrices, offsets, out_dtype):
    _check_color(images, matrices, offsets, out_dtype)
    return [torch.empty_like(im, dtype=out_dtype, memory_format=torch.contiguous_format)
            for im in images]


@register_fake("torchdali::color_transform.dense")
def _color_transform_dense_fake(images, matrices, offsets, out_dtype):
    torch._check_value(images.dim() >= 1, lambda: (
        "color_transform: a dense batch needs a leading batch dimension, got shape "
        f"{tuple(images.shape)}"))
    _check_color(images.unbind(0), matrices, offsets, out_dtype)
    return torch.empty_like(images, dtype=out_dtype, memory_format=torch.contiguous_format)
