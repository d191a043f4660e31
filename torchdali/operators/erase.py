"""Erasing operators: erase (fill regions of the samples) and grid_mask (zero a rotated grid of
squares). The regions and the grid are worked out on the host in DALI's float32 arithmetic; a
batch is then masked by whole-batch torch ops (a dense batch at once, a ragged one sample by
sample)."""
import numpy as np
import torch

from .. import types
from ..schema import BOOL, FLOAT, FLOATS, INT, INTS, LAYOUT, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator, sample_shapes

ERASE_DTYPES = (torch.uint8, torch.int8, torch.uint16, torch.int16, torch.uint32, torch.int32, torch.uint64,
                torch.int64, torch.float16, torch.float32)
GRID_MASK_DTYPES = (torch.uint8, torch.int16, torch.int32, torch.float32)
_SIGNED_VIEWS = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}
_INT64_MIN = np.iinfo(np.int64).min


def where(cond, a, b):
    """torch.where(cond, a, b) for every DALI type (the unsigned 16- to 64-bit types through their
    signed views, which every device takes); a and b are of one type."""
    signed = _SIGNED_VIEWS.get(b.dtype)
    if signed is None:
        return torch.where(cond, a, b)
    return torch.where(cond, a.view(signed), b.view(signed)).view(b.dtype)


def _truncate(x, bits):
    """float values as x86-64's truncating conversion to a `bits`-bit integer gives them (int64
    array): toward zero, and the type's smallest value where out of range or NaN."""
    x = np.asarray(x, np.float64)
    ok = (x >= -2.0 ** (bits - 1)) & (x < 2.0 ** (bits - 1))
    out = np.trunc(np.where(ok, x, 0.0)).astype(np.int64)
    out[~ok] = -(1 << (bits - 1))
    return out


def static_cast(values, dtype):
    """float32 `values` converted to torch `dtype` as DALI's C++ static_cast does on x86-64
    (a NumPy array): floats round to the nearest; integers truncate toward zero and wrap
    modulo the type (through a 32-bit conversion for the narrower types, 64-bit for uint32 and
    int64), NaN and values out of that conversion's range to its smallest value."""
    np_type = types.to_numpy_type(types.to_dali_type(dtype))
    x = np.asarray(values, np.float32).astype(np.float64)
    if dtype.is_floating_point:
        with np.errstate(over="ignore"):  # to infinity, as the cast does
            return x.astype(np.float32).astype(np_type)
    if dtype == torch.uint64:  # from 2^63 up: converted less 2^63, the top bit set back
        high = x >= 2.0 ** 63
        wide = np.where(high, _truncate(x - 2.0 ** 63, 64) ^ _INT64_MIN, _truncate(x, 64))
        return wide.view(np.uint64)
    bits = 64 if dtype in (torch.uint32, torch.int64) else 32
    return _truncate(x, bits).astype(np_type)


def _checked_shapes(op, batch, dtypes):
    """(torch dtype, samples' shapes [N, ndim]) of a non-empty batch whose type is among `dtypes`
    (checked here where the plan could not know it)."""
    dtype = types.to_torch_type(batch.dtype)
    if dtype not in dtypes:
        raise _unsupported(op, dtype, dtypes)
    return dtype, sample_shapes(op, batch)


def _unsupported(op, dtype, dtypes):
    names = ", ".join(str(types.to_dali_type(d)).replace("DALIDataType.", "") for d in dtypes)
    return op.error(f"input type {types.to_dali_type(dtype)} is not supported; give one of {names}", TypeError)


