"""Colour models and tone maps: color_space_conversion (RGB, BGR, GRAY, YCbCr as DALI's CPU
converts them), lookup_table, equalize (OpenCV's histogram equalization per channel), debayer
(OpenCV's bilinear, edge-aware, VNG and gray demosaicing), jpeg_compression_distortion (a JPEG round
trip) and clahe (OpenCV's CLAHE, with its 8-bit CIE Lab for RGB)."""
import math

import numpy as np
import torch
import torchvision.io

from .. import types
from ..schema import BOOL, DTYPE, FLOAT, FLOATS, IMAGE_TYPE, INT, INTS, REQUIRED, STR, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator, sample_shapes
from .conversions import convert_saturate
from .sequences import frame_by_frame

_CHANNELS = {types.RGB: 3, types.BGR: 3, types.GRAY: 1, types.YCbCr: 3}
_F32 = torch.float32


def _dot(x, coeffs, offset):
    """sum(coeffs[k] * x[:, k]) + offset in float32, summed left to right as DALI's C++ does."""
    acc = None
    for k, c in enumerate(coeffs):
        term = x[:, k] * torch.tensor(c, dtype=_F32)
        acc = term if acc is None else acc + term
    return acc + torch.tensor(offset, dtype=_F32)


def _round_u8(x):
    """float32 to uint8 as DALI's ConvertSat: clamped to 0..255, rounded half away from zero (exactly:
    the fraction x - trunc(x) of a float32 is exact)."""
    x = x.clamp(0, 255)
    whole = x.trunc()
    return (whole + (x - whole >= 0.5)).to(torch.uint8)


def _rgb_to_gray(rgb):
    """Full-range luma (the JPEG formula), rounded."""
    return _round_u8(_dot(rgb.to(_F32), (0.299, 0.587, 0.114), 0.0))[:, None]


# ITU-R BT.601 with luma in 16..235, chroma in 16..240 (the exact 219/255 and 224/255 scalings)
_Y = (65.481 / 255, 128.553 / 255, 24.966 / 255)
_CB = (-37.797 / 255, -74.203 / 255, 112.0 / 255)
_CR = (112.0 / 255, -93.786 / 255, -18.214 / 255)


def _rgb_to_ycbcr(rgb):
    """ITU-R BT.601 YCbCr, rounded; grey pixels get Cb = Cr = 128 exactly."""
    x = rgb.to(_F32)
    grey = (rgb[:, 0] == rgb[:, 1]) & (rgb[:, 1] == rgb[:, 2])
    half = torch.tensor(128.0, dtype=_F32)
    cb = torch.where(grey, half, _dot(x, _CB, 128.0))
    cr = torch.where(grey, half, _dot(x, _CR, 128.0))
    return _round_u8(torch.stack([_dot(x, _Y, 16.0), cb, cr], 1))


def _ycbcr_to_rgb(ycc):
    """ITU-R BT.601 YCbCr to full-range RGB, rounded and saturated."""
    x = ycc.to(_F32)
    ny = torch.tensor(255 / 219, dtype=_F32) * (x[:, 0] - 16.0)
    nb, nr = x[:, 1] - 128.0, x[:, 2] - 128.0
    r = ny + torch.tensor(1.402 * 255 / 224, dtype=_F32) * nr
    g = ny - torch.tensor(0.714136 * 255 / 224, dtype=_F32) * nr - torch.tensor(0.344136 * 255 / 224, dtype=_F32) * nb
    b = ny + torch.tensor(1.772 * 255 / 224, dtype=_F32) * nb
    return _round_u8(torch.stack([r, g, b], 1))


def _gray_to_ycbcr(gray):
    y = _round_u8(gray.to(_F32) * torch.tensor(219 / 255, dtype=_F32) + 16.0)
    return torch.cat([y, torch.full_like(y, 128), torch.full_like(y, 128)], 1)


def _ycbcr_to_gray(ycc):
    return _round_u8(torch.tensor(255 / 219, dtype=_F32) * (ycc[:, :1].to(_F32) - 16.0))


def _flip(x):
    return x.flip(1)


_CONVERSIONS = {
    (types.RGB, types.BGR): _flip,
    (types.BGR, types.RGB): _flip,
    (types.RGB, types.GRAY): _rgb_to_gray,
    (types.BGR, types.GRAY): lambda x: _rgb_to_gray(x.flip(1)),
    (types.GRAY, types.RGB): lambda x: x.expand(-1, 3),
    (types.GRAY, types.BGR): lambda x: x.expand(-1, 3),
    (types.RGB, types.YCbCr): _rgb_to_ycbcr,
    (types.BGR, types.YCbCr): lambda x: _rgb_to_ycbcr(x.flip(1)),
    (types.YCbCr, types.RGB): _ycbcr_to_rgb,
    (types.YCbCr, types.BGR): lambda x: _ycbcr_to_rgb(x).flip(1),
    (types.GRAY, types.YCbCr): _gray_to_ycbcr,
    (types.YCbCr, types.GRAY): _ycbcr_to_gray,
}


def _check_uint8(op, spec_or_dtype):
    dtype = getattr(spec_or_dtype, "dtype", spec_or_dtype)
    if dtype is not None and dtype != torch.uint8:
        raise op.error(f"input type {types.to_dali_type(dtype)} is not supported; give uint8 images", TypeError)


def _uint8_images(op, spec, layouts):
    """The planned output of an operator that maps uint8 images of `layouts` to uint8 images
    like them: the input's layout and type checked."""
    _check_layout(op, spec.layout, layouts)
    _check_uint8(op, spec)
    return BatchSpec(spec.device, torch.uint8, spec.ndim, spec.layout)


