"""`warp_affine` and `rotate`: affine resampling of 2D images and 3D volumes on the
`torchdali::warp_affine` kernel (csrc/), one call per batch. Both build a float32
output-to-input matrix per sample the way DALI does (rotate: DALI's canvas size and parity
rule, about an axis for volumes) and share the arguments of DALI's WarpAttr (size,
fill_value, interp_type, dtype)."""
import math

import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, FLOAT, FLOATS, INTERP_TYPE, REQUIRED, ArgType, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator
from .images import (IMAGE_DTYPES, VOLUME_LAYOUTS, image_batch, over_frames, plan_images, refuse_huge_outputs,
                     volume_batch)

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
    if len(v) not in (6, 12):
        return f"must have 6 values (a 2x3 matrix) or, for volumes, 12 (3x4), got {len(v)}"
    return None if all(math.isfinite(x) for x in v) else "must be finite"


def _size_check(v):
    if len(v) not in (2, 3) or not all(math.isfinite(x) and x > 0 for x in v):
        return "must be 2 positive values (height, width), or 3 (depth, height, width) for volumes"
    return None


def _axis_check(v):
    if len(v) != 3 or not all(math.isfinite(x) for x in v) or not any(v):
        return "must be 3 finite values (x, y, z), not all zero"
    return None


MATRIX = ArgType("list of float", _flat_floats)

# DALI's WarpAttr: the arguments that warp_affine and rotate share.
WARP_ARGS = [
    Arg("size", FLOATS, None, "Output size (height, width), or (depth, height, width) of volumes, "
        "rounded; default: see the operator.", per_sample=True, check=_size_check),
    Arg("fill_value", FLOAT, None, "Value of output pixels that map outside the input; without "
        "it the edge pixels are repeated."),
    Arg("interp_type", INTERP_TYPE, types.DALIInterpType.INTERP_LINEAR,
        "INTERP_NN or INTERP_LINEAR.", per_sample=True, check=_interp_check),
    Arg("dtype", DTYPE, None, "Output type; the input's if not set. int16 and int32 images (label "
        "maps) go to their own type or FLOAT, and only FLOAT images to INT16 or INT32.",
        choices=(types.UINT8, types.INT16, types.INT32, types.FLOAT16, types.FLOAT)),
]

# The images warp_affine and rotate take: IMAGE_DTYPES and DALI's label types.
LABEL_TYPES = (torch.int16, torch.int32)
WARP_DTYPES = IMAGE_DTYPES + LABEL_TYPES


def check_type_pair(op, in_dtype, dtype):
    """The conversions DALI's warp operators make for label types: int16 / int32 to their own
    type or float32, and float32 to either (an error naming the operator otherwise)."""
    if in_dtype is None or dtype is None:
        return
    out = types.to_torch_type(dtype)
    if (in_dtype in LABEL_TYPES and out not in (in_dtype, torch.float32)) or \
            (out in LABEL_TYPES and in_dtype not in (out, torch.float32)):
        raise op.error(f"cannot warp {types.to_dali_type(in_dtype).name} images to {types.to_dali_type(out).name}: "
                       "int16 and int32 images go to their own type or FLOAT, and only FLOAT images to INT16 or "
                       "INT32", TypeError)


def plan_warp(op, spec):
    """Build-time checks of warp_affine's and rotate's input."""
    plan_images(op, spec, dtypes=WARP_DTYPES, sequences=True, volumes=True)
    check_type_pair(op, spec.dtype, op.spec.args["dtype"])


class Spatial:
    """A batch of images or volumes as the warp kernel takes it: the samples, their spatial
    extents [N, k] ((height, width), or (depth, height, width) of volumes), channels first or
    not, and the element type."""

    def __init__(self, op, batch):
        if batch.layout() in VOLUME_LAYOUTS:
            v = volume_batch(op, batch, WARP_DTYPES)
            self.extents, self.channel_first, self.dtype = v.dhw, v.channel_first, v.dtype
        else:
            im = image_batch(op, batch, WARP_DTYPES)
            self.extents, self.channel_first, self.dtype = im.hw, im.chw, im.dtype
        self.batch = batch
        self.ndim = self.extents.shape[1]

    @property
    def samples(self):
        return self.batch.as_torch_list()