@register("erase", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("anchor", FLOATS, [], "Start of each region along `axes`: region after region (y0, x0, y1, x1 ...); "
        "zeros when only `shape` is given.", per_sample=True),
    Arg("shape", FLOATS, [], "Extent of each region along `axes`, as `anchor`.", per_sample=True),
    Arg("axes", INTS, None, "The axes (indices) that `anchor` and `shape` give, in their order; when neither "
        "axes nor axis_names is given, every axis but 'C' of the layout."),
    Arg("axis_names", LAYOUT, None, "The axes that `anchor` and `shape` give, by layout name (e.g. 'HW'); "
        "takes precedence over `axes`."),
    Arg("fill_value", FLOATS, [0.0], "Value of the erased elements: one, or one per channel (needs a 'C' in the "
        "layout); converted to the input's type as DALI does (a C++ cast: no rounding or saturation).",
        per_sample=True),
    Arg("normalized_anchor", BOOL, None, "`anchor` is a fraction of each axis' extent (False when not given)."),
    Arg("normalized_shape", BOOL, None, "`shape` is a fraction of each axis' extent (False when not given)."),
    Arg("normalized", BOOL, None, "Both anchor and shape are fractions; not with normalized_anchor or "
        "normalized_shape."),
    Arg("centered_anchor", BOOL, False, "`anchor` is each region's centre instead of its start."),
])
class Erase(Operator):
    """Fills regions of each sample (HWC images, volumes, sequences, any 1 to 5 dims) with
    `fill_value`. A region spans [anchor, anchor + shape) along the given axes (truncated to
    integers in float32, as DALI does, and clipped to the sample) and the whole of the others."""

    def plan(self, inputs):
        a = self.spec.args
        if a["normalized"] is not None and (a["normalized_anchor"] is not None or a["normalized_shape"] is not None):
            raise self.error("'normalized' cannot be given with 'normalized_anchor' or 'normalized_shape'",
                             ValueError)
        self.normalized = (bool(a["normalized"] if a["normalized"] is not None else a["normalized_anchor"]),
                           bool(a["normalized"] if a["normalized"] is not None else a["normalized_shape"]))
        spec = inputs[0]
        if spec.dtype is not None and spec.dtype not in ERASE_DTYPES:
            raise _unsupported(self, spec.dtype, ERASE_DTYPES)
        if spec.ndim is not None:
            self._check_ndim(spec.ndim)
        device = "cpu" if self.spec.device == "cpu" else "gpu"
        return [BatchSpec(device, spec.dtype, spec.ndim, spec.layout)], self.step

    def _check_ndim(self, ndim):
        if not 1 <= ndim <= 5:
            raise self.error(f"samples of {ndim} dims are not supported; give 1 to 5 dims", ValueError)

    def _axes(self, layout, ndim):
        """The axes that anchor and shape give, in their order."""
        names, axes = self.spec.args["axis_names"], self.spec.args["axes"]
        if names is not None:
            missing = [c for c in names if c not in layout]
            if missing:
                raise self.error(f"axis_names '{names}': '{missing[0]}' is not in the input layout '{layout}'",
                                 ValueError)
            axes = [layout.index(c) for c in names]
        elif axes is not None:
            bad = [a for a in axes if not 0 <= a < ndim]
            if bad:
                raise self.error(f"axes {list(axes)}: {bad[0]} is not an axis of samples of {ndim} dims", ValueError)
        else:
            axes = [d for d in range(len(layout)) if layout[d] != "C"]
        if not axes:
            raise self.error(f"no axes for anchor and shape (layout '{layout}'); give axes or axis_names",
                             ValueError)
        return list(axes)

    def _fill_values(self, args, n, layout):
        """Fill values as float32 [n, k] (k: 1, or one per channel)."""
        v = args.batch("fill_value")
        if isinstance(v, list) and args.is_per_sample("fill_value"):
            raise self.error("argument input 'fill_value' must have the same number of values in every sample",
                             ValueError)
        v = np.asarray(v if len(v) else [0.0], np.float32)
        if v.shape[-1] > 1 and "C" not in layout:
            raise self.error(f"fill_value has {v.shape[-1]} values (one per channel) but the input layout "
                             f"'{layout}' has no 'C'; give one value, or a layout with channels", ValueError)
        return np.broadcast_to(v.reshape(-1, v.shape[-1]), (n, v.shape[-1]))

    def _region_values(self, args, name, i):
        v = args.sample(name, i) if args.is_per_sample(name) else args[name]
        return np.asarray(v, np.float32).reshape(-1)

    def _bounds(self, anchor, shape, extent, axes):
        """[R, ndim] begins and ends of the non-empty regions of one sample of `extent`."""
        naxes = len(axes)
        a, s = anchor.reshape(-1, naxes), shape.reshape(-1, naxes)
        ext = extent[axes].astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):  # to inf and NaN, as DALI's float math
            if self.normalized[0]:
                a = a * ext
            if self.normalized[1]:
                s = s * ext
            if self.spec.args["centered_anchor"]:
                a = a - s / np.float32(2)
            lo, hi = _truncate(a, 64), _truncate(a + s, 64)
        begin = np.zeros((len(a), len(extent)), np.int64)
        end = np.broadcast_to(extent, begin.shape).copy()
        for j, axis in enumerate(axes):  # an axis given twice: the last wins, as in DALI
            begin[:, axis], end[:, axis] = lo[:, j], hi[:, j]
        begin, end = np.clip(begin, 0, extent), np.clip(end, 0, extent)
        keep = (end > begin).all(axis=1)
        return begin[keep], end[keep]

    def _regions(self, args, shapes, axes):
        """Per sample: the begins and ends [R, ndim] of its regions."""
        out = []
        naxes = len(axes)
        for i, extent in enumerate(shapes):
            anchor, shape = self._region_values(args, "anchor", i), self._region_values(args, "shape", i)
            if not len(anchor) and not args.is_per_sample("anchor") and not args.is_per_sample("shape"):
                anchor = np.zeros_like(shape)
            if len(anchor) != len(shape):
                raise self.error(f"sample {i}: anchor has {len(anchor)} values and shape {len(shape)}; give as many "
                                 "(with shape given per sample, give anchor too)", ValueError, sample=i)
            if len(shape) % naxes:
                raise self.error(f"sample {i}: anchor and shape have {len(shape)} values, not a multiple of the "
                                 f"{naxes} axes {axes}", ValueError, sample=i)
            out.append(self._bounds(anchor, shape, extent, axes))
        return out

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        n = len(batch)
        if not n:
            return [batch]
        dtype, shapes = _checked_shapes(self, batch, ERASE_DTYPES)
        ndim = shapes.shape[1]
        self._check_ndim(ndim)
        layout = batch.layout()
        axes = self._axes(layout, ndim)
        fills = self._fill_values(args, n, layout)
        regions = self._regions(args, shapes, axes)
        if fills.shape[1] > 1:
            c = layout.index("C")
            bad = [i for i, (b, _) in enumerate(regions) if len(b) and shapes[i, c] != fills.shape[1]]
            if bad:
                raise self.error(f"fill_value has {fills.shape[1]} values but sample {bad[0]} has "
                                 f"{shapes[bad[0], c]} channels", ValueError, sample=bad[0])
        if not any(len(b) for b, _ in regions):
            return [batch]
        fills = torch.from_numpy(static_cast(fills, dtype))
        channel_dim = layout.index("C") if fills.shape[1] > 1 else None
        dense = batch.dense_tensor()
        if dense is not None:
            out = _erase(dense, regions, fills, channel_dim)
        else:
            out = [_erase(s[None], [r], fills[i:i + 1], channel_dim)[0] if len(r[0]) else s
                   for i, (s, r) in enumerate(zip(batch.as_torch_list(), regions))]
        return [TensorList.make(out, layout, device=batch.device)]


