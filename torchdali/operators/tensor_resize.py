"""fn.tensor_resize: resize any of a tensor's dimensions (`sizes` or `scales` over `axes`) with
DALI's filters, output sizes and ROI semantics. The sizes come from resize.py's
`output_sizes`, extended to k axes. The pixels come from the `torchdali::resize` kernel,
which resamples two adjacent dimensions with the dimensions before them as a batch of planes
and those after them as channels: as in DALI, the resized block is the shortest run of
dimensions that covers every changed one (at least 2, at most 3); a block of 3 is resampled
as its last two dimensions, then its first (through float32, as DALI's separable passes do)."""
import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, FLOATS, INTS, LAYOUT, STR, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator
from .conversions import convert_saturate
from .images import refuse_huge_outputs
from .resize import _MODES, MAX_ROI_EXTENT, RESAMPLING_ARGS, _finite, filters, output_sizes
from .windows import round_half_away

_F32 = np.float32
_KERNEL_TYPES = (torch.uint8, torch.float16, torch.float32)
_TYPES = _KERNEL_TYPES + (torch.int16, torch.uint16)  # the integers resampled through float32
_ROUNDING = {"round": round_half_away, "truncate": lambda v: np.trunc(v).astype(np.int64),
             "ceil": lambda v: np.ceil(v).astype(np.int64)}


