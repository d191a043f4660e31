"""Displacement and remapping: `water` and `sphere` (DALI's displacement filters),
and `experimental.warp_perspective` (a homography; OpenCV's warpPerspective on DALI's CPU).
Each computes the source coordinates of every output
pixel for the whole batch and `sample`s them there in one gather per tap."""
import math

import numpy as np
import torch

from .. import types
from ..schema import BOOL, FLOAT, FLOATS, INT, INTERP_TYPE, STR, ArgType, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator
from .conversions import convert_saturate
from .images import image_shapes, over_frames, refuse_huge_outputs
from .warp import check_matrix_source

NN, LINEAR, CUBIC = (int(types.DALIInterpType.INTERP_NN), int(types.DALIInterpType.INTERP_LINEAR),
                     int(types.DALIInterpType.INTERP_CUBIC))
BORDER_MODES = ("constant", "replicate", "reflect", "reflect_101", "wrap")
_FAR = float(2 ** 30)  # coordinates beyond this (and NaN) are far outside any image


def _border_index(i, n, mode):
    """Indices `i` (int64) folded into [0, n) by border `mode` (OpenCV's rules); 'constant' leaves them."""
    if mode == "replicate":
        return i.clamp(0, n - 1)
    if mode == "wrap":
        return torch.remainder(i, n)
    if mode in ("reflect", "reflect_101"):
        if n == 1:
            return torch.zeros_like(i)
        period = 2 * n if mode == "reflect" else 2 * (n - 1)
        i = torch.remainder(i, period)
        return torch.where(i >= n, period - i - (1 if mode == "reflect" else 0), i)
    return i


def _fetch(flat, base, xi, yi, hw, border, fill):
    """Pixels [N, Ho, Wo, C] (float32) of the images held as `flat` [N * H * W, C] at integer (xi, yi)
    [N, Ho, Wo]; outside the images `fill` ([C] float32) for 'constant' borders, else the folded pixel."""
    h, w = hw
    xi, yi = _border_index(xi, w, border), _border_index(yi, h, border)
    inside = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)
    idx = base + yi.clamp(0, h - 1) * w + xi.clamp(0, w - 1)
    values = flat[idx].float()
    return torch.where(inside[..., None], values, fill) if border == "constant" else values


def _floor_index(v):
    """floor(v) as int64, NaN and huge values sent far outside."""
    v = torch.nan_to_num(v, nan=-_FAR).clamp(-_FAR, _FAR)
    return torch.floor(v).long()