def _erase(x, regions, fills, channel_dim):
    """x [n, ...] with each sample's regions (begins, ends [R, ndim]) set to its fill values
    [n, k], those per channel along `channel_dim`."""
    n, shape = x.shape[0], x.shape[1:]
    count = max(len(b) for b, _ in regions)
    begin = np.zeros((n, count, len(shape)), np.int64)
    end = np.zeros_like(begin)  # absent regions: empty
    for i, (b, e) in enumerate(regions):
        begin[i, :len(b)], end[i, :len(e)] = b, e
    full = (begin == 0).all(axis=(0, 1)) & (end == np.asarray(shape)).all(axis=(0, 1))
    begin_t, end_t = torch.from_numpy(begin).to(x.device), torch.from_numpy(end).to(x.device)
    mask = torch.zeros((n,) + (1,) * len(shape), dtype=torch.bool, device=x.device)
    for r in range(count):
        inside = torch.ones_like(mask)
        for d, extent in enumerate(shape):
            if full[d]:
                continue
            index = torch.arange(extent, device=x.device)
            along = (index >= begin_t[:, r, d, None]) & (index < end_t[:, r, d, None])
            inside = inside & along.reshape((n,) + (1,) * d + (extent,) + (1,) * (len(shape) - d - 1))
        mask = mask | inside
    fill_shape = [n] + [1] * len(shape)
    if channel_dim is not None:
        fill_shape[channel_dim + 1] = fills.shape[1]
    return where(mask, fills.reshape(fill_shape).to(x.device), x)