def _uint8_shapes(op, batch):
    """The samples' shapes ([N, ndim]) of a batch of uint8 images, its type checked here where
    the plan could not know it; None for an empty batch (which the operators give back)."""
    if not len(batch):
        return None
    _check_uint8(op, types.to_torch_type(batch.dtype))
    return sample_shapes(op, batch)


def _check_layout(op, layout, accepted):
    if layout is not None and layout not in accepted:
        names = ", ".join(a for a in accepted if a)
        raise op.error(f"input layout '{layout}' is not supported; give {names}", ValueError)


@register("color_space_conversion", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("image_type", IMAGE_TYPE, REQUIRED, "Colour space of the input: RGB, BGR, GRAY or YCbCr."),
    Arg("output_type", IMAGE_TYPE, REQUIRED, "Colour space of the output: RGB, BGR, GRAY or YCbCr.")])
class ColorSpaceConversion(Operator):
    """Converts uint8 channel-last images between RGB, BGR, GRAY (full range) and YCbCr
    (ITU-R BT.601, luma in 16..235), with DALI's CPU formulas and rounding."""

    def plan(self, inputs):
        src, dst = self.spec.args["image_type"], self.spec.args["output_type"]
        self.convert = _CONVERSIONS.get((src, dst))
        if self.convert is None:
            raise self.error(f"conversion from {src.name} to {dst.name} is not supported; the colour spaces are "
                             "RGB, BGR, GRAY and YCbCr, and image_type must differ from output_type", ValueError)
        self.in_channels, self.out_channels = _CHANNELS[src], _CHANNELS[dst]
        return [_uint8_images(self, inputs[0], ("", "HWC", "FHWC", "DHWC", "FDHWC"))], self.step

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        shapes = _uint8_shapes(self, batch)
        if shapes is None:
            return [batch]
        bad = np.flatnonzero(shapes[:, -1] != self.in_channels) if shapes.shape[1] else [0]
        if len(bad):
            i = int(bad[0])
            raise self.error(f"sample {i} has shape {tuple(shapes[i].tolist())}; {self.spec.args['image_type'].name} "
                             f"images have {self.in_channels} channels (the last dim)", ValueError, sample=i)
        flat, _ = batch.flat()
        out = self.convert(flat.view(-1, self.in_channels)).contiguous().view(-1)
        out_shapes = shapes.copy()
        out_shapes[:, -1] = self.out_channels
        return [TensorList.from_flat(out, out_shapes, batch.layout(), device=batch.device)]


_INTEGER_INPUTS = (torch.uint8, torch.int8, torch.uint16, torch.int16, torch.uint32, torch.int32,
                   torch.uint64, torch.int64)
_MAX_KEY = 65535


def _keys_check(keys):
    bad = [k for k in keys if not 0 <= k <= _MAX_KEY]
    return f"keys must lie in [0, {_MAX_KEY}]; got {bad[0]}" if bad else None


@register("lookup_table", devices=("cpu", "gpu"), inputs=(1, 1), deprecated_args={"output_dtype": "dtype"}, args=[
    Arg("keys", INTS, [], "Input values (0..65535) mapped to `values`; the last occurrence of a key counts.",
        check=_keys_check),
    Arg("values", FLOATS, [], "The output value of each key."),
    Arg("default_value", FLOAT, 0.0, "Output for inputs that are not keys."),
    Arg("dtype", DTYPE, types.FLOAT, "Output type; values are rounded and saturated to it.")])
class LookupTable(Operator):
    """Maps integer inputs through a table: out = values[keys.index(in)] where `in` is a
    key, `default_value` elsewhere (negative and too large inputs included)."""

    def plan(self, inputs):
        keys, values = self.spec.args["keys"], self.spec.args["values"]
        if len(keys) != len(values):
            raise self.error(f"keys ({len(keys)}) and values ({len(values)}) must have the same length", ValueError)
        self.dtype = types.to_torch_type(self.spec.args["dtype"])
        default = np.float32(self.spec.args["default_value"])
        table = np.full(max(keys, default=-1) + 1, default, np.float32)
        for k, v in zip(keys, values):  # the last occurrence of a key wins
            table[k] = v
        self.table = convert_saturate(torch.from_numpy(table), self.dtype)
        self.default = convert_saturate(torch.tensor([default]), self.dtype)
        spec = inputs[0]
        if spec.dtype is not None and spec.dtype not in _INTEGER_INPUTS:
            raise self._type_error(spec.dtype)
        self.device_tables = {}
        return [BatchSpec(spec.device, self.dtype, spec.ndim, spec.layout)], self.step

    def _type_error(self, dtype):
        return self.error(f"input type {types.to_dali_type(dtype)} is not supported; give integers", TypeError)

    def _tables(self, device):
        if device not in self.device_tables:
            self.device_tables[device] = (self.table.to(device), self.default.to(device))
        return self.device_tables[device]

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        if not len(batch):
            return [TensorList.make([], batch.layout(), device=batch.device)]
        flat, shapes = batch.flat()
        if flat.dtype not in _INTEGER_INPUTS:
            raise self._type_error(flat.dtype)
        table, default = self._tables(flat.device)
        index = flat.to(torch.int64)  # uint64 beyond int64 turns negative: not a key
        hit = (index >= 0) & (index < len(table))
        looked_up = table[index.clamp(0, max(len(table) - 1, 0))] if len(table) else default.expand(len(index))
        out = torch.where(hit, looked_up, default)
        return [TensorList.from_flat(out, shapes, batch.layout(), device=batch.device)]