def _cubic_weights(t):
    """OpenCV's cubic convolution weights (A = -0.75) of the 4 taps around fraction `t`, [..., 4]."""
    a = -0.75
    t1, t2 = t + 1, 1 - t
    return torch.stack([((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a, ((a + 2) * t - (a + 3)) * t * t + 1,
                        ((a + 2) * t2 - (a + 3)) * t2 * t2 + 1, ((a * (t2 + 1) - 5 * a) * (t2 + 1) + 8 * a) *
                        (t2 + 1) - 4 * a], dim=-1)


def sample(images, x, y, interp, border, fill):
    """`images` [N, H, W, C] sampled at (x, y) [N, Ho, Wo] (float64, pixel-centre units: pixel (i, j)'s centre
    is (j, i)): the nearest pixel (NN: floor(x + 0.5)), bilinear or bicubic (OpenCV's) interpolation over taps
    that lie outside the image taken from `border` (`fill`, [C] float32, for 'constant'). Float32 [N, Ho, Wo, C]."""
    n, h, w, c = images.shape
    flat = images.reshape(-1, c)
    base = (torch.arange(n, device=images.device) * (h * w)).view(n, 1, 1)
    fill = fill.to(images.device)
    if interp == NN:
        return _fetch(flat, base, _floor_index(x + 0.5), _floor_index(y + 0.5), (h, w), border, fill)
    x0, y0 = _floor_index(x), _floor_index(y)
    fx = (x - torch.floor(x)).float()[..., None]
    fy = (y - torch.floor(y)).float()[..., None]
    if interp == LINEAR:
        def row(dy):
            left = _fetch(flat, base, x0, y0 + dy, (h, w), border, fill)
            return left + (_fetch(flat, base, x0 + 1, y0 + dy, (h, w), border, fill) - left) * fx
        top = row(0)
        return top + (row(1) - top) * fy
    wx, wy = _cubic_weights(fx), _cubic_weights(fy)
    out = 0
    for dy in range(4):
        line = sum(_fetch(flat, base, x0 + dx - 1, y0 + dy - 1, (h, w), border, fill) * wx[..., dx]
                   for dx in range(4))
        out = out + line * wy[..., dy]
    return out


def dali_cast_fill(value, dtype):
    """A float fill value as DALI's static_cast to the image type gives it (x86: truncated to int32, then
    wrapped into a narrower integer type), as a float."""
    if dtype.is_floating_point:
        return float(np.float32(value))
    if not math.isfinite(value) or abs(value) >= 2 ** 31:
        return 0.0
    bits = torch.iinfo(dtype).bits
    v = int(value) % (1 << bits)
    return float(v - (1 << bits) if torch.iinfo(dtype).min < 0 and v >= 1 << (bits - 1) else v)


def _as_output(values, dtype, half_even=False):
    """Interpolated float32 values in the image type: rounded (half away from zero as DALI's ConvertSat, or half
    to even as OpenCV's saturate_cast) and saturated."""
    if dtype.is_floating_point:
        return values.to(dtype)
    if half_even:
        info = torch.iinfo(dtype)
        return torch.round(values).clamp(info.min, info.max).to(dtype)
    return convert_saturate(values, dtype)


def _hwc_images(op, batch, dtypes):
    """An HWC-only batch (DALI's displacement filters and remap): its samples, checked."""
    layout = batch.layout() or "HWC"
    if layout != "HWC":
        raise op.error(f"input layout '{layout}' is not supported; give HWC images", ValueError)
    image_shapes(op, batch, "HWC")
    dtype = types.to_torch_type(batch.dtype)
    if dtype not in dtypes:
        names = " or ".join(types.to_dali_type(d).name for d in dtypes)
        raise op.error(f"input type {types.to_dali_type(dtype).name} is not supported; give {names} images",
                       TypeError)
    return dtype


def _plan_hwc(op, spec, dtypes):
    if spec.layout and spec.layout != "HWC":
        raise op.error(f"input layout '{spec.layout}' is not supported; give HWC images", ValueError)
    if spec.ndim is not None and spec.ndim != 3:
        raise op.error(f"input samples have {spec.ndim} dims; expected HWC images", ValueError)
    if spec.dtype is not None and spec.dtype not in dtypes:
        names = " or ".join(types.to_dali_type(d).name for d in dtypes)
        raise op.error(f"input type {types.to_dali_type(spec.dtype).name} is not supported; give {names} images",
                       TypeError)


def _nn_or_linear(v):
    return None if int(v) in (NN, LINEAR) else "only INTERP_NN and INTERP_LINEAR are supported by this operator"


DISPLACEMENT_ARGS = [
    Arg("fill_value", FLOAT, 0.0, "Value of output pixels that map outside the input (cast to the image type "
        "as DALI's CPU operator does: truncated, and wrapped into uint8)."),
    Arg("interp_type", INTERP_TYPE, types.DALIInterpType.INTERP_NN, "INTERP_NN or INTERP_LINEAR.",
        check=_nn_or_linear),
    Arg("mask", INT, 1, "Per sample: 0 leaves the sample as it is, any other value applies the effect.",
        per_sample=True),
]
_DISPLACEMENT_DTYPES = (torch.uint8, torch.float32)


class DisplacementFilter(Operator):
    """DALI's displacement filters: each output pixel (x, y) samples the input at `source(x, y)` (corner units,
    pixel (i, j) covering [j, j + 1) x [i, i + 1)); NN takes the pixel under that point, LINEAR interpolates
    between pixel centres, with `fill_value` outside. The same map serves every sample of one size."""

    def source(self, grid_x, grid_y, h, w):
        """The source points (float32 [h, w] each) of the output pixels at the integer grid (grid_x, grid_y)."""
        raise NotImplementedError

    def plan(self, inputs):
        _plan_hwc(self, inputs[0], _DISPLACEMENT_DTYPES)
        return [BatchSpec(inputs[0].device, inputs[0].dtype, 3, "HWC")], self.run

    def _warped(self, images, dtype, fill):
        """Images [N, H, W, C] of one size, displaced."""
        _, h, w, _ = images.shape
        gy, gx = torch.meshgrid(torch.arange(h, dtype=torch.float32, device=images.device),
                                torch.arange(w, dtype=torch.float32, device=images.device), indexing="ij")
        sx, sy = self.source(gx, gy, h, w)
        n = len(images)
        x, y = ((s.double() - 0.5).expand(n, h, w) for s in (sx, sy))
        return _as_output(sample(images, x, y, int(self.spec.args["interp_type"]), "constant", fill), dtype)

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        if not len(batch):
            return [batch]
        dtype = _hwc_images(self, batch, _DISPLACEMENT_DTYPES)
        fill = torch.tensor([dali_cast_fill(self.spec.args["fill_value"], dtype)], dtype=torch.float32)
        mask = np.broadcast_to(np.asarray(args.batch("mask")) != 0, (len(batch),))
        dense = batch.dense_tensor()
        if dense is not None and dense.numel():
            keep = torch.from_numpy(~mask).to(dense.device).view(-1, 1, 1, 1)
            return [TensorList.make(torch.where(keep, dense, self._warped(dense, dtype, fill)), "HWC",
                                    device=batch.device)]
        out = [self._warped(s[None], dtype, fill)[0] if m and s.numel() else s
               for s, m in zip(batch.as_torch_list(), mask)]
        return [TensorList.make(out, "HWC", device=batch.device)]


@register("water", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("Water",), args=[
    Arg("ampl_x", FLOAT, 10.0, "Amplitude of the wave in the x direction."),
    Arg("ampl_y", FLOAT, 10.0, "Amplitude of the wave in the y direction."),
    Arg("freq_x", FLOAT, 2 * math.pi / 128, "Frequency of the wave in the x direction (default 2 pi / 128)."),
    Arg("freq_y", FLOAT, 2 * math.pi / 128, "Frequency of the wave in the y direction (default 2 pi / 128)."),
    Arg("phase_x", FLOAT, 0.0, "Phase of the wave in the x direction."),
    Arg("phase_y", FLOAT, 0.0, "Phase of the wave in the y direction."),
] + DISPLACEMENT_ARGS)
class Water(DisplacementFilter):
    """Make HWC images look underwater: output (x, y) samples the input at
    (x + ampl_x sin(freq_x y + phase_x), y + ampl_y cos(freq_y x + phase_y))."""

    def source(self, grid_x, grid_y, h, w):
        a = self.spec.args
        f32 = lambda name: torch.tensor(a[name], dtype=torch.float32)  # noqa: E731
        # sin and cos in double, rounded to float: glibc's correctly rounded sinf and cosf, as DALI's CPU has
        return (grid_x + f32("ampl_x") * torch.sin((f32("freq_x") * grid_y + f32("phase_x")).double()).float(),
                grid_y + f32("ampl_y") * torch.cos((f32("freq_y") * grid_x + f32("phase_y")).double()).float())


@register("sphere", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("Sphere",), args=DISPLACEMENT_ARGS)
class Sphere(DisplacementFilter):
    """Bulge HWC images as if seen on a sphere: a pixel at distance r from the centre samples the input at
    distance r^2 / d along the same ray, d being half the larger of the (integer) half extents."""

    def source(self, grid_x, grid_y, h, w):
        cx, cy = torch.tensor(w * 0.5, dtype=torch.float32), torch.tensor(h * 0.5, dtype=torch.float32)
        tx, ty = grid_x + 0.5 - cx, grid_y + 0.5 - cy
        rad = torch.sqrt(tx * tx + ty * ty) / float(max(w // 2, h // 2))
        return cx + rad * tx, cy + rad * ty


def _matrix_check(v):
    if len(v) != 9:
        return f"must have 9 values (a 3x3 matrix), got {len(v)}"
    return None


def _wp_interp_check(v):
    return None if int(v) in (NN, LINEAR, CUBIC) else "only INTERP_NN, INTERP_LINEAR and INTERP_CUBIC are supported"


def _flat_floats(v):
    """A matrix given as a list, nested lists or an array, as a flat float list."""
    return FLOATS.convert(np.asarray(v, dtype=np.float64).ravel().tolist())


_WP_DTYPES = (torch.uint8, torch.int16, torch.uint16, torch.float32)
_WP_LAYOUTS = ("HW", "HWC", "CHW", "FHWC", "FCHW")


def _corner_to_centre(m):
    """Output-to-input matrices [N, 3, 3] for corner coordinates made to map pixel centres (OpenCV's units)."""
    shift = np.array([[1, 0, 0.5], [0, 1, 0.5], [0, 0, 1]])
    back = np.array([[1, 0, -0.5], [0, 1, -0.5], [0, 0, 1]])
    return back @ m @ shift


def _inverted(m):
    """Inverses of [N, 3, 3] matrices (float64); a singular one becomes zeros, as OpenCV's invert gives it."""
    singular = np.abs(np.linalg.det(m)) < 1e-300
    safe = np.where(singular[:, None, None], np.eye(3), m)
    return np.where(singular[:, None, None], 0.0, np.linalg.inv(safe))


@register("experimental.warp_perspective", devices=("cpu", "gpu"), inputs=(1, 2), input_names=("input", "matrix_input"),
          aliases=("experimental.WarpPerspective",), args=[
              Arg("matrix", ArgType("list of float", _flat_floats), None, "The 3x3 perspective matrix, row by row, "
                  "of output to input coordinates (input to output with inverse_map=False); or the second input.",
                  per_sample=True, per_frame=True, check=_matrix_check),
              Arg("size", FLOATS, None, "Output size (height, width), rounded; one value: a square; default: the "
                  "input's.", per_sample=True),
              Arg("inverse_map", BOOL, True, "True: `matrix` maps output to input coordinates; False: input to "
                  "output (it is inverted)."),
              Arg("border_mode", STR, "constant", "How taps outside the input are read: 'constant' (fill_value), "
                  "'replicate', 'reflect', 'reflect_101' or 'wrap' (OpenCV's borders).", choices=BORDER_MODES),
              Arg("fill_value", FLOATS, None, "The value (one, or one per channel) of 'constant' borders; 0 by "
                  "default."),
              Arg("interp_type", INTERP_TYPE, types.DALIInterpType.INTERP_LINEAR,
                  "INTERP_NN, INTERP_LINEAR or INTERP_CUBIC.", check=_wp_interp_check),
              Arg("pixel_origin", STR, "corner", "'corner': (0, 0) is the first pixel's top-left corner; 'center': "
                  "its centre (as OpenCV).", choices=("corner", "center")),
          ])
class WarpPerspective(Operator):
    """Apply a perspective transform (homography) to HW, HWC or CHW images and to FHWC / FCHW sequences frame by
    frame, as OpenCV's warpPerspective, which serves DALI's CPU operator: output (x, y) samples the input at
    ((M11 x + M12 y + M13) / w, (M21 x + M22 y + M23) / w), w = M31 x + M32 y + M33."""

    def __init__(self, spec):
        super().__init__(spec)
        check_matrix_source(spec)

    def plan(self, inputs):
        spec = inputs[0]
        if spec.layout and spec.layout not in _WP_LAYOUTS:
            raise self.error(f"input layout '{spec.layout}' is not supported; give HW, HWC, CHW, FHWC or FCHW "
                             "images", ValueError)
        if spec.dtype is not None and spec.dtype not in _WP_DTYPES:
            raise self.error(f"input type {types.to_dali_type(spec.dtype).name} is not supported; give UINT8, "
                             "INT16, UINT16 or FLOAT images", TypeError)
        layout = spec.layout or ("HWC" if spec.ndim in (None, 3) else "HW")
        return [BatchSpec(spec.device, spec.dtype, spec.ndim, layout)], over_frames(self, self.run)

    def _matrices(self, inputs, args, n):
        """Output-to-input matrices [N, 3, 3] (float64 of the float32 values)."""
        if len(inputs) > 1:
            batch = inputs[1]
            samples = batch.as_torch_list()
            for i, s in enumerate(samples):
                if s.dtype != torch.float32 or tuple(s.shape) != (3, 3):
                    raise self.error(f"input 1 (matrix_input) of sample {i} must be a 3x3 float32 matrix, got "
                                     f"{tuple(s.shape)} {s.dtype}", TypeError, sample=i)
            m = torch.stack(samples).detach().cpu().double().numpy() if samples else np.zeros((0, 3, 3))
        else:
            m = np.broadcast_to(np.asarray(args.batch("matrix"), np.float32).astype(np.float64), (n, 9))
            m = m.reshape(n, 3, 3)
        return m if args["inverse_map"] else _inverted(m)

    def _sizes(self, args, hw):
        """Output (height, width) [N, 2]: `size` rounded (at least 1), or the input's."""
        size = args.batch("size")
        if size is None or (not args.is_per_sample("size") and len(size) == 0):
            return hw
        size = np.asarray(size, np.float64)
        size = size.reshape(len(size), -1) if args.is_per_sample("size") else size.reshape(1, -1)
        if size.shape[1] not in (1, 2) or not np.isfinite(size).all():
            raise self.error(f"argument 'size' must be 1 or 2 finite values (height, width), got {size[0].tolist()}",
                             ValueError)
        out = np.maximum(np.floor(np.broadcast_to(size, (len(hw), 2)) + 0.5), 1).astype(np.int64)
        refuse_huge_outputs(self, out, ["size"])
        return out

    def _fill(self, channels, dtype):
        """The fill value [C] float32, in the image type as OpenCV's saturate_cast gives it."""
        fill = self.spec.args["fill_value"] or [0.0]
        if len(fill) not in (1, channels):
            raise self.error(f"argument 'fill_value' must have 1 value or one per channel ({channels}), got "
                             f"{len(fill)}", ValueError)
        fill = torch.tensor(fill, dtype=torch.float64).expand(channels)
        return _as_output(fill, dtype, half_even=True).float()

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        if not len(batch):
            return [batch]
        layout = batch.layout() or ("HWC" if batch.sample(0).dim() == 3 else "HW")
        if layout not in ("HW", "HWC", "CHW"):
            raise self.error(f"input layout '{layout}' is not supported; give HW, HWC, CHW, FHWC or FCHW images",
                             ValueError)
        shapes = image_shapes(self, batch, layout)
        dtype = types.to_torch_type(batch.dtype)
        if dtype not in _WP_DTYPES:
            raise self.error(f"input type {types.to_dali_type(dtype).name} is not supported; give UINT8, INT16, "
                             "UINT16 or FLOAT images", TypeError)
        hwc = [s.permute(1, 2, 0) if layout == "CHW" else s if layout == "HWC" else s[..., None]
               for s in batch.as_torch_list()]
        hw = np.array([s.shape[:2] for s in hwc], np.int64).reshape(-1, 2)
        channels = hwc[0].shape[2]
        if layout == "HWC" and channels > 4:
            raise self.error(f"images with more than 4 channels are not supported; sample 0 has {channels}",
                             ValueError)
        empty = shapes.prod(axis=1) == 0
        if empty.any():
            i = int(np.argmax(empty))
            raise self.error(f"sample {i} is empty {tuple(shapes[i].tolist())}; give images with pixels", ValueError,
                             sample=i)
        m = self._matrices(inputs, args, len(batch))
        if self.spec.args["pixel_origin"] == "corner":
            m = _corner_to_centre(m)
        sizes = self._sizes(args, hw)
        fill = self._fill(channels, dtype)
        out = self._warp(hwc, torch.from_numpy(m.astype(np.float32)), sizes, fill, dtype)
        if layout != "HWC":
            out = [o.permute(2, 0, 1) if layout == "CHW" else o[..., 0] for o in out]
            out = [o.contiguous() for o in out]
        return [TensorList.make(out, layout, device=batch.device)]

    def _warp(self, images, m, sizes, fill, dtype):
        """HWC images warped by the centre-unit matrices `m` [N, 3, 3] (float32) to `sizes`; a list."""
        same = all(im.shape == images[0].shape for im in images) and bool((sizes == sizes[0]).all())
        groups = [list(range(len(images)))] if same else [[i] for i in range(len(images))]
        out = [None] * len(images)
        for rows in groups:
            h, w = (int(v) for v in sizes[rows[0]])
            device = images[0].device
            stack = torch.stack([images[i] for i in rows]) if len(rows) > 1 else images[rows[0]][None]
            gy, gx = torch.meshgrid(torch.arange(h, dtype=torch.float32, device=device),
                                    torch.arange(w, dtype=torch.float32, device=device), indexing="ij")
            mm = m[rows].to(device).view(-1, 3, 3, 1, 1)
            x, y, z = (mm[:, r, 0] * gx + mm[:, r, 1] * gy + mm[:, r, 2] for r in range(3))
            values = sample(stack, (x / z).double(), (y / z).double(), int(self.spec.args["interp_type"]),
                            self.spec.args["border_mode"], fill)
            for k, i in enumerate(rows):
                out[i] = _as_output(values[k], dtype, half_even=True)
        return out


_REMAP_DTYPES = (torch.uint8, torch.int16, torch.uint16, torch.float32)


@register("experimental.remap", devices=("cpu", "gpu"), inputs=(3, 3), input_names=("input", "mapx", "mapy"),
          aliases=("experimental.Remap",), args=[
              Arg("interp", INTERP_TYPE, types.DALIInterpType.INTERP_LINEAR, "INTERP_NN or INTERP_LINEAR.",
                  check=_nn_or_linear),
              Arg("pixel_origin", STR, "corner", "'corner': map value 0 is the first pixel's left (top) edge; "
                  "'center': its centre (as OpenCV's remap).", choices=("corner", "center")),
          ])
class Remap(Operator):
    """Move pixels by explicit maps: output(x, y) = input(mapx(x, y), mapy(x, y)) for HWC images (1 or 3
    channels) and FHWC sequences, with a constant 0 border. DALI has it on the GPU only; ours runs on both."""

    def plan(self, inputs):
        spec = inputs[0]
        if spec.layout and spec.layout not in ("HWC", "FHWC"):
            raise self.error(f"input layout '{spec.layout}' is not supported; give HWC images or FHWC sequences",
                             ValueError)
        if spec.dtype is not None and spec.dtype not in _REMAP_DTYPES:
            raise self.error(f"input type {types.to_dali_type(spec.dtype).name} is not supported; give UINT8, "
                             "INT16, UINT16 or FLOAT images", TypeError)
        for k, name in ((1, "mapx"), (2, "mapy")):
            if inputs[k].dtype is not None and inputs[k].dtype != torch.float32:
                raise self.error(f"input {k} ({name}) must be FLOAT, got "
                                 f"{types.to_dali_type(inputs[k].dtype).name}", TypeError)
        layout = spec.layout or "HWC"
        return [BatchSpec(spec.device, spec.dtype, spec.ndim, layout)], over_frames(self, self.run)

    def _maps(self, batch, k, hw):
        """Input `k` (a map) as float32 tensors [H, W], one per sample, checked against the images' sizes."""
        name = ("mapx", "mapy")[k - 1]
        maps = []
        for i, (m, size) in enumerate(zip(batch.as_torch_list(), hw)):
            if m.dtype != torch.float32:
                raise self.error(f"input {k} ({name}) must be FLOAT, got {types.to_dali_type(m.dtype).name}",
                                 TypeError, sample=i)
            if m.dim() == 3 and m.shape[2] == 1:
                m = m[..., 0]
            if m.dim() != 2 or tuple(m.shape) != tuple(size):
                raise self.error(f"input {k} ({name}) of sample {i} has shape {tuple(m.shape)}; it must be the "
                                 f"image's height and width {tuple(size)} (HW, or HWC of 1 channel)", ValueError,
                                 sample=i)
            maps.append(m)
        return maps

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        if not len(batch):
            return [batch]
        shapes = image_shapes(self, batch, "HWC")
        dtype = types.to_torch_type(batch.dtype)
        if dtype not in _REMAP_DTYPES:
            raise self.error(f"input type {types.to_dali_type(dtype).name} is not supported; give UINT8, INT16, "
                             "UINT16 or FLOAT images", TypeError)
        bad = np.flatnonzero(~np.isin(shapes[:, 2], (1, 3)))
        if len(bad):
            i = int(bad[0])
            raise self.error(f"sample {i} has {shapes[i, 2]} channels; only 1 and 3 channel images are supported",
                             ValueError, sample=i)
        mapx, mapy = (self._maps(inputs[k], k, shapes[:, :2]) for k in (1, 2))
        dense = batch.dense_tensor()
        if dense is not None:
            return [TensorList.make(self._remapped(dense, torch.stack(mapx), torch.stack(mapy), dtype), "HWC",
                                    device=batch.device)]
        out = [self._remapped(s[None], mx[None], my[None], dtype)[0]
               for s, mx, my in zip(batch.as_torch_list(), mapx, mapy)]
        return [TensorList.make(out, "HWC", device=batch.device)]

    def _remapped(self, images, mapx, mapy, dtype):
        """Images [N, H, W, C] of one size sampled at the maps [N, H, W]."""
        if not images.numel():
            return images
        shift = 0.5 if self.spec.args["pixel_origin"] == "corner" else 0.0
        x, y = (m.to(images.device).double() - shift for m in (mapx, mapy))
        fill = torch.zeros(images.shape[-1], dtype=torch.float32)
        return _as_output(sample(images, x, y, int(self.spec.args["interp"]), "constant", fill), dtype)
