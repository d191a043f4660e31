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
    """Warps HWC (or CHW) images of any sizes with per-sample 2x3 output-to-input matrices,
    or DHWC (or CDHW) volumes with 3x4 ones.

    Output pixel (x, y) of image i samples the input at `matrices[i] @ (x + 0.5, y + 0.5, 1)`
    (DALI's warp_affine with inverse_map=True), with INTERP_NN or INTERP_LINEAR (`interp`: one
    value or one per image); a volume's voxel (x, y, z) at `matrices[i] @ (x + 0.5, y + 0.5,
    z + 0.5, 1)`. Outside the input: `fill` (1 or C values) or, if None, the nearest edge
    pixel. `out_sizes[i]` = (height, width), or (depth, height, width) for volumes. Returns one
    tensor per image, or one [N, ...] tensor when `dense` (all output sizes equal)."""
    n = len(images)
    flat = [int(v) for hw in out_sizes for v in hw]
    interp = [int(interp)] * n if isinstance(interp, int) else [int(v) for v in interp]
    op = torch.ops.torchdali.warp_affine.dense if dense else torch.ops.torchdali.warp_affine.default
    return op(images, matrices, flat, interp, fill, out_dtype or images[0].dtype, chw)


def _out_shapes(images, matrices, out_sizes, interp, fill, out_dtype, chw):
    """Checks the arguments as the kernels do (those that need no values); the output shapes."""
    n = len(images)
    torch._check_value(n > 0, lambda: "warp_affine: `images` must hold at least one image")
    nd = 3 if tuple(matrices.shape[1:]) == (3, 4) else 2
    torch._check_value(tuple(matrices.shape) in ((n, 2, 3), (n, 3, 4)), lambda: (
        f"warp_affine: `matrices` must have shape [{n}, 2, 3] or [{n}, 3, 4], got {tuple(matrices.shape)}"))
    layout = ("CDHW" if chw else "DHWC") if nd == 3 else ("CHW" if chw else "HWC")
    cdim = 0 if chw else nd
    c = images[0].shape[cdim] if images[0].dim() == nd + 1 else -1
    for i, im in enumerate(images):
        torch._check_value(im.dim() == nd + 1 and im.shape[cdim] == c, lambda: (
            f"warp_affine: all `images` must be {layout} with {c} channels; sample {i} has shape "
            f"{tuple(im.shape)}"))
        torch._check_type(im.dtype == images[0].dtype and im.dtype in _DTYPES,
                          lambda: f"warp_affine: bad `images` dtype {im.dtype}")
    torch._check_type(out_dtype in _DTYPES, lambda: f"warp_affine: unsupported `out_dtype` {out_dtype}")
    torch._check_value(len(out_sizes) == nd * n, lambda: (
        f"warp_affine: `out_sizes` must hold {nd} values per image: {nd * n}, got {len(out_sizes)}"))
    torch._check_value(len(interp) == n, lambda: (
        f"warp_affine: `interp` must hold one value per image: {n}, got {len(interp)}"))
    if fill is not None:
        torch._check_value(fill.dim() == 1 and fill.shape[0] in (1, c), lambda: (
            f"warp_affine: `fill` must have 1 or {c} values, got shape {tuple(fill.shape)}"))
    shapes = []
    for i in range(n):
        size = tuple(out_sizes[nd * i:nd * (i + 1)])
        torch._check_value(all(v > 0 for v in size), lambda: (
            f"warp_affine: output size of sample {i} must be positive, got {list(size)}"))
        torch._check_value(interp[i] in (INTERP_NN, INTERP_LINEAR), lambda: (
            f"warp_affine: interpolation type {interp[i]} of sample {i} is not supported"))
        shapes.append((c,) + size if chw else size + (c,))
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