def equalized(images):
    """OpenCV's equalizeHist for each channel of each image: `images` [G, P, C] uint8 (G images
    of P pixels). The first occupied level maps to 0, the others to round(255 * cumulative count
    past it / pixels past it); an image of one level stays as it is."""
    g, p, c = images.shape
    codes = images.permute(0, 2, 1).reshape(g * c, p).to(torch.int64)
    hist = torch.zeros(g * c, 256, dtype=torch.int64, device=images.device)
    hist.scatter_add_(1, codes, torch.ones_like(codes))
    first = (hist > 0).to(torch.int8).argmax(1, keepdim=True)
    cumulative = hist.cumsum(1) - hist.gather(1, first)
    scale = torch.tensor(255.0, dtype=_F32) / (p - hist.gather(1, first)).to(_F32)
    lut = torch.round(cumulative.to(_F32) * scale).clamp(0, 255)
    flat_level = hist.gather(1, first) == p
    lut = torch.where(flat_level, torch.arange(256, device=images.device, dtype=_F32), lut).to(torch.uint8)
    out = lut.gather(1, codes)
    return out.view(g, c, p).permute(0, 2, 1)


def _equalize_images(images, planar):
    """equalized() over a batch [N, ...] of same-shaped 2D or 3D images, in their own layout."""
    n = len(images)
    if images.numel() == 0:
        return images
    if images.dim() == 3:
        return equalized(images.reshape(n, -1, 1)).reshape(images.shape)
    if planar:
        return equalized(images.flatten(2).transpose(1, 2)).transpose(1, 2).reshape(images.shape)
    return equalized(images.reshape(n, -1, images.shape[-1])).reshape(images.shape)


@register("equalize", devices=("cpu", "gpu"), inputs=(1, 1), deprecated_names=("experimental.equalize",))
class Equalize(Operator):
    """Histogram equalization of uint8 images, each channel on its own, as OpenCV's
    equalizeHist does it."""

    def plan(self, inputs):
        layouts = ("", "HW", "HWC", "CHW", "FHW", "FHWC", "FCHW")
        return [_uint8_images(self, inputs[0], layouts)], frame_by_frame(self, self.step)

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        shapes = _uint8_shapes(self, batch)
        if shapes is None:
            return [batch]
        if shapes.shape[1] not in (2, 3):
            raise self.error(f"the samples have {shapes.shape[1]} dims; give 2D (HW) or 3D (HWC, CHW) images",
                             ValueError)
        planar = batch.layout() == "CHW"
        dense = batch.dense_tensor()
        if dense is not None:
            return [TensorList.make(_equalize_images(dense, planar), batch.layout(), device=batch.device)]
        samples = [_equalize_images(s[None], planar)[0] for s in batch.as_torch_list()]
        return [TensorList.make(samples, batch.layout(), device=batch.device)]


def _blue_position_check(v):
    if len(v) != 2 or any(p not in (0, 1) for p in v):
        return "give (y, x) of the blue sensor in the 2x2 Bayer tile, each 0 or 1"
    return None


def _bayer_sites(blue, h, w, device):
    """Where the sensors of [N, H, W] Bayer images are, for `blue` [N, 2] (the blue sensor's (y, x) in
    the tile starting at row 1, column 1): (green [N, H, W], blue_row [N, H, 1]); a row's other
    sensors are all blue or all red."""
    b = torch.as_tensor(np.asarray(blue), device=device).reshape(-1, 2, 1, 1)
    rows = torch.arange(h, device=device).reshape(1, -1, 1) % 2
    cols = torch.arange(w, device=device).reshape(1, 1, -1) % 2
    blue_row, blue_col = rows == (1 + b[:, 0]) % 2, cols == (1 + b[:, 1]) % 2
    return blue_row != blue_col, blue_row


def _edges_repeated(inner):
    """[N, h, w, C] grown by a row and a column on each side, copies of their neighbours."""
    h, w = inner.shape[1:3]
    rows = (torch.arange(h + 2, device=inner.device) - 1).clamp(0, h - 1)
    cols = (torch.arange(w + 2, device=inner.device) - 1).clamp(0, w - 1)
    return inner[:, rows][:, :, cols]


class _Window:
    """The pixels of [N, H, W] images (`x`, or `t` given to the call) at an offset (dy, dx) from
    those of their inner region, `margin` pixels from each edge."""

    def __init__(self, x, margin):
        self.x, self.margin = x, margin

    def __call__(self, dy, dx, t=None):
        t, m = self.x if t is None else t, self.margin
        h, w = t.shape[1:3]
        return t[:, m + dy:h - m + dy, m + dx:w - m + dx]


def demosaiced(raw, blue, edge_aware=False):
    """OpenCV's bilinear (or edge-aware) demosaicing of [N, H, W] Bayer images (H, W even) into RGB
    [N, H, W, 3]: a pixel keeps its own colour, the others are the rounded mean of the nearest
    2 or 4 sensors of that colour; edge-aware, green at a red or blue sensor is the mean of the
    2 along the smaller difference (horizontal on ties). The border rows and columns repeat their
    inner neighbours. `blue` [N, 2]: the blue sensor's (y, x) in the tile at row 1, column 1."""
    n, h, w = raw.shape
    if h < 3 or w < 3:
        return raw.new_zeros(n, h, w, 3)  # OpenCV leaves an image without inner pixels black
    at = _Window(raw.to(torch.int32), 1)
    green, blue_row = _bayer_sites(blue, h, w, raw.device)
    green, blue_row = at(0, 0, green), blue_row[:, 1:-1]
    c, up, down, left, right = at(0, 0), at(-1, 0), at(1, 0), at(0, -1), at(0, 1)
    diag = (at(-1, -1) + at(-1, 1) + at(1, -1) + at(1, 1) + 2) >> 2
    horiz, vert = (left + right + 1) >> 1, (up + down + 1) >> 1
    if edge_aware:
        guess = torch.where((left - right).abs() > (down - up).abs(), vert, horiz)
    else:
        guess = (up + down + left + right + 2) >> 2
    row_colour, other = torch.where(green, horiz, c), torch.where(green, vert, diag)
    r, b = torch.where(blue_row, other, row_colour), torch.where(blue_row, row_colour, other)
    g = torch.where(green, c, guess)
    return _edges_repeated(torch.stack([r, g, b], -1)).to(raw.dtype)  # (CUDA indexes no uint16)