def explicit_sizes(op, args, n, k=2):
    """The `size` argument as integer rows [N, k] ((height, width), or (depth, height, width)
    of volumes), or None when not given. A constant is rounded (DALI: max(round(s), 1)); DALI
    truncates per-sample sizes."""
    size = args.batch("size")
    if size is None:
        return None
    size = np.asarray(size, np.float64)
    if size.shape[-1] != k:
        what = "(height, width) for images" if k == 2 else "(depth, height, width) for volumes"
        raise op.error(f"argument 'size' must have {k} values {what}, got {size.tolist()}", ValueError)
    size = np.broadcast_to(size, (n, k))
    hw = np.trunc(size) if args.is_per_sample("size") else np.maximum(np.floor(size + 0.5), 1)
    if (hw <= 0).any():
        i = int(np.argmax((hw <= 0).any(axis=1)))
        raise op.error(f"argument 'size' must be at least 1, got {size[i].tolist()} for sample {i}", ValueError)
    refuse_huge_outputs(op, hw, ["size"])
    return hw.astype(np.int64)


def run_warp(op, batch, images, matrices, sizes, args):
    """Warp `images` (a Spatial batch) with the output-to-input `matrices` ([N, k (k + 1)]) to
    `sizes` ([N, k]) in one kernel call; a dense output batch when all sizes are equal."""
    from ..kernels.warp import warp_affine  # loads the extension on first use

    n, k = len(sizes), images.ndim
    check_type_pair(op, images.dtype, args["dtype"])
    interp = np.broadcast_to(np.asarray(args.batch("interp_type"), np.int64), (n,)).tolist()
    fill = args["fill_value"]
    fill = None if fill is None else torch.tensor([fill], dtype=torch.float32)
    dtype = images.dtype if args["dtype"] is None else types.to_torch_type(args["dtype"])
    m = torch.from_numpy(np.asarray(matrices, dtype=np.float32).reshape(n, k, k + 1))
    dense = bool((sizes == sizes[0]).all())
    out = warp_affine(images.samples, m, sizes.tolist(), interp, fill, dtype, images.channel_first, dense=dense)
    return [TensorList.make(out, batch.layout(), device=batch.device)]


def check_matrix_source(spec):
    """A warp's transform comes from the argument 'matrix' or from the second input: exactly one."""
    given = "matrix" in spec.arg_input_names or spec.args.get("matrix") is not None
    if len(spec.input_devices) < 2 and not given:
        raise ValueError(f"{spec.schema.name}: the argument 'matrix' must be given when the transform is not "
                         "passed as the second input")
    if len(spec.input_devices) == 2 and given:
        raise ValueError(f"{spec.schema.name}: give the transform either as the argument 'matrix' or as the "
                         "second input, not both")


def _inverted(op, m, k, what):
    """The inverses of affine maps [N, k (k + 1)] (as the square matrices they stand for); an
    error naming the first that is not invertible."""
    full = np.zeros((len(m), k + 1, k + 1))
    full[:, :k] = m.reshape(-1, k, k + 1)
    full[:, k, k] = 1.0
    singular = np.abs(np.linalg.det(full)) < 1e-12
    if singular.any():
        i = int(np.argmax(singular))
        raise op.error(f"{what} of sample {i} is not invertible (inverse_map=False): {m[i].tolist()}", ValueError)
    return np.linalg.inv(full)[:, :k].reshape(-1, k * (k + 1))