@register("tensor_resize", devices=("cpu", "gpu"), inputs=(1, 1), deprecated_names=("experimental.tensor_resize",),
          args=[
    a for a in RESAMPLING_ARGS if a.name != "dtype"] + [
    Arg("dtype", DTYPE, None, "Output type: the input's or FLOAT."),
    Arg("sizes", FLOATS, None, "Output sizes of the `axes` (0: keep the aspect ratio); not with `scales`.",
        per_sample=True, check=_finite),
    Arg("scales", FLOATS, None, "Scale factors of the `axes`; not with `sizes`.", per_sample=True, check=_finite),
    Arg("axes", INTS, None, "The dimensions that sizes, scales, max_size, alignment and the ROI refer to "
        "(negative: from the back); all by default."),
    Arg("axis_names", LAYOUT, None, "The axes by their names in the input layout (instead of `axes`)."),
    Arg("alignment", FLOATS, [0.5], "The point of the ROI that keeps its place when a fractional output size "
        "is rounded: 0 its start, 0.5 its center, 1 its end (one value, or one per axis).", per_sample=True,
        check=_finite),
    Arg("size_rounding", STR, "round", "Rounding of sizes from scales: 'round' (half away from zero), "
        "'truncate' or 'ceil'.", choices=tuple(_ROUNDING)),
    Arg("mode", STR, "default", "'default', 'stretch', 'not_larger' or 'not_smaller'.", choices=_MODES),
    Arg("max_size", FLOATS, None, "Limit of the output sizes (one value, or one per axis).", check=_finite),
    Arg("subpixel_scale", BOOL, True, "Adjust the ROI to keep the scale of fractional output sizes."),
    Arg("roi_start", FLOATS, None, "Input ROI origin, one value per axis.", per_sample=True, check=_finite),
    Arg("roi_end", FLOATS, None, "Input ROI end, one value per axis.", per_sample=True, check=_finite),
    Arg("roi_relative", BOOL, False, "ROI coordinates relative to the input size (0..1)."),
])
class TensorResize(Operator):
    """Resize tensors of any rank (images, volumes, sequences, signals) along chosen axes."""

    def plan(self, inputs):
        a, names = self.spec.args, self.spec.arg_input_names
        given = lambda n: a.get(n) is not None or n in names  # noqa: E731
        if given("sizes") == given("scales"):
            raise self.error("give exactly one of `sizes` and `scales`", ValueError)
        if given("scales") and a["mode"] in ("not_larger", "not_smaller"):
            raise self.error(f"`scales` cannot be used with mode='{a['mode']}'", ValueError)
        if given("roi_start") != given("roi_end"):
            raise self.error("`roi_start` and `roi_end` must be given together", ValueError)
        if a["axes"] is not None and a["axis_names"] is not None:
            raise self.error("`axes` and `axis_names` are mutually exclusive", ValueError)
        self._size_arg = "sizes" if given("sizes") else "scales"
        self._has_roi = given("roi_start")
        spec = inputs[0]
        if spec.dtype is not None:
            self._out_dtype(spec.dtype)
        out = types.to_torch_type(a["dtype"]) if a["dtype"] is not None else spec.dtype
        return [BatchSpec(spec.device, out, spec.ndim, spec.layout)], self.step

    def _out_dtype(self, in_dtype):
        """The output type for inputs of `in_dtype`; an error for types not supported."""
        if in_dtype not in _TYPES:
            names = ", ".join(types.to_dali_type(t).name for t in _TYPES)
            raise self.error(f"input type {types.to_dali_type(in_dtype).name} is not supported; supported: {names}",
                             TypeError)
        dtype = self.spec.args["dtype"]
        out = in_dtype if dtype is None else types.to_torch_type(dtype)
        if out not in (in_dtype, torch.float32):
            raise self.error(f"dtype must be the input's ({types.to_dali_type(in_dtype).name}) or FLOAT, got "
                             f"{dtype.name}", ValueError)
        return out

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        n = len(batch)
        if n == 0:
            return [batch]
        try:
            shapes = batch.sample_shapes()
        except ValueError:
            raise self.error("the samples differ in their number of dims", ValueError) from None
        if shapes.shape[1] < 1:
            raise self.error("the input must be at least 1D", ValueError)
        in_dtype = batch.as_torch_list()[0].dtype
        out_dtype = self._out_dtype(in_dtype)
        axes = self._axes(batch.layout(), shapes.shape[1])
        sizes, lo, hi = self._params(args, shapes, axes)
        refuse_huge_outputs(self, sizes[:, axes], [self._size_arg])
        first, count = self._block(shapes, sizes, lo, hi)
        out = self._resample(batch, shapes, sizes, lo, hi, (first, count), filters(args, n), args["antialias"],
                             out_dtype)
        return [TensorList.make(out, batch.layout(), device=batch.device)]

    def _axes(self, layout, ndim):
        """The axes the arguments refer to, as indices in 0..ndim-1."""
        a = self.spec.args
        if a["axis_names"] is not None:
            missing = [c for c in a["axis_names"] if c not in layout]
            if missing:
                raise self.error(f"axis_names '{a['axis_names']}': {missing} not in the input layout '{layout}'",
                                 ValueError)
            return [layout.index(c) for c in a["axis_names"]]
        if a["axes"] is None:
            return list(range(ndim))
        bad = [d for d in a["axes"] if not -ndim <= d < ndim]
        if bad:
            raise self.error(f"axes {bad} out of range [{-ndim}, {ndim - 1}] for samples of {ndim} dims",
                             IndexError)
        axes = [d % ndim for d in a["axes"]]
        if not axes or len(set(axes)) != len(axes):
            raise self.error(f"`axes` {list(a['axes'])} must name each resized axis once (at least one)", ValueError)
        return axes

    def _per_axis(self, args, name, axes, default):
        """Argument `name` over all dims, [N, ndim] float64 (`default`'s shape): its values (one,
        or one per axis, as float32) at `axes`, `default` elsewhere."""
        n = len(default)
        rows = args.rows(name, n)
        if rows.shape[1] not in (1, len(axes)):
            raise self.error(f"`{name}` must have one value or one per axis ({len(axes)}), got {rows.shape[1]}",
                             ValueError)
        full = np.array(default, np.float64)
        full[:, axes] = np.broadcast_to(rows.astype(_F32), (n, len(axes)))
        return full

    def _params(self, args, shapes, axes):
        """(sizes [N, ndim] int64, lo, hi [N, ndim] float32): each sample's output size and the
        input window it samples, as DALI computes them."""
        a = self.spec.args
        extent = shapes.astype(np.float64)
        if self._size_arg == "sizes":
            requested = self._per_axis(args, "sizes", axes, extent)
        else:
            requested = self._per_axis(args, "scales", axes, np.ones_like(extent)).astype(_F32) * shapes.astype(_F32)
        lo, hi = self._roi(args, extent, axes)
        max_size = None
        if a["max_size"] is not None:
            ms = list(a["max_size"])
            if len(ms) not in (1, len(axes)):
                raise self.error(f"`max_size` must have one value or one per axis ({len(axes)}), got {len(ms)}",
                                 ValueError)
            max_size = np.full(shapes.shape[1], np.nextafter(_F32(2 ** 31 - 1), _F32(0)), np.float64)
            max_size[axes] = np.broadcast_to(np.asarray(ms, _F32), (len(axes),))
        alignment = self._per_axis(args, "alignment", axes, np.full_like(extent, 0.5))
        return output_sizes(self, requested, lo, hi, a["mode"], max_size, a["subpixel_scale"], alignment,
                            _ROUNDING[a["size_rounding"]], empty=(shapes == 0).any(axis=1))

    def _roi(self, args, extent, axes):
        """The input windows (lo, hi), [N, ndim] each: the ROI arguments where the extent is not 0,
        widened to 1e-3 where degenerate, else the whole extent."""
        if not self._has_roi:
            return np.zeros_like(extent), extent
        relative = self.spec.args["roi_relative"]
        lo = self._per_axis(args, "roi_start", axes, np.zeros_like(extent))
        hi = self._per_axis(args, "roi_end", axes, np.ones_like(extent) if relative else extent)
        if relative:
            lo, hi = lo * extent, hi * extent
        width = np.abs(hi - lo)
        if not (width <= MAX_ROI_EXTENT).all():  # NaN too
            i = int(np.argmax(~(width <= MAX_ROI_EXTENT).all(axis=1)))
            raise self.error(f"`roi_start`/`roi_end` give sample {i} a window of {width[i].tolist()}; each extent "
                             f"must be finite and at most {MAX_ROI_EXTENT:,} (the filter reads all of it)",
                             ValueError, sample=i)
        tiny = width < 1e-3
        off = np.where(lo <= hi, 0.5e-3, -0.5e-3)
        lo, hi = np.where(tiny, lo - off, lo), np.where(tiny, hi + off, hi)
        keep = extent > 0
        return np.where(keep, lo, 0.0), np.where(keep, hi, extent)

    def _block(self, shapes, sizes, lo, hi):
        """(first dim, count) of the resampled dims, as DALI picks them: the dims, at least 2
        (leading 1s added to 1D samples), less the leading and trailing ones no sample changes."""
        ndim = shapes.shape[1]
        pad = max(0, 2 - ndim)
        unchanged = [True] * pad + [bool(((sizes[:, d] == shapes[:, d]) & (np.trunc(lo[:, d]) == 0) &
                                          (np.trunc(hi[:, d]) == shapes[:, d])).all()) for d in range(ndim)]
        first, end, budget = 0, ndim + pad, max(0, ndim + pad - 2)
        while budget and unchanged[first]:
            first, budget = first + 1, budget - 1
        while budget and end - 1 > first and unchanged[end - 1]:
            end, budget = end - 1, budget - 1
        if end - first > 3:
            raise self.error(f"can resize at most 3 adjacent dims; the dims changed span {end - first} (dims "
                             f"{first - pad} to {end - 1 - pad}; the dims between the first and the last changed "
                             "one count too)", ValueError)
        return first - pad, end - first

    def _resample(self, batch, shapes, sizes, lo, hi, block, interp, antialias, out_dtype):
        """The output samples: one [N, ...] tensor where they have one shape and the kernel wrote
        them as one, else one tensor per sample."""
        first, count = block
        n, pad = len(shapes), max(0, -first)
        grow = lambda a, fill: np.concatenate([np.full((n, pad), fill, a.dtype), a], axis=1)  # noqa: E731
        full, f = grow(shapes, 1), first + pad
        outer, inner = full[:, :f].prod(axis=1), full[:, f + count:].prod(axis=1)
        block_params = (v[:, f:f + count] for v in (full, grow(sizes, 1), grow(lo, 0.0), grow(hi, 1.0)))
        passes = _passes(outer, inner, *block_params)
        empty = (shapes == 0).any(axis=1)
        samples = batch.as_torch_list()
        data = batch.dense_tensor() if not empty.any() else None
        if data is None:
            data = [None if e else s for s, e in zip(samples, empty)]
        if samples[0].dtype not in _KERNEL_TYPES:
            data = data.float() if isinstance(data, torch.Tensor) else [None if s is None else s.float() for s in data]
        last = out_dtype if out_dtype in _KERNEL_TYPES else torch.float32
        if not empty.all():
            for k, (view, s, l, h) in enumerate(passes):
                data = _resize_pass(data, view, s, l, h, interp, antialias,
                                    last if k == len(passes) - 1 else torch.float32)
        return _finish(data, sizes, out_dtype, samples[0].device)


