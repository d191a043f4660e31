"""`torchdali::warp_affine` (and its `.dense` overload): the Python face and, beside it, the
fake kernels that let `torch.compile` trace it. Serves DALI's warp_affine and rotate."""
from typing import List, Optional, Sequence, Union

import torch

from . import load_extension, register_fake

load_extension()

__all__ = ["warp_affine", "INTERP_NN", "INTERP_LINEAR"]

INTERP_NN, INTERP_LINEAR = 0, 1
_DTYPES = (torch.uint8, torch.int16, torch.int32, torch.float16, torch.float32)


def warp_affine(images: List[torch.Tensor], matrices: torch.Tensor,
                out_sizes: Sequence[Sequence[int]], interp: Union[int, Sequence[int]] = INTERP_LINEAR,
                fill: Optional[torch.Tensor] = None, out_dtype: Optional[torch.dtype] = None,
                chw: bool = False, dense: bool = False):
    """Warps HWC (or CHW) images of any sizes with per-sample 2x3 output-to-input matrices.

    Output pixel (x, y) of image i samples the input at `matrices[i] @ (x + 0.5, y + 0.5, 1)`
    (DALI's warp_affine with inverse_map=True), with INTERP_NN or INTERP_LINEAR (`interp`: one
    value or one per image). Outside the input: `fill` (1 or C values) or, if None, the
    nearest edge pixel. `out_sizes[i]` = (height, width). Returns one tensor per image, or one
    [N, ...] tensor when `dense` (all output sizes equal)."""
    n = len(images)
    flat = [int(v) for hw in out_sizes for v in hw]
    interp = [int(interp)] * n if isinstance(interp, int) else [int(v) for v in interp]
    op = torch.ops.torchdali.warp_affine.dense if dense else torch.ops.torchdali.warp_affine.default
    return op(images, matrices, flat, interp, fill, out_dtype or images[0].dtype, chw)


def _out_shapes(images, matrices, out_sizes, interp, fill, out_dtype, chw):
    """Checks the arguments as the kernels do (those that need no values); the output shapes."""
    n = len(images)
    torch._check_value(n > 0, lambda: "warp_affine: `images` must hold at least one image")
    cdim = 0 if chw else 2
    c = images[0].shape[cdim] if images[0].dim() == 3 else -1
    for i, im in enumerate(images):
        torch._check_value(im.dim() == 3 and im.shape[cdim] == c, lambda: (
            f"warp_affine: all `images` must be {'CHW' if chw else 'HWC'} with {c} channels; "
            f"sample {i} has shape {tuple(im.shape)}"))
        torch._check_type(im.dtype == images[0].dtype and im.dtype in _DTYPES,
                          lambda: f"warp_affine: bad `images` dtype {im.dtype}")
    torch._check_type(out_dtype in _DTYPES, lambda: f"warp_affine: unsupported `out_dtype` {out_dtype}")
    torch._check_value(tuple(matrices.shape) == (n, 2, 3), lambda: (
        f"warp_affine: `matrices` must have shape [{n}, 2, 3], got {tuple(matrices.shape)}"))
    torch._check_value(len(out_sizes) == 2 * n, lambda: (
        f"warp_affine: `out_sizes` must hold 2 values per image: {2 * n}, got {len(out_sizes)}"))
    torch._check_value(len(interp) == n, lambda: (
        f"warp_affine: `interp` must hold one value per image: {n}, got {len(interp)}"))
    if fill is not None:
        torch._check_value(fill.dim() == 1 and fill.shape[0] in (1, c), lambda: (
            f"warp_affine: `fill` must have 1 or {c} values, got shape {tuple(fill.shape)}"))
    shapes = []
    for i in range(n):
        h, w = out_sizes[2 * i], out_sizes[2 * i + 1]
        torch._check_value(h > 0 and w > 0, lambda: (
            f"warp_affine: output size of sample {i} must be positive, got {h}x{w}"))
        torch._check_value(interp[i] in (INTERP_NN, INTERP_LINEAR), lambda: (
            f"warp_affine: interpolation type {interp[i]} of sample {i} is not supported"))
        shapes.append((c, h, w) if chw else (h, w, c))
    return shapes


@register_fake("torchdali::warp_affine")
def _warp_affine_fake(images, matrices, out_sizes, interp, fill, out_dtype, chw=False):
    shapes = _out_shapes(images, matrices, out_sizes, interp, fill, out_dtype, chw)
    return [images[0].new_empty(s, dtype=out_dtype) for s in shapes]


@register_fake("torchdali::warp_affine.dense")
def _warp_affine_dense_fake(images, matrices, out_sizes, interp, fill, out_dtype, chw=False):
    shapes = _out_shapes(images, matrices, out_sizes, interp, fill, out_dtype, chw)
    for i, s in enumerate(shapes):
        torch._check_value(s == shapes[0], lambda: (
            f"warp_affine.dense: all output sizes must be equal; sample 0 is {shapes[0]}, "
            f"sample {i} is {s}"))
    return images[0].new_empty((len(shapes),) + tuple(shapes[0]), dtype=out_dtype)
