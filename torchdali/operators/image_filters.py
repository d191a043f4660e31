"""Convolution filters and morphology: filter (a user kernel over 2D or 3D data), laplacian
(DALI's, i.e. OpenCV's, derivative and smoothing windows on the `torchdali::separable_conv`
kernel), experimental.median_blur, experimental.dilate and experimental.erode.

Every sample is seen as a grid [outer, *spatial, inner]: the dims before its spatial axes
(channels first), the spatial axes, the dims after them (channels last); a dense batch adds
its N in front and runs as one array when its arguments are shared. Borders are index maps
per spatial axis (a gather), so windows wider than the image reflect or wrap as often as
they must. DALI runs median_blur, dilate and erode (CV-CUDA) on the GPU only; ours run on
both devices, as OpenCV's medianBlur, dilate and erode (which DALI's tests check against)."""
import itertools

import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, FLOATS, INT, INTS, STR, Arg, register
from ..tensor_list import TensorList
from .base import Operator
from .conversions import convert_saturate
from .filters import spatial_axes
from .sequences import frame_by_frame

_BORDERS = {"reflect_101": "reflect_101", "reflect101": "reflect_101", "reflect_1001": "reflect_1001",
            "reflect1001": "reflect_1001", "reflect": "reflect_1001", "wrap": "wrap", "clamp": "clamp",
            "edge": "clamp", "constant": "constant", "pad": "constant"}
_MORPH_BORDERS = {"constant": "constant", "replicate": "clamp", "reflect": "reflect_1001",
                  "reflect_101": "reflect_101", "wrap": "wrap"}
_FILTER_TYPES = {"cpu": (torch.uint8, torch.int16, torch.uint16, torch.float32),
                 "gpu": (torch.uint8, torch.int8, torch.int16, torch.uint16, torch.float16, torch.float32)}
_LAPLACIAN_TYPES = (torch.uint8, torch.int8, torch.uint16, torch.int16, torch.uint32, torch.int32, torch.int64,
                    torch.float16, torch.float32)
_CV_TYPES = (torch.uint8, torch.int16, torch.uint16, torch.float32)
_CV_LAYOUTS = ("HW", "HWC", "CHW")
_MAX_LAPLACIAN_WINDOW = 31
_MAX_GRID = 2 ** 24  # elements of one median chunk's gathered windows


# ---------------------------------------------------------------------------------------------
# Shared pieces: types, grids, borders, per-axis arguments


def _check_type(op, dtype, accepted):
    if dtype not in accepted:
        names = ", ".join(str(types.to_dali_type(d)).split(".")[-1] for d in accepted)
        raise op.error(f"input type {types.to_dali_type(dtype)} is not supported on the {op.spec.device}; give "
                       f"{names}", TypeError)


def _out_dtype(op, dtype_arg, in_dtype):
    """The `dtype` argument: the input's type (default) or FLOAT."""
    if dtype_arg is None:
        return in_dtype
    out = types.to_torch_type(dtype_arg)
    if out not in (in_dtype, torch.float32):
        raise op.error(f"argument 'dtype' = {dtype_arg}: the output type must be the input's "
                       f"({types.to_dali_type(in_dtype)}) or FLOAT", ValueError)
    return out


def _grid(x, first, count, batched):
    """`x` as [N, outer, *spatial, inner] (N = 1 for a single sample)."""
    n, shape = (x.shape[0], x.shape[1:]) if batched else (1, x.shape)
    outer = int(np.prod(shape[:first], dtype=np.int64))
    inner = int(np.prod(shape[first + count:], dtype=np.int64))
    return x.reshape(n, outer, *shape[first:first + count], inner)


def _ungrid(y, shape, first, count, batched):
    """A grid back in its sample's (or batch's) shape, with the spatial extents of `y`."""
    lead = 1 if batched else 0
    spatial = list(y.shape[2:2 + count])
    return y.reshape(*shape[:lead + first], *spatial, *shape[lead + first + count:])


def border_index(border, start, length, n):
    """Source indices of positions start .. start + length - 1 of an axis of extent n under
    `border`; -1 outside it for 'constant'."""
    i = np.arange(start, start + length, dtype=np.int64)
    if border == "clamp":
        return np.clip(i, 0, n - 1)
    if border == "wrap":
        return i % n
    if border == "reflect_1001":
        i = i % (2 * n)
        return np.where(i >= n, 2 * n - 1 - i, i)
    if border == "reflect_101":
        if n == 1:
            return np.zeros_like(i)
        period = 2 * (n - 1)
        i = i % period
        return np.where(i >= n, period - i, i)
    return np.where((i >= 0) & (i < n), i, -1)


