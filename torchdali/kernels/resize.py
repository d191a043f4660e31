"""`torchdali::resize` and `torchdali::resize.dense`: their Python face and, beside it, the
fake kernels that let `torch.compile` trace them."""
from typing import List, Sequence, Union

import torch

from . import load_extension, register_fake

load_extension()

__all__ = ["resize"]

_DTYPES = (torch.uint8, torch.float16, torch.float32)


def resize(images: Union[List[torch.Tensor], torch.Tensor], out_sizes: Sequence[Sequence[int]],
           rois: torch.Tensor = None, interp=1, antialias: bool = True,
           out_dtype: torch.dtype = None, chw: bool = False, dense: bool = False,
           shapes: torch.Tensor = None) -> Union[List[torch.Tensor], torch.Tensor]:
    """Resamples HWC (or, with `chw`, CHW) images of any sizes to `out_sizes[i]` =
    (height, width) with DALI's separable filters; one output tensor per image, or with
    `dense` (all output sizes equal) one [N, ...] tensor. `images`: a list, or one dense
    [N, ...] tensor (read in place when the output is dense), or with `shapes` (int64 [N, 3])
    one 1-D buffer holding the images back to back: then the outputs come back to back in
    one 1-D tensor.

    `rois`: [N, 4] float (y0, x0, y1, x1) input windows in pixels (reversed = flipped;
    None = whole images). `interp`: a DALI interp type (int), or an [N, 2] tensor of
    (min_filter, mag_filter) per sample. `antialias` widens the filter when downscaling.
    """
    n = len(images) if shapes is None else len(shapes)
    if rois is None:
        rois = torch.zeros(n, 4, dtype=torch.float32)
    if not isinstance(interp, torch.Tensor):
        interp = torch.full((n, 2), int(interp), dtype=torch.int64)
    flat = [int(v) for hw in out_sizes for v in hw]
    if shapes is not None:
        return torch.ops.torchdali.resize.flat(images, shapes, flat, rois, interp, antialias, out_dtype or images.dtype,
                                               chw)
    if isinstance(images, torch.Tensor) and not dense:
        images = list(images.unbind(0))
    op = torch.ops.torchdali.resize.dense if dense else torch.ops.torchdali.resize.default
    if isinstance(images, torch.Tensor):
        op = torch.ops.torchdali.resize.dense_in
    return op(images, flat, rois, interp, antialias, out_dtype or images[0].dtype, chw)


def _check(images, out_sizes, rois, interp, out_dtype, chw):
    """The shape of every output ((h, w, c) or (c, h, w)); raises as the kernels do."""
    n = len(images)
    torch._check_value(n > 0, lambda: "resize: `images` must hold at least one image")
    layout, cdim = ("CHW", 0) if chw else ("HWC", 2)
    c = images[0].shape[cdim]
    for i, im in enumerate(images):
        torch._check_value(im.dim() == 3 and im.shape[cdim] == c, lambda: (
            f"resize: all `images` must be {layout} with {c} channels; sample {i} has shape "
            f"{tuple(im.shape)}"))
        torch._check_type(im.dtype == images[0].dtype and im.dtype in _DTYPES,
                          lambda: f"resize: bad `images` dtype {im.dtype}")
    torch._check_value(len(out_sizes) == 2 * n, lambda: (
        f"resize: `out_sizes` must hold 2 values per image: {2 * n}, got {len(out_sizes)}"))
    torch._check_value(rois.dim() == 2 and rois.shape[0] == n and rois.shape[1] == 4,
                       lambda: f"resize: `rois` must have shape [{n}, 4], got {tuple(rois.shape)}")
    torch._check_value(interp.dim() == 2 and interp.shape[0] == n and interp.shape[1] == 2,
                       lambda: f"resize: `interp` must have shape [{n}, 2], got {tuple(interp.shape)}")
    torch._check_type(out_dtype in _DTYPES, lambda: f"resize: unsupported `out_dtype` {out_dtype}")
    shapes = []
    for i in range(n):
        h, w = out_sizes[2 * i], out_sizes[2 * i + 1]
        torch._check_value(h > 0 and w > 0, lambda: (
            f"resize: output size of sample {i} must be positive, got {h}x{w}"))
        shapes.append((c, h, w) if chw else (h, w, c))
    return shapes


@register_fake("torchdali::resize")
def _resize_fake(images, out_sizes, rois, interp, antialias, out_dtype, chw=False):
    shapes = _check(images, out_sizes, rois, interp, out_dtype, chw)
    return [im.new_empty(s, dtype=out_dtype) for im, s in zip(images, shapes)]


@register_fake("torchdali::resize.dense")
def _resize_dense_fake(images, out_sizes, rois, interp, antialias, out_dtype, chw=False):
    shapes = _check(images, out_sizes, rois, interp, out_dtype, chw)
    for i, s in enumerate(shapes):
        torch._check_value(s == shapes[0], lambda: (
            f"resize: a dense output needs one output size for all images; sample 0 is "
            f"{shapes[0]}, sample {i} is {s}"))
    return images[0].new_empty((len(images),) + shapes[0], dtype=out_dtype)


@register_fake("torchdali::resize.flat")
def _resize_flat_fake(images, shapes, out_sizes, rois, interp, antialias, out_dtype, chw=False):
    torch._check_value(images.dim() == 1, lambda: "resize: a flat batch of `images` must be 1-D")
    torch._check_value(shapes.dim() == 2 and shapes.shape[0] > 0 and shapes.shape[1] == 3, lambda: (
        f"resize: `shapes` must be [N, 3] with at least one image, got {tuple(shapes.shape)}"))
    n = shapes.shape[0]
    torch._check_value(len(out_sizes) == 2 * n, lambda: (
        f"resize: `out_sizes` must hold 2 values per image: {2 * n}, got {len(out_sizes)}"))
    torch._check_type(out_dtype in _DTYPES, lambda: f"resize: unsupported `out_dtype` {out_dtype}")
    # The channels are in `shapes`' values, which tracing does not see: the size is dynamic.
    return images.new_empty(torch.library.get_ctx().new_dynamic_size(), dtype=out_dtype)


@register_fake("torchdali::resize.dense_in")
def _resize_dense_in_fake(images, out_sizes, rois, interp, antialias, out_dtype, chw=False):
    torch._check_value(images.dim() >= 1, lambda: "resize: a dense batch of `images` needs a leading batch dimension")
    return _resize_dense_fake(list(images.unbind(0)), out_sizes, rois, interp, antialias, out_dtype, chw)
