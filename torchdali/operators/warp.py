"""`warp_affine` and `rotate`: affine resampling of 2D images on the `torchdali::warp_affine`
kernel (csrc/), one call per batch. Both build a float32 output-to-input matrix per sample
the way DALI does (rotate: DALI's canvas size and parity rule) and share the arguments of
DALI's WarpAttr (size, fill_value, interp_type, dtype)."""
import math

import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, FLOAT, FLOATS, INTERP_TYPE, REQUIRED, ArgType, Arg, register
from ..tensor_list import TensorList
from .base import Operator
from .images import image_batch

_F32 = np.float32
_D2R = _F32(math.pi / 180)  # DALI's deg2rad constant, in float


def _flat_floats(v):
    """A matrix given as a list or an array of any shape (e.g. 2x3), as a flat float list."""
    values = np.asarray(v, dtype=np.float64).ravel().tolist() if isinstance(v, np.ndarray) else v
    return FLOATS.convert(values)


def _interp_check(v):
    if int(v) not in (types.DALIInterpType.INTERP_NN, types.DALIInterpType.INTERP_LINEAR):
        return "only INTERP_NN and INTERP_LINEAR are supported by the warp operators"
    return None


def _matrix_check(v):
    if len(v) != 6:
        return f"must have 6 values (a 2x3 matrix), got {len(v)}"
    return None if all(math.isfinite(x) for x in v) else "must be finite"


def _size_check(v):
    if len(v) != 2 or not all(math.isfinite(x) and x > 0 for x in v):
        return "must be 2 positive values (height, width)"
    return None


MATRIX = ArgType("list of float", _flat_floats)

# DALI's WarpAttr: the arguments that warp_affine and rotate share.
WARP_ARGS = [
    Arg("size", FLOATS, None, "Output size (height, width), rounded; default: see the operator.",
        per_sample=True, check=_size_check),
    Arg("fill_value", FLOAT, None, "Value of output pixels that map outside the input; without "
        "it the edge pixels are repeated."),
    Arg("interp_type", INTERP_TYPE, types.DALIInterpType.INTERP_LINEAR,
        "INTERP_NN or INTERP_LINEAR.", per_sample=True, check=_interp_check),
    Arg("dtype", DTYPE, None, "Output type; the input's if not set.",
        choices=(types.UINT8, types.FLOAT16, types.FLOAT)),
]


def _images(op, batch):
    """The batch's samples and whether they are CHW (2D HWC/CHW images, see images.py)."""
    images = image_batch(op, batch)
    return images.samples, images.chw


def _spatial(im, chw):
    """(height, width) of an image."""
    return (int(im.shape[1]), int(im.shape[2])) if chw else (int(im.shape[0]), int(im.shape[1]))


def explicit_size(op, i, args):
    """Sample i's `size` as integer (height, width), or None when not given. A constant is
    rounded (DALI: max(round(s), 1)); DALI truncates per-sample sizes."""
    size = args.sample("size", i)
    if size is None:
        return None
    if args.is_per_sample("size"):
        hw = [int(s) for s in size]
    else:
        hw = [max(int(math.floor(s + 0.5)), 1) for s in size]
    if min(hw) <= 0:
        raise op.error(f"argument 'size' must be at least 1, got {size} for sample {i}", ValueError)
    return hw


def run_warp(op, batch, images, chw, matrices, sizes, args):
    """Warp `images` with the per-sample 2x3 `matrices` to `sizes`; a dense output batch when
    all sizes are equal."""
    from ..kernels.warp import warp_affine  # loads the extension on first use

    n = len(images)
    interp = np.broadcast_to(np.asarray(args.batch("interp_type"), np.int64), (n,)).tolist()
    fill = args["fill_value"]
    fill = None if fill is None else torch.tensor([fill], dtype=torch.float32)
    dtype = images[0].dtype if args["dtype"] is None else types.to_torch_type(args["dtype"])
    m = torch.from_numpy(np.asarray(matrices, dtype=np.float32).reshape(n, 2, 3))
    dense = all(s == sizes[0] for s in sizes)
    out = warp_affine(images, m, sizes, interp, fill, dtype, chw, dense=dense)
    return [TensorList.make(out, "CHW" if chw else "HWC", device=batch.device)]


def _invert(m):
    """The inverse of a 2x3 affine map (as the 3x3 matrix it stands for), or None."""
    full = np.vstack([np.asarray(m, dtype=np.float64).reshape(2, 3), [0.0, 0.0, 1.0]])
    if abs(np.linalg.det(full)) < 1e-12:
        return None
    return np.linalg.inv(full)[:2].ravel()


@register("warp_affine", devices=("cpu", "gpu"), inputs=(1, 2), aliases=("WarpAffine",),
          input_names=("data", "mtx"), deprecated_args={"output_dtype": "dtype"},
          args=WARP_ARGS + [
              Arg("matrix", MATRIX, None, "The 2x3 matrix (M11, M12, M13, M21, M22, M23): "
                  "dst(x, y) = src(M11 x + M12 y + M13, M21 x + M22 y + M23), (0, 0) being the "
                  "first pixel's corner. May instead be given as a second input.", per_sample=True,
                  check=_matrix_check),
              Arg("inverse_map", BOOL, True, "True: `matrix` maps output to input coordinates; "
                  "False: input to output (it is inverted)."),
          ])