def _bordered(x, axis, index, fill):
    """`x` gathered along `axis` at `index`; -1 entries take `fill` (broadcastable to x)."""
    out = x.index_select(axis, torch.from_numpy(np.maximum(index, 0)).to(x.device))
    outside = index < 0
    if outside.any():
        shape = [1] * x.dim()
        shape[axis] = len(index)
        mask = torch.from_numpy(outside).to(x.device).view(shape)
        out = torch.where(mask, torch.as_tensor(fill, dtype=out.dtype, device=x.device), out)
    return out


def _axis_rows(op, args, name, n, k, dtype=np.int64):
    """Argument `name` as [n, k]: one value for every axis, or k, per sample or for all."""
    v = args.batch(name)
    rows = list(v) if args.is_per_sample(name) else [v]
    out = []
    for i, row in enumerate(rows):
        row = np.asarray(row, dtype).ravel()
        if len(row) not in (1, k):
            where = f"sample {i}: " if args.is_per_sample(name) else ""
            raise op.error(f"{where}argument '{name}' = {row.tolist()} must have 1 or {k} values", ValueError,
                           sample=i if args.is_per_sample(name) else None)
        out.append(np.broadcast_to(row, (k,)))
    return np.broadcast_to(np.stack(out), (n, k))


def _samples_or_batch(batch, shared):
    """[(tensor, batched)]: the dense batch as one array where the arguments are shared, else
    each sample alone."""
    if shared and batch.is_dense_tensor():
        return [(batch.as_torch(), True)]
    return [(s, False) for s in batch.as_torch_list()]


def _as_list(outs):
    """Results of `_samples_or_batch` items as a list of samples (or the dense tensor)."""
    if len(outs) == 1 and outs[0][1]:
        return outs[0][0]
    return [o for o, _ in outs]


# ---------------------------------------------------------------------------------------------
# filter


def _filter_borders_ok(v):
    return None if v.lower() in _BORDERS else f"is not one of {sorted(set(_BORDERS.values()))}"


def _correlate(x, weights, anchors, border, fill, valid):
    """x [N, outer, *spatial, inner] float32, weights [N, *filter] float32, one anchor per axis:
    sum over the filter's taps of weight * the shifted input, borders as asked (none in 'valid'
    mode, where the output shrinks by filter - 1)."""
    k = weights.dim() - 1
    fshape = weights.shape[1:]
    if x.numel() == 0:  # nothing to read: an empty output of the right shape
        spatial = [x.shape[2 + d] - (fshape[d] - 1 if valid else 0) for d in range(k)]
        return x.new_zeros(*x.shape[:2], *spatial, x.shape[-1], dtype=torch.float32)
    if not valid:
        for d in range(k):
            n = x.shape[2 + d]
            x = _bordered(x, 2 + d, border_index(border, -int(anchors[d]), n + fshape[d] - 1, n), fill)
    out_shape = [x.shape[2 + d] - fshape[d] + 1 for d in range(k)]
    taps = weights.reshape(len(weights), -1)
    bshape = (len(weights),) + (1,) * (x.dim() - 1)
    acc = torch.zeros(*x.shape[:2], *out_shape, x.shape[-1], dtype=torch.float32, device=x.device)
    for t, tap in enumerate(itertools.product(*(range(f) for f in fshape))):
        window = x[(slice(None), slice(None)) + tuple(slice(o, o + e) for o, e in zip(tap, out_shape))]
        acc += window * taps[:, t].view(bshape)
    return acc


@register("filter", devices=("cpu", "gpu"), inputs=(2, 3),
          deprecated_names=("experimental.filter",), input_names=("data", "filter", "fill_value"), args=[
              Arg("anchor", INTS, [-1], "The filter's position over each output point, one value per "
                  "filter axis (or one for all): output x takes the input from x - anchor; -1: the "
                  "filter's middle (rounded down). Ignored in 'valid' mode.", per_sample=True, per_frame=True),
              Arg("border", STR, "reflect_101", "Out-of-bound filter positions: 'reflect_101' (dcb|abcd), "
                  "'reflect_1001' (cba|abcd), 'wrap', 'clamp' or 'constant' (the third input, 0 when "
                  "absent).", check=_filter_borders_ok),
              Arg("mode", STR, "same", "'same': output of the input's size; 'valid': only where the filter "
                  "lies within the input (smaller by filter - 1).",
                  check=lambda v: None if v.lower() in ("same", "valid") else "is not 'same' or 'valid'"),
              Arg("dtype", DTYPE, None, "Output type: the input's (default) or FLOAT."),
          ])