_R2Y, _G2Y, _B2Y = 4899, 9617, 1868  # OpenCV's luma weights, in 1/16384


def bayer_gray(raw, blue):
    """OpenCV's Bayer -> gray of [N, H, W] images into [N, H, W, 1]: the luma of each pixel's bilinear
    colours, in 14-bit fixed point, rounded; borders as demosaiced."""
    n, h, w = raw.shape
    if h < 3 or w < 3:
        return raw.new_zeros(n, h, w, 1)
    at = _Window(raw.to(torch.int64), 1)
    green, blue_row = _bayer_sites(blue, h, w, raw.device)
    green, blue_row = at(0, 0, green), blue_row[:, 1:-1]
    row_w = torch.where(blue_row, _B2Y, _R2Y)  # the weight of the colour of the row's other sensors
    col_w = _B2Y + _R2Y - row_w
    c, vert, horiz = at(0, 0), at(-1, 0) + at(1, 0), at(0, -1) + at(0, 1)
    corners = at(-1, -1) + at(-1, 1) + at(1, -1) + at(1, 1)
    gray = torch.where(green, (vert * col_w + horiz * row_w + c * (2 * _G2Y) + (1 << 14)) >> 15,
                       (corners * col_w + (vert + horiz) * _G2Y + c * (4 * row_w) + (1 << 15)) >> 16)
    return _edges_repeated(gray[..., None]).to(raw.dtype)


# OpenCV's VNG divides by 2 * (directions used) with these float32 factors in its plain C++ code, by
# 0.5f / n in its SSE code (which differs for 7 directions, and rounds some halves the other way)
_VNG_SCALES = torch.tensor([0, 0.5, 0.25, 0.1666666666667, 0.125, 0.1, 0.08333333333, 0.0714286, 0.0625],
                           dtype=torch.float32)
_AXES = ((-1, 0), (1, 0), (0, -1), (0, 1))
_NEIGHBOURS = ((-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1))
_DIAGONALS = ((-1, 1), (1, -1), (-1, -1), (1, 1))


def vng_demosaiced(raw, blue):
    """OpenCV's Variable Number of Gradients demosaicing of uint8 [N, H, W] Bayer images into RGB
    [N, H, W, 3], over the image extended by 2 pixels mirrored about its edges (reflect-101): each
    pixel's 8 directional gradients pick the directions under (min + max / 2) of the smallest; the
    missing colours are its own plus the mean colour differences along them. Images under 8 pixels
    a side are demosaiced bilinearly (as OpenCV does)."""
    h, w = raw.shape[1:]
    if min(h, w) < 8:
        return demosaiced(raw, blue)
    rows = _reflect101(torch.arange(-2, h + 2, device=raw.device), h)
    cols = _reflect101(torch.arange(-2, w + 2, device=raw.device), w)
    at = _Window(raw.to(torch.int16)[:, rows][:, :, cols], 2)  # all sums fit in int16
    green, blue_row = _bayer_sites(blue, h, w, raw.device)
    used = _vng_directions(at, green)
    own, mid, third = _vng_sums(at, green, used)
    count = sum(u.to(torch.int64) for u in used)
    simd_scale = torch.tensor(0.5, dtype=torch.float32, device=raw.device) / count.to(torch.float32)
    scale = torch.where(_vng_simd_columns(green, w + 4), simd_scale, _VNG_SCALES.to(raw.device)[count])
    c, base = at(0, 0), torch.where(green, mid, own)

    def step(total):
        return (c + torch.round((total - base).to(torch.float32) * scale).to(torch.int32)).clamp(0, 255)
    row_colour, g, other = torch.where(green, step(own), c), torch.where(green, c, step(mid)), step(third)
    r, b = torch.where(blue_row, other, row_colour), torch.where(blue_row, row_colour, other)
    return torch.stack([r, g, b], -1).to(raw.dtype)