def _passes(outer, inner, extent, size, lo, hi):
    """The kernel passes over a block of 2 or 3 dims ([N, count] extents, output sizes and
    windows): each pass's view of the samples ([N, 4] (planes, A, B, channels)) and the (A, B)
    sizes and windows. A block of 3 takes two: its last two dims over all planes of the first,
    then its first over all its columns (the other two made one channel axis)."""
    n = len(outer)
    if extent.shape[1] == 2:
        return [(np.stack([outer, extent[:, 0], extent[:, 1], inner], axis=1), size, lo, hi)]
    one = np.ones(n, np.int64)
    first = np.stack([outer * extent[:, 0], extent[:, 1], extent[:, 2], inner], axis=1)
    second = np.stack([outer, extent[:, 0], one, size[:, 1] * size[:, 2] * inner], axis=1)
    column = lambda v, fill: np.stack([v[:, 0], np.full(n, fill, v.dtype)], axis=1)  # noqa: E731
    return [(first, size[:, 1:], lo[:, 1:], hi[:, 1:]), (second, column(size, 1), column(lo, 0), column(hi, 1))]


def _resize_pass(data, view, sizes, lo, hi, interp, antialias, out_dtype):
    """One kernel pass: each sample i viewed as view[i] = (planes, A, B, channels), its (A, B)
    resized to sizes[i] over the window lo[i]..hi[i]. `data`: a dense [N, ...] tensor or one
    tensor per sample (None: empty, skipped); the result has the same form, [N, planes, a, b,
    channels] or [planes, a, b, channels] each."""
    n = len(view)
    frames = view[:, 0]
    rows = np.repeat(np.arange(n), frames)
    rois = torch.from_numpy(np.concatenate([lo, hi], axis=1)[rows].astype(_F32))
    if isinstance(data, torch.Tensor):
        images = data.reshape(-1, *view[0, 1:].tolist())
        out = _kernel(images, sizes[rows], rois, interp[rows], antialias, out_dtype)
        if isinstance(out, torch.Tensor):
            return out.reshape(n, int(frames[0]), *out.shape[1:])
        return [torch.stack(out[i * frames[0]:(i + 1) * frames[0]]) for i in range(n)]
    live = [i for i in range(n) if data[i] is not None]
    offsets = np.concatenate([[0], np.cumsum(frames)])
    result = [None] * n
    for c in np.unique(view[live, 3]):  # the kernel takes one number of channels per call
        group = [i for i in live if view[i, 3] == c]
        images = [p for i in group for p in data[i].reshape(*view[i].tolist()).unbind(0)]
        picked = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in group])
        out = _kernel(images, sizes[rows[picked]], rois[picked], interp[rows[picked]], antialias, out_dtype)
        starts = np.cumsum([0] + [int(frames[i]) for i in group])
        if isinstance(out, torch.Tensor) and len(group) == n and (frames == frames[0]).all():
            return out.reshape(n, int(frames[0]), *out.shape[1:])
        for k, i in enumerate(group):
            part = out[starts[k]:starts[k + 1]]
            result[i] = part if isinstance(out, torch.Tensor) else torch.stack(part)
    return result


def _kernel(images, sizes, rois, interp, antialias, out_dtype):
    """The resize kernel over `images` (a dense tensor or a list): a dense output where the sizes agree."""
    from ..kernels.resize import resize as resize_kernel  # loads the extension on first use

    dense = bool((sizes == sizes[0]).all())
    return resize_kernel(images, sizes.tolist(), rois, torch.from_numpy(np.ascontiguousarray(interp)), antialias,
                         out_dtype, dense=dense)


def _finish(data, sizes, out_dtype, device):
    """The resampled planes reshaped to the output shapes and converted to `out_dtype` (with
    DALI's rounding and saturation); zeros for empty samples."""
    if isinstance(data, torch.Tensor):
        if (sizes == sizes[0]).all():
            return convert_saturate(data.reshape(len(data), *sizes[0].tolist()), out_dtype)
        data = list(data.unbind(0))
    return [torch.zeros(s, dtype=out_dtype, device=device) if d is None else
            convert_saturate(d.reshape(s), out_dtype) for d, s in zip(data, sizes.tolist())]