class Filter(Operator):
    """Correlate images (HWC, CHW, HW), sequences (FHWC, ...; per-frame filters through
    fn.per_frame) and volumes with a user filter (float32, one per sample), float32
    accumulation; integer outputs are rounded and saturated."""

    def plan(self, inputs):
        self.border = _BORDERS[self.spec.args["border"].lower()]
        self.valid = self.spec.args["mode"].lower() == "valid"
        return super().plan(inputs)[0], frame_by_frame(self, self.step)

    def step(self, inputs, args, ctx):
        batch, filters = inputs[0], inputs[1]
        n = len(batch)
        if len(filters) != n:
            raise self.error(f"the filter input has {len(filters)} samples, the data {n}", ValueError)
        if n == 0:
            return [batch]
        images = batch.as_torch_list()
        ndim = self.check_rank(images)
        _check_type(self, images[0].dtype, _FILTER_TYPES[self.spec.device])
        first, count = spatial_axes(self, batch.layout(), ndim)
        if count not in (2, 3):
            raise self.error(f"samples with {count} spatial axes are not supported; give 2 (images) or 3 "
                             "(volumes)", ValueError)
        out_dtype = _out_dtype(self, args["dtype"], images[0].dtype)
        kernels = self._filters(filters, images, first, count)
        fills = self._fills(inputs[2] if len(inputs) > 2 else None, images, n)
        anchors = _axis_rows(self, args, "anchor", n, count)
        anchors = np.where(anchors == -1, kernels.shapes // 2, anchors)
        bad = (anchors < 0) | (anchors >= kernels.shapes)
        if bad.any() and not self.valid:
            i = int(np.argwhere(bad)[0][0])
            raise self.error(f"sample {i}: argument 'anchor' = {anchors[i].tolist()} must lie within the filter "
                             f"of shape {kernels.shapes[i].tolist()} (or be -1)", ValueError, sample=i)
        shared = kernels.dense is not None and (anchors == anchors[0]).all()
        outs = []
        for k, (x, batched) in enumerate(_samples_or_batch(batch, shared)):
            w = kernels.dense if batched else kernels.samples[k][None]
            fill = fills.view(-1, *[1] * (count + 2)) if batched else fills[k]
            y = _correlate(_grid(x, first, count, batched).float(), w, anchors[k], self.border, fill, self.valid)
            outs.append((convert_saturate(_ungrid(y, x.shape, first, count, batched), out_dtype), batched))
        return [TensorList.make(_as_list(outs), batch.layout(), device=batch.device)]

    def _filters(self, filters, images, first, count):
        """The filters, checked: float32 of the samples' spatial rank, non-empty, no larger
        than the sample in 'valid' mode. Returns their shapes [N, count], the samples (on the
        data's device) and one [N, *shape] tensor where they share a shape."""
        samples = filters.as_torch_list()
        for i, (f, im) in enumerate(zip(samples, images)):
            if f.dtype != torch.float32:
                raise self.error(f"filter {i} has type {types.to_dali_type(f.dtype)}; filters must be FLOAT",
                                 TypeError, sample=i)
            if f.dim() != count:
                raise self.error(f"filter {i} has {f.dim()} dims, the samples {count} spatial dims; they must "
                                 "match", ValueError, sample=i)
            if f.numel() == 0:
                raise self.error(f"filter {i} has shape {tuple(f.shape)}; give a non-empty filter", ValueError,
                                 sample=i)
            if self.valid and any(e > s for e, s in zip(f.shape, im.shape[first:first + count])):
                raise self.error(f"filter {i} of shape {tuple(f.shape)} is larger than sample {i} "
                                 f"{tuple(im.shape)}, which mode 'valid' does not allow", ValueError, sample=i)
        device = images[0].device
        samples = [f.to(device) for f in samples]
        shapes = np.array([f.shape for f in samples], np.int64)
        dense = torch.stack(samples) if (shapes == shapes[0]).all() else None
        return _Kernels(shapes, samples, dense)

    def _fills(self, fills, images, n):
        """The constant border's value per sample, as float32 [N] (0 without the input)."""
        if fills is None:
            return torch.zeros(n, dtype=torch.float32, device=images[0].device)
        values = fills.as_torch_list()
        for i, v in enumerate(values):
            if v.dtype != images[0].dtype or v.dim() != 0:
                raise self.error(f"fill_value {i} is {types.to_dali_type(v.dtype)} of shape {tuple(v.shape)}; "
                                 f"give a scalar of the data's type ({types.to_dali_type(images[0].dtype)})",
                                 TypeError, sample=i)
        return torch.stack(values).float().to(images[0].device)


class _Kernels:
    def __init__(self, shapes, samples, dense):
        self.shapes, self.samples, self.dense = shapes, samples, dense


# ---------------------------------------------------------------------------------------------
# laplacian


def _laplacian_sizes_ok(lo):
    def check(v):
        if all(lo <= s <= _MAX_LAPLACIAN_WINDOW and s % 2 == 1 for s in v):
            return None
        return f"must be odd and from {lo} to {_MAX_LAPLACIAN_WINDOW}"
    return check


def smoothing_window(size):
    """DALI's smoothing window of an odd size: a row of Pascal's triangle, summed in float32."""
    row = np.ones(1, np.float32)
    for _ in range(size - 1):
        row = np.concatenate([row[:1], row[:-1] + row[1:], row[-1:]])
    return row


def derivative_window(size):
    """DALI's second-derivative window of an odd size >= 3: the smoothing window of size - 2
    convolved twice with [-1, 1], in float32."""
    row = smoothing_window(size - 2)
    for _ in range(2):
        row = np.concatenate([-row[:1], row[:-1] - row[1:], row[-1:]])
    return row


@register("laplacian", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("window_size", INTS, [3], "Derivative window size: one odd value from 3 to 31, or one per data "
        "axis.", per_sample=True, per_frame=True, check=_laplacian_sizes_ok(3)),
    Arg("smoothing_size", INTS, None, "Smoothing window size along each axis (odd, 1 to 31; 1: no "
        "smoothing): one value, or one per data axis; the derivative's window size by default.",
        per_sample=True, per_frame=True, check=_laplacian_sizes_ok(1)),
    Arg("scale", FLOATS, None, "Factors of the partial derivatives: one value, or one per data axis "
        "(1.0 when not given).", per_sample=True, per_frame=True),
    Arg("normalized_kernel", BOOL, False, "Scale each partial derivative by 2^(-s + n + 2), s the sum of "
        "its window sizes, n the number of data axes. Excludes `scale`."),
    Arg("dtype", DTYPE, None, "Output type: the input's (default) or FLOAT."),
])
class Laplacian(Operator):
    """The Laplacian of images, sequences and volumes: the sum over the data axes of second
    partial derivatives, each a separable convolution (a derivative window along its axis,
    smoothing windows along the others), float32 throughout."""

    def plan(self, inputs):
        if self.spec.args["normalized_kernel"] and ("scale" in self.spec.arg_input_names or
                                                    self.spec.args["scale"] is not None):
            raise self.error("argument 'scale' cannot be given when 'normalized_kernel' is True", ValueError)
        return super().plan(inputs)[0], frame_by_frame(self, self.step)

    def step(self, inputs, args, ctx):
        from ..kernels.separable_conv import separable_conv

        batch = inputs[0]
        n = len(batch)
        if n == 0:
            return [batch]
        images = batch.as_torch_list()
        ndim = self.check_rank(images)
        _check_type(self, images[0].dtype, _LAPLACIAN_TYPES)
        first, count = spatial_axes(self, batch.layout(), ndim)
        out_dtype = _out_dtype(self, args["dtype"], images[0].dtype)
        sizes = self._sizes(args, n, count)
        scales = self._scales(args, sizes, n, count)
        shared = not any(args.is_per_sample(a) for a in ("window_size", "smoothing_size", "scale"))
        outs = []
        for k, (x, batched) in enumerate(_samples_or_batch(batch, shared)):
            if x.dtype not in (torch.uint8, torch.float16, torch.float32):
                x = x.float()  # DALI's float32 arithmetic on wider types: exact to 16 bits
            total = x.float() if x.numel() == 0 else None
            for axis in range(count if total is None else 0):
                windows = np.concatenate([derivative_window(s) if a == axis else smoothing_window(s)
                                          for a, s in enumerate(sizes[k, axis])])
                part = separable_conv([x], torch.from_numpy(windows), sizes[k, axis].tolist(),
                                      first + batched, count, torch.float32)[0] * scales[k, axis]
                total = part if total is None else total + part
            outs.append((convert_saturate(total, out_dtype), batched))
        return [TensorList.make(_as_list(outs), batch.layout(), device=batch.device)]

    def _sizes(self, args, n, count):
        """[n, count, count] window sizes: [i, j] along axis j for the derivative along axis i."""
        deriv = _axis_rows(self, args, "window_size", n, count)
        sizes = np.repeat(deriv[:, :, None], count, axis=2)
        if args.batch("smoothing_size") is not None:
            smooth = _axis_rows(self, args, "smoothing_size", n, count)
            sizes = np.where(np.eye(count, dtype=bool), sizes, smooth[:, None, :])
        return sizes

    def _scales(self, args, sizes, n, count):
        """[n, count] float32 factors of the partial derivatives."""
        if args["normalized_kernel"]:
            return np.exp2(-(sizes.sum(axis=2) - count - 2).astype(np.float64)).astype(np.float32)
        if args.batch("scale") is None:
            return np.ones((n, count), np.float32)
        return _axis_rows(self, args, "scale", n, count, np.float64).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# median_blur, dilate, erode (CV-CUDA's on DALI's GPU; OpenCV's rules)