def _vng_directions(at, green):
    """Which of VNG's 8 directions (_AXES, then _DIAGONALS) each pixel uses: those whose gradient is
    under min + max(max // 2, 1), the gradients summed from OpenCV's per-pixel parts."""
    ring = _Window(at.x, 1)  # the parts cover the pixels and a ring of 1 around them
    s1, s2, s3, s4, s6, s7, s8, s9 = (ring(dy, dx) for dy, dx in _NEIGHBOURS)

    def d(a, b):
        return (a - b).abs()
    vertical, horizontal = d(s1, s7) + 2 * d(s2, s8) + d(s3, s9), d(s1, s3) + 2 * d(s4, s6) + d(s7, s9)
    anti, diag = 2 * d(s3, s7), 2 * d(s1, s9)
    anti_cross, diag_cross = anti + d(s2, s4) + d(s6, s8), diag + d(s2, s6) + d(s4, s8)
    near = _Window(None, 1)
    grads = []
    for dy, dx in _AXES:
        p = vertical if dx == 0 else horizontal
        grads.append(near(0, 0, p) + near(dy, dx, p))
    for dy, dx in _DIAGONALS:
        p, q = (anti, anti_cross) if dy != dx else (diag, diag_cross)
        grads.append(torch.where(green, near(0, 0, p) + near(dy, 0, p) + near(0, dx, p) + near(dy, dx, p),
                                 near(0, 0, q) + near(dy, dx, q)))
    low, high = grads[0], grads[0]
    for grad in grads[1:]:
        low, high = torch.minimum(low, grad), torch.maximum(high, grad)
    threshold = low + (high // 2).clamp(min=1)
    return [grad < threshold for grad in grads]


def _vng_sums(at, green, used):
    """VNG's colour sums over the used directions: (own colour (at green: the colour of the row's
    other sensors), green, the third colour), each direction adding 2 values of each colour."""
    c, ring = at(0, 0), _Window(at.x, 1)
    green_x2 = _Window((ring(-1, 0) + ring(0, -1) + ring(0, 1) + ring(1, 0)) >> 1, 1)  # cross sums / 2
    sums = [torch.zeros_like(c) for _ in range(3)]
    for k, (dy, dx) in enumerate(_AXES + _DIAGONALS):
        far, near = at(2 * dy, 2 * dx) + c, 2 * at(dy, dx)
        if k < 4:
            px, py = dx, dy  # the perpendicular, as (dy, dx) = (px, py)
            pair = at(dy + px, dx + py) + at(dy - px, dx - py)
            far_pair = at(2 * dy + px, 2 * dx + py) + at(2 * dy - px, 2 * dx - py)
            at_colour = (far, near, pair)
            at_green = (near, far, far_pair) if dy == 0 else (far_pair, far, near)
        else:
            at_colour = (far, green_x2(dy, dx), near)
            at_green = (at(2 * dy, dx) + at(0, dx), near, at(dy, 0) + at(dy, 2 * dx))
        for acc, a, b in zip(sums, at_colour, at_green):
            acc += torch.where(used[k], torch.where(green, b, a), 0)
    return sums


def _vng_simd_columns(green, w):
    """Which pixels of each row OpenCV's SSE code computes (`w`: the extended width; the image
    starts at its column 2): 8 at a time from the row's first red or blue pixel while 8 more
    columns follow them."""
    first = 2 + green[:, :, :1].to(torch.int64)
    chunks = ((w - 10 - first) // 8 + 1).clamp(min=0)
    cols = torch.arange(2, w - 2, device=green.device)
    return (cols >= first) & (cols < first + 8 * chunks)


_DEMOSAICS = {"default": demosaiced, "bilinear_ocv": demosaiced, "default_npp": demosaiced,
              "edgeaware_ocv": lambda raw, blue: demosaiced(raw, blue, edge_aware=True),
              "vng_ocv": vng_demosaiced, "gray_ocv": bayer_gray}


@register("debayer", devices=("cpu", "gpu"), inputs=(1, 1), deprecated_names=("experimental.debayer",), args=[
    Arg("blue_position", INTS, REQUIRED, "(y, x) of the blue sensor in the 2x2 Bayer tile that starts at the "
        "second row and column: (0, 0) BGGR, (0, 1) GBRG, (1, 0) GRBG, (1, 1) RGGB (OpenCV's names).",
        per_sample=True, per_frame=True, check=_blue_position_check),
    Arg("algorithm", STR, "default", "Interpolation, as DALI's CPU operator does it with OpenCV: 'default' or "
        "'bilinear_ocv' (bilinear), 'edgeaware_ocv' (bilinear, green along the smaller gradient), 'vng_ocv' "
        "(Variable Number of Gradients; uint8 only) or 'gray_ocv' (the bilinear colours' luma: 1 channel); "
        "'default_npp' on the GPU only (computed as bilinear_ocv). All of them run on both devices here, "
        "where DALI's GPU operator takes only 'default' and 'default_npp' (NPP's bilinear).",
        choices=tuple(_DEMOSAICS))])
class Debayer(Operator):
    """Demosaics single-channel uint8 / uint16 Bayer images (HW, HWC with one channel, or
    sequences of them) into RGB (HWC), or gray with 'gray_ocv', as OpenCV does."""

    def plan(self, inputs):
        spec = inputs[0]
        _check_layout(self, spec.layout, ("", "HW", "HWC", "FHW", "FHWC"))
        algorithm = self.spec.args["algorithm"]
        if algorithm == "default_npp" and self.spec.device == "cpu":
            raise self.error("algorithm 'default_npp' is not supported on the CPU; use 'default' or 'bilinear_ocv'",
                             ValueError)
        if spec.dtype is not None:
            self._check_type(spec.dtype)
        self.demosaic = _DEMOSAICS[algorithm]
        channels = 1 if algorithm == "gray_ocv" else 3
        return [BatchSpec(spec.device, spec.dtype, channels, "HWC")], frame_by_frame(self, self.step)

    def _check_type(self, dtype):
        vng = self.spec.args["algorithm"] == "vng_ocv"
        if dtype not in ((torch.uint8,) if vng else (torch.uint8, torch.uint16)):
            wanted = "uint8 images (algorithm 'vng_ocv')" if vng else "uint8 or uint16 images"
            raise self.error(f"input type {types.to_dali_type(dtype)} is not supported; give {wanted}", TypeError)

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        if not len(batch):
            return [TensorList.make([], "HWC", device=batch.device)]
        self._check_type(types.to_torch_type(batch.dtype))
        self._check_shapes(sample_shapes(self, batch))
        blue = args.rows("blue_position", len(batch)).astype(np.int64)
        dense = batch.dense_tensor()
        if dense is not None:
            return [TensorList.make(self.demosaic(dense.reshape(dense.shape[:3]), blue), "HWC", device=batch.device)]
        samples = [self.demosaic(s.reshape((1,) + s.shape[:2]), blue[i:i + 1])[0]
                   for i, s in enumerate(batch.as_torch_list())]
        return [TensorList.make(samples, "HWC", device=batch.device)]

    def _check_shapes(self, shapes):
        problems = [(i, "has more than one channel") for i in np.flatnonzero(shapes[:, 2:].prod(1) != 1)] \
            if shapes.shape[1] == 3 else [] if shapes.shape[1] == 2 else [(0, "is not a 2D image")]
        problems += [(i, "has an odd height or width") for i in np.flatnonzero((shapes[:, :2] % 2).any(1))]
        problems += [(i, "is empty") for i in np.flatnonzero((shapes[:, :2] == 0).any(1))]
        if problems:
            i, what = min(problems)
            raise self.error(f"sample {i} (shape {tuple(shapes[i].tolist())}) {what}; give single-channel Bayer "
                             "images (HW, or HWC with 1 channel) of even height and width", ValueError, sample=int(i))


@register("jpeg_compression_distortion", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("quality", INT, 50, "JPEG quality, 1 (lowest) to 100; values outside are clamped.", per_sample=True)])
class JpegCompressionDistortion(Operator):
    """Adds JPEG compression artifacts to uint8 RGB images (HWC, FHWC): each image is encoded
    with the given quality (libjpeg, 4:2:0 chroma subsampling) and decoded again."""

    def plan(self, inputs):
        return [_uint8_images(self, inputs[0], ("HWC", "FHWC"))], frame_by_frame(self, self.step)

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        shapes = _uint8_shapes(self, batch)
        if shapes is None:
            return [batch]
        bad = [(i, "is not an HWC image with 3 channels (RGB)") for i in range(len(shapes))
               if shapes.shape[1] != 3 or shapes[i, 2] != 3]
        bad += [(i, "is empty") for i in np.flatnonzero(shapes.prod(1) == 0)]
        if bad:
            i, what = min(bad)
            raise self.error(f"sample {i} (shape {tuple(shapes[i].tolist())}) {what}", ValueError, sample=int(i))
        quality = np.clip(np.broadcast_to(args.batch("quality"), (len(batch),)), 1, 100)
        images = batch.as_torch_list()
        out = [self._round_trip(im.cpu(), int(q)).to(im.device) for im, q in zip(images, quality)]
        return [TensorList.make(out, batch.layout(), device=batch.device)]

    @staticmethod
    def _round_trip(image, quality):
        data = torchvision.io.encode_jpeg(image.permute(2, 0, 1).contiguous(), quality=quality)
        return torchvision.io.decode_jpeg(data, mode=torchvision.io.ImageReadMode.RGB).permute(1, 2, 0)


def _reflect101(i, n):
    """Indices `i` folded into [0, n) with reflect-101 borders (OpenCV's BORDER_REFLECT_101)."""
    if n == 1:
        return torch.zeros_like(i)
    period = 2 * (n - 1)
    i = i.abs() % period
    return torch.where(i >= n, period - i, i)


def _clipped_histograms(hist, clip):
    """OpenCV's CLAHE clipping of [..., 256] histograms at `clip` counts: the excess is spread evenly over
    the bins, its remainder one count a bin on every (256 // remainder)-th bin from the first."""
    excess = (hist - clip).clamp(min=0).sum(-1, keepdim=True)
    hist = hist.clamp(max=clip) + excess // 256
    residual = excess % 256
    step = (256 // residual.clamp(min=1)).clamp(min=1)
    bins = torch.arange(256, device=hist.device)
    return hist + ((bins % step == 0) & (bins // step < residual)).to(hist.dtype)


def _clip_counts(clip_limit, tile_area):
    """OpenCV's clip limit in counts: max(int(clip_limit * tile_area / 256), 1), where a limit past the
    int range converts (on x86, as DALI runs it) to INT_MIN and so to 1; one past the tile area clips
    nothing, whatever its value."""
    limit = clip_limit * tile_area / 256
    return 1 if limit >= 2 ** 31 else min(max(int(limit), 1), tile_area)


def clahe_planes(planes, tiles_y, tiles_x, clip_limit):
    """OpenCV's CLAHE of uint8 planes [G, H, W] (one shape): per-tile histograms (over the image padded with
    reflect-101 to a multiple of the tiles, as OpenCV pads it), clipped at max(int(clip_limit * tile area /
    256), 1) counts where clip_limit > 0, equalized into a table per tile; each pixel blends the tables of
    its 4 nearest tile centres bilinearly."""
    g, h, w = planes.shape
    dev = planes.device
    if h % tiles_y or w % tiles_x:  # OpenCV pads both ways, by a whole tile where one already fits
        rows = _reflect101(torch.arange(h + tiles_y - h % tiles_y, device=dev), h)
        cols = _reflect101(torch.arange(w + tiles_x - w % tiles_x, device=dev), w)
        padded = planes[:, rows][:, :, cols]
    else:
        padded = planes
    th, tw = padded.shape[1] // tiles_y, padded.shape[2] // tiles_x
    tiles = padded.reshape(g, tiles_y, th, tiles_x, tw).permute(0, 1, 3, 2, 4).reshape(g, tiles_y * tiles_x, -1)
    codes = tiles.to(torch.int64)
    hist = torch.zeros(g, tiles_y * tiles_x, 256, dtype=torch.int64, device=dev)
    hist.scatter_add_(2, codes, torch.ones_like(codes))
    if clip_limit > 0:
        hist = _clipped_histograms(hist, _clip_counts(clip_limit, th * tw))
    scale = torch.tensor(255.0, dtype=_F32) / torch.tensor(float(th * tw), dtype=_F32)
    luts = torch.round(hist.cumsum(-1).to(_F32) * scale).clamp(0, 255).reshape(g, -1)
    y1, y2, ya = _tile_weights(h, th, tiles_y, dev)
    x1, x2, xa = _tile_weights(w, tw, tiles_x, dev)
    value = planes.to(torch.int64)

    def lut(ty, tx):
        return luts.gather(1, ((ty[:, None] * tiles_x + tx[None, :]) * 256 + value).reshape(g, -1)).view(g, h, w)

    xa, ya = xa[None, None, :], ya[None, :, None]
    res = (lut(y1, x1) * (1 - xa) + lut(y1, x2) * xa) * (1 - ya) + (lut(y2, x1) * (1 - xa) + lut(y2, x2) * xa) * ya
    return torch.round(res).clamp(0, 255).to(torch.uint8)


def _tile_weights(n, tile, tiles, device):
    """For each of n positions: the two nearest tile centres (clamped to the tiles) and the weight of the
    second, computed in float32 as OpenCV does."""
    pos = torch.arange(n, device=device, dtype=_F32) * (torch.tensor(1.0, dtype=_F32) / tile) - 0.5
    first = torch.floor(pos)
    weight = pos - first
    first = first.to(torch.int64)
    return first.clamp(min=0), (first + 1).clamp(max=tiles - 1), weight


# OpenCV's 8-bit RGB <-> CIE Lab (D65), reproduced table for table: fixed point, with the tables built in
# float32 (OpenCV's softfloat) and double where OpenCV uses them.
_F = np.float32
_SRGB_TO_XYZ = np.array([[0.412453, 0.357580, 0.180423], [0.212671, 0.715160, 0.072169],
                         [0.019334, 0.119193, 0.950227]])
_XYZ_TO_SRGB = np.array([[3.240479, -1.53715, -0.498535], [-0.969256, 1.875991, 0.041556],
                         [0.055648, -0.204043, 1.057311]])
_D65 = np.array([0.950456, 1.0, 1.088754], np.float32).astype(np.float64)
_LAB_THRESH, _LAB_SCALE, _LAB_BIAS = _F(216) / _F(24389), _F(841) / _F(108), _F(16) / _F(116)
_BASE = 1 << 14
_MIN_AB = -8145


def _gamma(x):
    x = np.asarray(x, np.float64)
    return np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4).astype(np.float32)


def _inverse_gamma(x):
    x = np.asarray(x, np.float64)
    return np.where(x <= 0.0031308, x * 12.92, x ** (1 / 2.4) * 1.055 - 0.055).astype(np.float32)


def _c_div(a, b):
    """C's integer division (truncating toward zero)."""
    return np.sign(a) * (np.abs(a) // b)


def _lab8_tables():
    """The tables of OpenCV's initLabTabs and the fixed-point matrices of RGB2Lab_b / Lab2RGBinteger."""
    gamma = np.rint(_F(2040) * _gamma(np.arange(256, dtype=np.float32) / _F(255)))
    x = np.arange(2040 * 3 // 2, dtype=np.float32) * (_F(1) / _F(2040))
    fused = (x.astype(np.float64) * _LAB_SCALE + _LAB_BIAS).astype(np.float32)
    # the cube root in double: OpenCV's float32 one rounds a few entries the other way, which no
    # rounding of a correctly rounded float32 reproduces (e.g. entry 324: 17745.4992 -> 17745)
    cbrt = np.rint(32768 * np.where(x < _LAB_THRESH, fused, np.cbrt(x.astype(np.float64))))
    to_xyz = np.rint(4096 * _SRGB_TO_XYZ / _D65[:, None])
    level = np.arange(256)
    dark_y = np.rint(_F(1) * (level * _BASE * 20 * 9).astype(np.float32) / _F(17 * 29 * 29 * 29))
    dark_fy = np.rint(_F(_BASE) * (_F(16) / _F(116) + (level * 5).astype(np.float32) / _F(3 * 17 * 29)))
    fy = (level * 100 * _BASE).astype(np.float32) / _F(255 * 116) + _F(16 * _BASE) / _F(116)
    y = np.rint(fy * fy * fy / _F(_BASE * _BASE))
    l_to_y = np.where(level <= 20, dark_y, y)
    l_to_fy = np.where(level <= 20, dark_fy, np.rint(fy))
    i = np.arange(_MIN_AB, _BASE * 9 // 4 + _MIN_AB, dtype=np.int64)
    ab_to_xz = np.where(i <= 3390, _c_div(i * 108, 841) - 290, (i * i // _BASE) * i // _BASE)
    to_rgb = np.rint(4096 * _XYZ_TO_SRGB * _D65[None, :])
    inverse_gamma = np.rint(_F(255) * _inverse_gamma(np.arange(4096, dtype=np.float32) / _F(4096)))
    return [torch.from_numpy(np.asarray(t).astype(np.int64)) for t in
            (gamma, to_xyz, cbrt, l_to_y, l_to_fy, ab_to_xz, to_rgb, inverse_gamma)]


_LAB8_TABLES = {torch.device("cpu"): _lab8_tables()}


def _lab8(device):
    """The Lab tables on `device` (copied there once)."""
    if device not in _LAB8_TABLES:
        _LAB8_TABLES[device] = [t.to(device) for t in _LAB8_TABLES[torch.device("cpu")]]
    return _LAB8_TABLES[device]


def _rgb_to_lab8(rgb):
    """OpenCV's 8-bit Lab (L * 255 / 100, a + 128, b + 128) of uint8 sRGB [..., 3]."""
    gamma, to_xyz, cbrt, *_ = _lab8(rgb.device)
    linear = gamma[rgb.to(torch.int64)]
    xyz = ((linear[..., None, :] * to_xyz).sum(-1) + 2048) >> 12
    fx, fy, fz = cbrt[xyz].unbind(-1)
    lightness = (296 * fy - 1336934 + (1 << 14)) >> 15
    a = (500 * (fx - fy) + (128 << 15) + (1 << 14)) >> 15
    b = (200 * (fy - fz) + (128 << 15) + (1 << 14)) >> 15
    return torch.stack([lightness, a, b], -1).clamp(0, 255).to(torch.uint8)


def _lab8_to_rgb(lab):
    """uint8 sRGB [..., 3] of OpenCV's 8-bit Lab, as its Lab2RGBinteger computes it."""
    *_, l_to_y, l_to_fy, ab_to_xz, to_rgb, inverse_gamma = _lab8(lab.device)
    lightness, a, b = lab.to(torch.int64).unbind(-1)
    y, fy = l_to_y[lightness], l_to_fy[lightness]
    a_part = ((5 * a * 53687 + (1 << 7)) >> 13) - 128 * _BASE // 500
    b_part = ((b * 41943 + (1 << 4)) >> 9) - 128 * _BASE // 200 + 1
    x, z = ab_to_xz[fy + a_part - _MIN_AB], ab_to_xz[fy - b_part - _MIN_AB]
    rgb = ((torch.stack([x, y, z], -1)[..., None, :] * to_rgb).sum(-1) + (1 << 13)) >> 14
    return inverse_gamma[rgb.clamp(0, 4095)].to(torch.uint8)


_MAX_TILES = 4096


@register("clahe", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("tiles_x", INT, REQUIRED, "Tiles across the width.", check=lambda v: None if v > 0 else "must be positive"),
    Arg("tiles_y", INT, REQUIRED, "Tiles down the height.", check=lambda v: None if v > 0 else "must be positive"),
    Arg("clip_limit", FLOAT, REQUIRED, "Histogram clip limit, relative: a bin keeps at most clip_limit * "
        "tile area / 256 counts (at least 1); 0 or less: no clipping.",
        check=lambda v: None if math.isfinite(v) else "must be a finite number"),
    Arg("bins", INT, 256, "Histogram bins; uint8 images use 256 (as DALI's CPU operator does, whatever the value).",
        check=lambda v: None if v > 0 else "must be positive"),
    Arg("luma_only", BOOL, True, "RGB images: equalize the lightness (L of CIE Lab, as DALI's CPU operator) only; "
        "False: each channel.")])
class Clahe(Operator):
    """Contrast Limited Adaptive Histogram Equalization of uint8 HWC images (1 or 3 channels) as
    OpenCV does it: per-tile clipped histogram equalization, blended bilinearly between tiles.
    With luma_only, RGB goes to 8-bit CIE Lab (OpenCV's fixed-point conversion), CLAHE changes the
    lightness, and the result goes back to RGB."""

    def plan(self, inputs):
        spec = inputs[0]
        _check_layout(self, spec.layout, ("", "HWC"))
        _check_uint8(self, spec)
        a = self.spec.args
        if a["tiles_x"] * a["tiles_y"] > _MAX_TILES:
            raise self.error(f"tiles_x * tiles_y = {a['tiles_x'] * a['tiles_y']}; at most {_MAX_TILES} tiles are "
                             "supported (a histogram of 256 bins each, per image)", ValueError)
        self.tiles = (a["tiles_y"], a["tiles_x"], a["clip_limit"])
        return [BatchSpec(spec.device, torch.uint8, 3, spec.layout)], self.step

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        shapes = _uint8_shapes(self, batch)
        if shapes is None:
            return [batch]
        problems = [(0, "is not an HWC image")] if shapes.shape[1] != 3 else \
            [(i, "has neither 1 nor 3 channels") for i in np.flatnonzero((shapes[:, 2] != 1) & (shapes[:, 2] != 3))]
        problems += [(i, "is empty") for i in np.flatnonzero(shapes.prod(1) == 0)] if shapes.shape[1] == 3 else []
        if problems:
            i, what = min(problems)
            raise self.error(f"sample {i} (shape {tuple(shapes[i].tolist())}) {what}; give uint8 HWC images with "
                             "1 or 3 channels", ValueError, sample=int(i))
        dense = batch.dense_tensor()
        groups = [dense] if dense is not None else [s[None] for s in batch.as_torch_list()]
        out = [self._equalize(images) for images in groups]
        return [TensorList.make(out[0] if dense is not None else [o[0] for o in out], batch.layout(),
                                device=batch.device)]

    def _equalize(self, images):
        """CLAHE of same-shaped images [N, H, W, C]."""
        n, h, w, c = images.shape
        if c == 3 and self.spec.args["luma_only"]:
            lab = _rgb_to_lab8(images)
            lab[..., 0] = clahe_planes(lab[..., 0], *self.tiles)
            return _lab8_to_rgb(lab)
        planes = images.permute(0, 3, 1, 2).reshape(n * c, h, w)
        return clahe_planes(planes, *self.tiles).reshape(n, c, h, w).permute(0, 2, 3, 1).contiguous()