@register("grid_mask", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("tile", INT, 100, "Length of a tile: a black square plus the spacing to the next.", per_sample=True,
        check=lambda v: None if v > 0 else "must be positive"),
    Arg("ratio", FLOAT, 0.5, "Ratio of a black square's side to the tile length.", per_sample=True),
    Arg("angle", FLOAT, 0.0, "Angle of the grid, in radians (rotated around the origin).", per_sample=True),
    Arg("shift_x", FLOAT, 0.0, "x component of the grid's translation, applied after rotation.", per_sample=True),
    Arg("shift_y", FLOAT, 0.0, "y component of the grid's translation, applied after rotation.", per_sample=True),
])
class GridMask(Operator):
    """GridMask augmentation (https://arxiv.org/abs/2001.04086): zeroes the pixels of a grid of
    squares, repeating every `tile` pixels in x and y, rotated by `angle` and shifted. The
    samples' 3 dims are read as H, W, C whatever the layout, as DALI does."""

    def plan(self, inputs):
        spec = inputs[0]
        if spec.dtype is not None and spec.dtype not in GRID_MASK_DTYPES:
            raise _unsupported(self, spec.dtype, GRID_MASK_DTYPES)
        if spec.ndim is not None and spec.ndim != 3:
            raise self.error(f"samples of {spec.ndim} dims are not supported; give HWC images", ValueError)
        device = "cpu" if self.spec.device == "cpu" else "gpu"
        return [BatchSpec(device, spec.dtype, 3, spec.layout)], self.step

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        n = len(batch)
        if not n:
            return [batch]
        dtype, shapes = _checked_shapes(self, batch, GRID_MASK_DTYPES)
        if shapes.shape[1] != 3:
            raise self.error(f"samples of {shapes.shape[1]} dims are not supported; give HWC images", ValueError)
        device = batch.sample(0).device
        keep = self._grid(args, n, int(shapes[:, 0].max()), int(shapes[:, 1].max()), device).to(dtype)
        dense = batch.dense_tensor()
        if dense is not None:
            out = dense * keep[..., None]
        else:
            out = [s * keep[i, :s.shape[0], :s.shape[1], None] for i, s in enumerate(batch.as_torch_list())]
        return [TensorList.make(out, batch.layout(), device=batch.device)]

    def _grid(self, args, n, height, width, device):
        """[n, height, width] bool: the pixels kept, in DALI's float32 arithmetic (its cos and sin
        in double, divided by the tile, rounded to float)."""
        def param(name, dtype=np.float32):
            return np.broadcast_to(np.asarray(args.batch(name), dtype), (n,))

        tile = param("tile", np.int64).astype(np.float64)
        angle = param("angle").astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):  # to inf and NaN, as DALI's float math
            tile32 = tile.astype(np.float32)
            per_sample = np.stack([np.cos(angle) / tile, np.sin(angle) / tile, param("shift_x") / tile32,
                                   param("shift_y") / tile32, param("ratio")], axis=1).astype(np.float32)
        ca, sa, sx, sy, ratio = torch.from_numpy(per_sample).to(device)[:, :, None, None].unbind(1)
        y = torch.arange(height, dtype=torch.float32, device=device)[:, None]
        x = torch.arange(width, dtype=torch.float32, device=device)[None, :]
        fx = (-sx + y * -sa) + x * ca
        fy = (-sy + y * ca) + x * sa
        return (fx - torch.floor(fx) >= ratio) | (fy - torch.floor(fy) >= ratio)