def _cv_grid_axes(op, batch, ndim):
    """(first, 2): where the H and W axes of the batch's HW, HWC or CHW images are."""
    layout = batch.layout() or {2: "HW", 3: "HWC"}.get(ndim, "")
    if layout not in _CV_LAYOUTS or len(layout) != ndim:
        raise op.error(f"input layout '{batch.layout()}' with samples of {ndim} dims is not supported; give "
                       "HW, HWC or CHW images, or FHWC or FCHW sequences", ValueError)
    return layout.index("H"), 2


def _work_type(x):
    """uint16 as int32 (torch has no max or median for it); other types as they are."""
    return x.to(torch.int32) if x.dtype == torch.uint16 else x


def _window_rows(op, args, name, n, check):
    """[n, 2] (width, height) sizes or positions (CV-CUDA's order), checked by `check`."""
    rows = _axis_rows(op, args, name, n, 2)
    for i, row in enumerate(rows):
        problem = check(row)
        if problem:
            raise op.error(f"sample {i}: argument '{name}' = {row.tolist()} {problem}", ValueError, sample=i)
    return rows


class _Neighbourhood(Operator):
    """HW / HWC / CHW images and FHWC / FCHW sequences, each pixel from a window around it."""

    def plan(self, inputs):
        return super().plan(inputs)[0], frame_by_frame(self, self.step)

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        n = len(batch)
        if n == 0:
            return [batch]
        images = batch.as_torch_list()
        ndim = self.check_rank(images)
        _check_type(self, images[0].dtype, _CV_TYPES)
        first, count = _cv_grid_axes(self, batch, ndim)
        params = self.params(args, n)
        shared = all(not args.is_per_sample(a) for a in self.per_sample_args)
        outs = []
        for k, (x, batched) in enumerate(_samples_or_batch(batch, shared)):
            grid = _work_type(_grid(x, first, count, batched))
            y = self.apply(grid, *(p[k] for p in params)) if grid.numel() else grid
            outs.append((_ungrid(y, x.shape, first, count, batched).to(x.dtype), batched))
        return [TensorList.make(_as_list(outs), batch.layout(), device=batch.device)]