@register("warp_affine", devices=("cpu", "gpu"), inputs=(1, 2), aliases=("WarpAffine",),
          input_names=("data", "mtx"), deprecated_args={"output_dtype": "dtype"},
          args=WARP_ARGS + [
              Arg("matrix", MATRIX, None, "The 2x3 matrix (M11, M12, M13, M21, M22, M23): "
                  "dst(x, y) = src(M11 x + M12 y + M13, M21 x + M22 y + M23), (0, 0) being the "
                  "first pixel's corner; for volumes a 3x4 matrix over (x, y, z). May instead be "
                  "given as a second input.", per_sample=True, per_frame=True, check=_matrix_check),
              Arg("inverse_map", BOOL, True, "True: `matrix` maps output to input coordinates; "
                  "False: input to output (it is inverted)."),
          ])
class WarpAffine(Operator):
    """Apply an affine transform to HWC (or CHW) images, DHWC (or CDHW) volumes, and to
    sequences of either frame by frame; output size `size` (default: the input's)."""

    def __init__(self, spec):
        super().__init__(spec)
        check_matrix_source(spec)

    def _matrices(self, inputs, args, n, k):
        """The output-to-input matrices [N, k (k + 1)] (float64) for k spatial dims, from the
        argument or the input."""
        size = k * (k + 1)
        if len(inputs) > 1:
            m, what = self._input_matrices(inputs[1], k), "input 1 (mtx)"
        else:
            m = np.asarray(args.batch("matrix"), np.float64)
            if m.shape[-1] != size:
                raise self.error(f"argument 'matrix' must have {size} values ({'a 2x3' if k == 2 else 'a 3x4'} "
                                 f"matrix) for {'images' if k == 2 else 'volumes'}, got {m.shape[-1]}", ValueError)
            m = np.broadcast_to(m, (n, size))
            what = "argument 'matrix'"
        return m if args["inverse_map"] else _inverted(self, m, k, what)

    def _input_matrices(self, batch, k):
        """The matrix input: per sample k (k + 1) finite floats (a 2x3 matrix for images, 3x4
        for volumes), as [N, k (k + 1)]."""
        size, shape = k * (k + 1), "a 2x3 matrix" if k == 2 else "a 3x4 matrix"
        dtype = batch.sample(0).dtype if len(batch) else torch.float32
        if not dtype.is_floating_point:
            raise self.error(f"input 1 (mtx) must be float, got {dtype} for sample 0", TypeError)
        try:
            m = batch.as_torch().detach().cpu().double().reshape(len(batch), -1).numpy()
        except RuntimeError:  # samples of different shapes
            m = None
        if m is None or m.shape[1] != size:
            sizes = [s.numel() for s in batch.as_torch_list()]
            i = next((i for i, c in enumerate(sizes) if c != size), 0)
            raise self.error(f"input 1 (mtx) of sample {i} must have {size} values ({shape}), got {sizes[i]}",
                             ValueError)
        bad = ~np.isfinite(m).all(axis=1)
        if bad.any():
            i = int(np.argmax(bad))
            raise self.error(f"input 1 (mtx) of sample {i} must be finite: {m[i].tolist()}", ValueError)
        return m

    def plan(self, inputs):
        plan_warp(self, inputs[0])
        return [BatchSpec("gpu" if self.spec.device == "gpu" else "cpu")], over_frames(self, self.run)

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        if not len(batch):
            return [batch]
        images = Spatial(self, batch)
        n, k = len(batch), images.ndim
        sizes = explicit_sizes(self, args, n, k)
        return run_warp(self, batch, images, self._matrices(inputs, args, n, k),
                        images.extents if sizes is None else sizes, args)


def rotated_canvas(hw, angles, frames=None):
    """DALI's output (height, width) [N, 2] of rotations by `angles` degrees
    (RotatedCanvasSize): each rotated image's bounding box less 0.01, rounded up, then made
    one larger where its parity differs from the input extent that dominates it (less blur
    near the centre). `frames`: the images are the frames of sequences of these lengths, which
    share one canvas (see with_parity)."""
    rad = (-angles.astype(_F32) * _D2R).astype(np.float64)
    c, s = np.abs(np.cos(rad)), np.abs(np.sin(rad))
    h, w = hw[:, 0], hw[:, 1]
    out_w = np.ceil(c * w + s * h - 1e-2).astype(np.int64)
    out_h = np.ceil(c * h + s * w - 1e-2).astype(np.int64)
    upright = s <= c
    par_w, par_h = np.where(upright, w % 2, h % 2), np.where(upright, h % 2, w % 2)
    return with_parity(np.stack([out_h, out_w], axis=1), np.stack([par_h, par_w], axis=1), frames)