class WarpAffine(Operator):
    """Apply an affine transform to HWC (or CHW) images; output size `size` (default: the
    input's)."""

    def __init__(self, spec):
        super().__init__(spec)
        given = "matrix" in spec.arg_input_names or spec.args.get("matrix") is not None
        if len(spec.input_devices) < 2 and not given:
            raise ValueError("warp_affine: the argument 'matrix' must be given when the "
                             "transform is not passed as the second input")
        if len(spec.input_devices) == 2 and given:
            raise ValueError("warp_affine: give the transform either as the argument 'matrix' "
                             "or as the second input, not both")

    def _matrix(self, i, inputs, args):
        if len(inputs) > 1:
            m, what = self._input_matrix(inputs[1].as_torch_list()[i], i), "input 1 (mtx)"
        else:
            m, what = np.asarray(args.sample("matrix", i), dtype=np.float64), "argument 'matrix'"
        if not args["inverse_map"]:
            inv = _invert(m)
            if inv is None:
                raise self.error(f"{what} of sample {i} is not invertible (inverse_map=False): "
                                 f"{m.tolist()}", ValueError)
            m = inv
        return m

    def _input_matrix(self, m, i):
        """Sample i of the matrix input: 6 finite floats (a 2x3 matrix)."""
        if not m.is_floating_point():
            raise self.error(f"input 1 (mtx) must be float, got {m.dtype} for sample {i}", TypeError)
        m = m.detach().cpu().double().numpy().ravel()
        problem = _matrix_check(m.tolist())
        if problem:
            raise self.error(f"input 1 (mtx) of sample {i} {problem}: {m.tolist()}", ValueError)
        return m

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        images, chw = _images(self, batch)
        if not images:
            return [batch]
        matrices, sizes = [], []
        for i, im in enumerate(images):
            matrices.append(self._matrix(i, inputs, args))
            sizes.append(explicit_size(self, i, args) or list(_spatial(im, chw)))
        return run_warp(self, batch, images, chw, matrices, sizes, args)


def rotated_canvas(h, w, angle):
    """DALI's output (height, width) of a rotation by `angle` degrees (RotatedCanvasSize): the
    rotated image's bounding box less 0.01, rounded up, then made one larger where its parity
    differs from the input extent that dominates it (less blur near the centre)."""
    rad = float(_F32(-angle) * _D2R)
    c, s = abs(math.cos(rad)), abs(math.sin(rad))
    out_w = math.ceil(c * w + s * h - 1e-2)
    out_h = math.ceil(c * h + s * w - 1e-2)
    par_w, par_h = (w % 2, h % 2) if s <= c else (h % 2, w % 2)
    out_w += (out_w % 2) ^ par_w
    out_h += (out_h % 2) ^ par_h
    return out_h, out_w


def rotation_matrix(in_hw, out_hw, angle):
    """DALI's output-to-input matrix of a rotation by `angle` degrees counter-clockwise about
    the centres of the input and output canvases, in float32 as DALI computes it."""
    rad = _F32(angle) * _D2R
    c, s = _F32(math.cos(float(rad))), _F32(math.sin(float(rad)))
    ih, iw = _F32(in_hw[0]) * _F32(0.5), _F32(in_hw[1]) * _F32(0.5)
    oh, ow = _F32(out_hw[0]) * _F32(-0.5), _F32(out_hw[1]) * _F32(-0.5)
    tx = (c * ow + -s * oh) + iw
    ty = (s * ow + c * oh) + ih
    return [c, -s, tx, s, c, ty]


@register("rotate", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("Rotate",),
          deprecated_args={"output_dtype": "dtype"},
          args=WARP_ARGS + [
              Arg("angle", FLOAT, REQUIRED, "Rotation in degrees, counter-clockwise (the top-left "
                  "corner being (0, 0)).", per_sample=True,
                  check=lambda v: None if math.isfinite(v) else "must be a finite number"),
              Arg("axis", FLOATS, None, "Rotation axis of 3D volumes; not supported (2D images "
                  "only).", per_sample=True),
              Arg("keep_size", BOOL, False, "Keep the input's size (default: the rotated image's "
                  "bounding box, with DALI's parity rule)."),
          ])
class Rotate(Operator):
    """Rotate HWC (or CHW) images by `angle` degrees counter-clockwise about their centre; the
    canvas grows to hold the whole rotated image unless `keep_size` or `size` is given."""

    def __init__(self, spec):
        super().__init__(spec)
        if "axis" in spec.arg_input_names or spec.args.get("axis") is not None:
            raise ValueError("rotate: the argument 'axis' applies to 3D volumes, which are not "
                             "supported; rotate 2D images without it")

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        images, chw = _images(self, batch)
        if not images:
            return [batch]
        matrices, sizes = [], []
        for i, im in enumerate(images):
            angle = args.sample("angle", i)
            in_hw = _spatial(im, chw)
            out_hw = explicit_size(self, i, args)
            if out_hw is None:
                out_hw = list(in_hw) if args["keep_size"] else list(rotated_canvas(*in_hw, angle))
            matrices.append(rotation_matrix(in_hw, out_hw, angle))
            sizes.append(out_hw)
        return run_warp(self, batch, images, chw, matrices, sizes, args)
