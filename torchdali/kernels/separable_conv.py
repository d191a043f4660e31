"""`torchdali::separable_conv`: its Python face and, beside it, the fake kernel that lets
`torch.compile` trace it."""
from typing import List, Sequence

import torch

from . import check_samples, load_extension, register_fake

load_extension()

__all__ = ["separable_conv"]

_DTYPES = (torch.uint8, torch.float16, torch.float32)
_MAX_AXES = 3


def separable_conv(images: List[torch.Tensor], windows: torch.Tensor, window_sizes: Sequence[int],
                   first_axis: int, num_axes: int,
                   out_dtype: torch.dtype = None) -> List[torch.Tensor]:
    """Convolves each sample along its spatial dims `first_axis .. first_axis + num_axes - 1`
    (innermost first) with one 1D window per axis; reflect-101 borders, float32 accumulation.

    `window_sizes`: `num_axes` odd sizes per sample, outermost axis first, flattened;
    `windows`: all their weights concatenated in that order (float32, 1-D). Dims before and
    after the spatial ones (frames, channels) are not convolved across. Output: `out_dtype`
    (default: the input dtype; uint8 rounded half away from zero), one tensor per sample.
    """
    if out_dtype is None:
        out_dtype = images[0].dtype if images else torch.float32
    return torch.ops.torchdali.separable_conv.default(
        images, windows, [int(w) for w in window_sizes], first_axis, num_axes, out_dtype)


@register_fake("torchdali::separable_conv")
def _separable_conv_fake(images, windows, window_sizes, first_axis, num_axes, out_dtype):
    op = "separable_conv"
    torch._check_value(first_axis >= 0, lambda: f"{op}: `first_axis` must be >= 0, got {first_axis}")
    torch._check_value(1 <= num_axes <= _MAX_AXES, lambda: (
        f"{op}: `num_axes` must be 1 to {_MAX_AXES}, got {num_axes}"))
    check_samples(op, images, first_axis + num_axes)
    first = images[0]
    torch._check_type(first.dtype in _DTYPES, lambda: (
        f"{op}: `images` must be uint8, float16 or float32, got {first.dtype}"))
    torch._check_type(out_dtype in _DTYPES, lambda: (
        f"{op}: `out_dtype` must be uint8, float16 or float32, got {out_dtype}"))
    expected = len(images) * num_axes
    torch._check_value(len(window_sizes) == expected, lambda: (
        f"{op}: `window_sizes` must have {expected} entries ({num_axes} per sample), got "
        f"{len(window_sizes)}"))
    for k, w in enumerate(window_sizes):
        torch._check_value(w > 0 and w % 2 == 1, lambda: (
            f"{op}: `window_sizes` must be odd and positive; sample {k // num_axes}, axis "
            f"{k % num_axes} has {w}"))
    total = sum(window_sizes)
    torch._check_value(windows.dim() == 1 and windows.shape[0] == total, lambda: (
        f"{op}: `windows` must be 1-D with {total} weights (the sum of `window_sizes`), got "
        f"shape {tuple(windows.shape)}"))
    return [torch.empty_like(im, dtype=out_dtype, memory_format=torch.contiguous_format)
            for im in images]