def with_parity(extents, parity, frames=None):
    """Rotated canvases [N, k] made one larger where their parity differs from the wanted
    `parity` [N, k]. For sequences (`frames`: their lengths, the rows being their frames in
    order) as DALI does: every frame of a sequence gets the largest extents of its frames,
    with the parity most of them want."""
    if frames is None or (frames == 1).all():
        return extents + ((extents % 2) ^ parity)
    starts = np.concatenate([[0], np.cumsum(frames)[:-1]])
    largest = np.maximum.reduceat(extents, starts, axis=0)
    wanted = 2 * np.add.reduceat(parity, starts, axis=0) > frames[:, None]
    return np.repeat(largest + ((largest % 2) ^ wanted), frames, axis=0)


def rotation_matrices(in_hw, out_hw, angles):
    """DALI's output-to-input matrices [N, 6] of rotations by `angles` degrees
    counter-clockwise about the centres of the input and output canvases, in float32 as DALI
    computes them."""
    rad = angles.astype(_F32) * _D2R
    c, s = np.cos(rad.astype(np.float64)).astype(_F32), np.sin(rad.astype(np.float64)).astype(_F32)
    ih, iw = in_hw[:, 0].astype(_F32) * _F32(0.5), in_hw[:, 1].astype(_F32) * _F32(0.5)
    oh, ow = out_hw[:, 0].astype(_F32) * _F32(-0.5), out_hw[:, 1].astype(_F32) * _F32(-0.5)
    tx = (c * ow + -s * oh) + iw
    ty = (s * ow + c * oh) + ih
    return np.stack([c, -s, tx, s, c, ty], axis=1)


def _rotations_3d(axes, rad):
    """DALI's rotation3D in float32: [N, 3, 3] rotations by `rad` (float32 [N]) about `axes`
    ([N, 3], (x, y, z), normalized here); the identity where the angle is 0."""
    c, s = np.cos(rad.astype(np.float64)).astype(_F32), np.sin(rad.astype(np.float64)).astype(_F32)
    a = axes.astype(_F32)
    lsq = (a[:, 0] * a[:, 0] + a[:, 1] * a[:, 1]) + a[:, 2] * a[:, 2]
    u, v, w = (a * (1.0 / np.sqrt(lsq.astype(np.float64))).astype(_F32)[:, None]).T
    uu, vv, ww, uv, uw, vw = u * u, v * v, w * w, u * v, u * w, v * w
    one_c = _F32(1) - c
    r = np.stack([uu + (vv + ww) * c, uv * one_c - w * s, uw * one_c + v * s,
                  uv * one_c + w * s, vv + (uu + ww) * c, vw * one_c - u * s,
                  uw * one_c - v * s, vw * one_c + u * s, ww + (uu + vv) * c], axis=1).reshape(-1, 3, 3)
    r[rad == 0] = np.eye(3, dtype=_F32)
    return r


def _times(m, v):
    """m @ v for [N, 3, 3] float32 matrices and [N, 3] vectors, summed left to right as DALI's
    float arithmetic does."""
    return (m[:, :, 0] * v[:, 0:1] + m[:, :, 1] * v[:, 1:2]) + m[:, :, 2] * v[:, 2:3]


