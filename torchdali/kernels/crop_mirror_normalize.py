"""`torchdali::crop_mirror_normalize`: its Python face and, beside it, the fake kernel that
lets `torch.compile` trace it."""
from typing import List, Union

import torch

from . import load_extension, register_fake

load_extension()

__all__ = ["crop_mirror_normalize"]

_CMN_IN_DTYPES = (torch.uint8, torch.float16, torch.float32)
_CMN_OUT_DTYPES = (torch.float32, torch.float16, torch.uint8, torch.int8, torch.int16,
                   torch.int32)


def crop_mirror_normalize(images: Union[List[torch.Tensor], torch.Tensor], anchors: torch.Tensor,
                          mirror: torch.Tensor, mean: torch.Tensor, inv_std: torch.Tensor,
                          crop_h: int, crop_w: int, out_dtype: torch.dtype = torch.float32,
                          out_chw: bool = True, out_channels: int = 0, scale: float = 1.0,
                          shift: float = 0.0, fill: torch.Tensor = None,
                          in_chw: bool = False, shapes: torch.Tensor = None) -> torch.Tensor:
    """Crops, flips and normalizes a batch of HWC (or, with `in_chw`, CHW) images of any
    sizes (a list, one dense [N, ...] tensor read in place, or with `shapes` (int64 [N, 3])
    one 1-D buffer holding the images back to back) into one dense tensor.

    Sample i is cropped at `anchors[i]` = (y, x) to `crop_h` x `crop_w` (pixels outside the
    image take `fill[c]`), flipped horizontally where `mirror[i]` != 0, and normalized as
    `(in - mean[c]) * inv_std[c] * scale + shift`, rounded and saturated to `out_dtype`.
    Output: [N, out_channels, crop_h, crop_w] if `out_chw` else [N, crop_h, crop_w,
    out_channels]; `out_channels` = 0 means C; channels >= C hold `fill[c]` (default 0).
    """
    if out_channels == 0:
        out_channels = int(shapes[0, 0 if in_chw else -1]) if shapes is not None else \
            images[0].shape[0 if in_chw else -1]
    if fill is None:
        fill = torch.zeros(1, dtype=torch.float32)
    op = torch.ops.torchdali.crop_mirror_normalize
    args = (anchors, mirror, mean, inv_std, crop_h, crop_w, out_dtype, out_chw, out_channels, scale, shift, fill,
            in_chw)
    if shapes is not None:
        return op.flat_in(images, shapes, *args)
    return (op.dense_in if isinstance(images, torch.Tensor) else op.default)(images, *args)


@register_fake("torchdali::crop_mirror_normalize")
def _crop_mirror_normalize_fake(images, anchors, mirror, mean, inv_std, crop_h, crop_w,
                                out_dtype, out_chw, out_channels, scale, shift, fill,
                                in_chw=False):
    n = len(images)
    torch._check_value(n > 0, lambda: "crop_mirror_normalize: `images` must hold an image")
    layout, cdim = ("CHW", 0) if in_chw else ("HWC", 2)
    c = images[0].shape[cdim]
    for i, im in enumerate(images):
        torch._check_value(im.dim() == 3, lambda: (
            f"crop_mirror_normalize: `images` must be {layout} (3 dims), sample {i} has shape "
            f"{tuple(im.shape)}"))
        torch._check_value(im.shape[cdim] == c, lambda: (
            f"crop_mirror_normalize: all `images` must have the same number of channels; "
            f"sample 0 has {c}, sample {i} has {im.shape[cdim]}"))
        torch._check_type(im.dtype == images[0].dtype and im.dtype in _CMN_IN_DTYPES,
                          lambda: f"crop_mirror_normalize: bad `images` dtype {im.dtype}")
    torch._check_value(anchors.dim() == 2 and anchors.shape[0] == n and anchors.shape[1] == 2,
                       lambda: (f"crop_mirror_normalize: `anchors` must have shape [{n}, 2], "
                                f"got {tuple(anchors.shape)}"))
    torch._check_value(mirror.dim() == 1 and mirror.shape[0] == n, lambda: (
        f"crop_mirror_normalize: `mirror` must have shape [{n}], got {tuple(mirror.shape)}"))
    torch._check_value(crop_h > 0 and crop_w > 0, lambda: (
        f"crop_mirror_normalize: `crop_h` and `crop_w` must be positive, got crop_h={crop_h}, "
        f"crop_w={crop_w}"))
    torch._check_value(out_channels >= c, lambda: (
        f"crop_mirror_normalize: `out_channels` ({out_channels}) must be >= the number of "
        f"input channels ({c})"))
    torch._check_type(out_dtype in _CMN_OUT_DTYPES,
                      lambda: f"crop_mirror_normalize: unsupported `out_dtype` {out_dtype}")
    shape = (n, out_channels, crop_h, crop_w) if out_chw else (n, crop_h, crop_w, out_channels)
    return images[0].new_empty(shape, dtype=out_dtype)


@register_fake("torchdali::crop_mirror_normalize.flat_in")
def _crop_mirror_normalize_flat_in_fake(images, shapes, anchors, mirror, mean, inv_std, crop_h, crop_w, out_dtype,
                                        out_chw, out_channels, scale, shift, fill, in_chw=False):
    torch._check_value(images.dim() == 1, lambda: "crop_mirror_normalize: a flat batch of `images` must be 1-D")
    torch._check_value(shapes.dim() == 2 and shapes.shape[0] > 0 and shapes.shape[1] == 3, lambda: (
        f"crop_mirror_normalize: `shapes` must be [N, 3] with at least one image, got {tuple(shapes.shape)}"))
    n = shapes.shape[0]
    torch._check_value(anchors.dim() == 2 and anchors.shape[0] == n and anchors.shape[1] == 2,
                       lambda: (f"crop_mirror_normalize: `anchors` must have shape [{n}, 2], "
                                f"got {tuple(anchors.shape)}"))
    torch._check_value(crop_h > 0 and crop_w > 0, lambda: (
        f"crop_mirror_normalize: `crop_h` and `crop_w` must be positive, got crop_h={crop_h}, "
        f"crop_w={crop_w}"))
    torch._check_type(out_dtype in _CMN_OUT_DTYPES,
                      lambda: f"crop_mirror_normalize: unsupported `out_dtype` {out_dtype}")
    shape = (n, out_channels, crop_h, crop_w) if out_chw else (n, crop_h, crop_w, out_channels)
    return images.new_empty(shape, dtype=out_dtype)


@register_fake("torchdali::crop_mirror_normalize.dense_in")
def _crop_mirror_normalize_dense_in_fake(images, *args, **kwargs):
    torch._check_value(images.dim() >= 1, lambda: (
        "crop_mirror_normalize: a dense batch of `images` needs a leading batch dimension"))
    return _crop_mirror_normalize_fake(list(images.unbind(0)), *args, **kwargs)