def _median(x, width, height):
    """The median of each (height, width) window of x [N, outer, H, W, inner], replicated
    borders; in chunks of rows, so the gathered windows stay within _MAX_GRID elements."""
    h, w = x.shape[2], x.shape[3]
    x = _bordered(x, 2, border_index("clamp", -(height // 2), h + height - 1, h), 0)
    x = _bordered(x, 3, border_index("clamp", -(width // 2), w + width - 1, w), 0)
    per_row = max(1, x[:, :, :1].numel() * height * width)
    step = max(1, _MAX_GRID // per_row)
    rows = []
    for top in range(0, h, step):
        part = x[:, :, top:min(h, top + step) + height - 1]
        windows = part.unfold(2, height, 1).unfold(3, width, 1)  # [N, outer, rows, W, inner, height, width]
        rows.append(windows.flatten(-2).median(-1).values)
    return torch.cat(rows, 2) if rows else x[:, :, :0, :w]


@register("experimental.median_blur", devices=("cpu", "gpu"), inputs=(1, 1),
          args=[
              Arg("window_size", INTS, [3, 3], "Window (width, height): odd sizes, or one for both.",
                  per_sample=True),
          ])
class MedianBlur(_Neighbourhood):
    """Median blur: each pixel (per channel) becomes the median of the window around it,
    borders replicated. DALI has it on the GPU only; this runs on both devices."""

    per_sample_args = ("window_size",)

    def params(self, args, n):
        sizes = _window_rows(self, args, "window_size", n,
                             lambda r: None if all(s >= 1 and s % 2 == 1 for s in r) else "must be odd and positive")
        return sizes[:, 0], sizes[:, 1]

    def apply(self, x, width, height):
        return _median(x, int(width), int(height))


def _morphology_border_ok(v):
    return None if v in _MORPH_BORDERS else f"is not one of {list(_MORPH_BORDERS)}"


_MORPHOLOGY_ARGS = [
    Arg("mask_size", INTS, [3, 3], "Structuring element (width, height), a rectangle; one value for both.",
        per_sample=True, per_frame=True),
    Arg("anchor", INTS, [-1, -1], "The element's (x, y) over each pixel: the window starts anchor pixels "
        "before it; -1: the middle (rounded down).", per_sample=True, per_frame=True),
    Arg("iterations", INT, 1, "How many times to apply the operation.",
        check=lambda v: None if v >= 1 else "must be >= 1"),
    Arg("border_mode", STR, "constant", "Pixels outside the image: 'constant' (never chosen), 'replicate', "
        "'reflect' (cba|abc), 'reflect_101' (cb|abc) or 'wrap'.", check=_morphology_border_ok),
]


class _Morphology(_Neighbourhood):
    per_sample_args = ("mask_size", "anchor")
    reduce = None  # torch.amax or torch.amin

    def params(self, args, n):
        sizes = _window_rows(self, args, "mask_size", n,
                             lambda r: None if all(s >= 1 for s in r) else "must be positive")
        anchors = _axis_rows(self, args, "anchor", n, 2)
        anchors = np.where(anchors == -1, sizes // 2, anchors)
        bad = (anchors < 0) | (anchors >= sizes)
        if bad.any():
            i = int(np.argwhere(bad)[0][0])
            raise self.error(f"sample {i}: argument 'anchor' = {anchors[i].tolist()} must lie within the mask "
                             f"{sizes[i].tolist()} (or be -1)", ValueError, sample=i)
        return sizes[:, 0], sizes[:, 1], anchors[:, 0], anchors[:, 1]

    def apply(self, x, width, height, ax, ay):
        border = _MORPH_BORDERS[self.spec.args["border_mode"]]
        info = torch.finfo(x.dtype) if x.dtype.is_floating_point else torch.iinfo(x.dtype)
        neutral = info.min if self.reduce is torch.amax else info.max  # a constant border never wins
        for _ in range(self.spec.args["iterations"]):
            for axis, size, anchor in ((2, int(height), int(ay)), (3, int(width), int(ax))):
                extent = x.shape[axis]
                x = _bordered(x, axis, border_index(border, -anchor, extent + size - 1, extent), neutral)
                x = self.reduce(x.unfold(axis, size, 1), -1)
        return x


@register("experimental.dilate", devices=("cpu", "gpu"), inputs=(1, 1),
          args=_MORPHOLOGY_ARGS)
class Dilate(_Morphology):
    """Dilation: each pixel (per channel) becomes the maximum over the rectangular structuring
    element placed at its anchor. DALI has it on the GPU only; this runs on both devices."""

    reduce = torch.amax


@register("experimental.erode", devices=("cpu", "gpu"), inputs=(1, 1),
          args=_MORPHOLOGY_ARGS)
class Erode(_Morphology):
    """Erosion: each pixel (per channel) becomes the minimum over the rectangular structuring
    element placed at its anchor. DALI has it on the GPU only; this runs on both devices."""

    reduce = torch.amin