def rotated_volume_canvas(dhw, axes, angles, frames=None):
    """DALI's output (depth, height, width) [N, 3] of volumes rotated by `angles` degrees about
    `axes` (RotatedCanvasSize): the rotated box less 0.01, rounded up, then made one larger
    where its parity differs from that of the input extent that dominates it (the diagonal's
    unless another weighs strictly more). `frames`: as for rotated_canvas."""
    size = dhw[:, ::-1]  # (x, y, z) = (width, height, depth)
    m = np.abs(_rotations_3d(axes, angles.astype(_F32) * _D2R))
    out = np.ceil(_times(m, size.astype(_F32)) - _F32(1e-2)).astype(np.int64)
    dominant = np.broadcast_to(np.arange(3), out.shape).copy()
    rows = np.arange(len(out))[:, None]
    for j in range(3):
        heavier = m[:, :, j] > m[rows, np.arange(3), dominant]
        dominant[heavier] = j
    parity = np.take_along_axis(size, dominant, axis=1) % 2
    return with_parity(out[:, ::-1], parity[:, ::-1], frames)


def volume_rotation_matrices(in_dhw, out_dhw, axes, angles):
    """DALI's output-to-input matrices [N, 12] (3x4, over (x, y, z)) of rotations by `angles`
    degrees about `axes` through the centres of the input and output volumes, in float32."""
    r = _rotations_3d(axes, -(angles.astype(_F32) * _D2R))
    centre_in = in_dhw[:, ::-1].astype(_F32) * _F32(0.5)
    centre_out = out_dhw[:, ::-1].astype(_F32) * _F32(-0.5)
    t = _times(r, centre_out) + centre_in
    return np.concatenate([r, t[:, :, None]], axis=2).reshape(-1, 12)


@register("rotate", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("Rotate",),
          deprecated_args={"output_dtype": "dtype"},
          args=WARP_ARGS + [
              Arg("angle", FLOAT, REQUIRED, "Rotation in degrees, counter-clockwise (the top-left "
                  "corner being (0, 0)).", per_sample=True, per_frame=True,
                  check=lambda v: None if math.isfinite(v) else "must be a finite number"),
              Arg("axis", FLOATS, None, "Rotation axis of volumes (x, y, z), required for them: "
                  "the right-hand rule in coordinates where x goes right, y down and z deeper, so "
                  "about (0, 0, 1) each depth plane turns clockwise. Images ignore it, as in DALI.",
                  per_sample=True, per_frame=True, check=_axis_check),
              Arg("keep_size", BOOL, False, "Keep the input's size (default: the rotated image's "
                  "bounding box, with DALI's parity rule)."),
          ])
class Rotate(Operator):
    """Rotate HWC (or CHW) images by `angle` degrees counter-clockwise about their centre, DHWC
    (or CDHW) volumes about `axis`, and sequences of either frame by frame; the canvas grows to
    hold the whole rotated image unless `keep_size` or `size` is given."""

    def plan(self, inputs):
        plan_warp(self, inputs[0])
        return [BatchSpec("gpu" if self.spec.device == "gpu" else "cpu")], over_frames(self, self.run)

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        if not len(batch):
            return [batch]
        images = Spatial(self, batch)
        n, k = len(batch), images.ndim
        angles = np.broadcast_to(np.asarray(args.batch("angle"), np.float64), (n,))
        sizes = explicit_sizes(self, args, n, k)
        if k == 2:
            if sizes is None:
                sizes = images.extents if args["keep_size"] else rotated_canvas(images.extents, angles, ctx.frames)
            return run_warp(self, batch, images, rotation_matrices(images.extents, sizes, angles), sizes, args)
        if args.batch("axis") is None:
            raise self.error("argument 'axis' is required for volumes: the (x, y, z) axis to rotate about",
                             ValueError)
        axes = np.broadcast_to(np.asarray(args.batch("axis"), np.float64), (n, 3))
        if sizes is None:
            sizes = images.extents if args["keep_size"] else \
                rotated_volume_canvas(images.extents, axes, angles, ctx.frames)
            refuse_huge_outputs(self, sizes, ["angle", "axis"])
        return run_warp(self, batch, images, volume_rotation_matrices(images.extents, sizes, axes, angles), sizes,
                        args)
