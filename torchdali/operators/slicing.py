"""fn.slice: a window of any rank, given by anchor/shape inputs or start/end/shape
arguments (absolute or relative), with DALI's rounding and out-of-bounds policies.

HWC uint8 batches sliced on H and W only run the `torchdali::crop_mirror_normalize`
kernel (one call per window size, exact for uint8); every other case is torch's narrow,
index_select and copy per sample into one dense batch when the window shapes agree."""

import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, FLOATS, INTS, LAYOUT, STR, Arg, register
from ..tensor_list import TensorList, to_torch_samples
from .base import BatchSpec, Operator
from .crop import cast_fill, crop_normalize, output_fill
from .images import image_batch
from .windows import round_half_away

_F32 = np.float32
_PAD = ("pad", "constant")
_INDEXED = ("edge", "clamp", "reflect", "reflect_1001", "reflect_101", "wrap")
POLICIES = ("error", "trim_to_shape") + _PAD + _INDEXED
# DALI's layout of samples that have none, for axis_names and the channel of fill_values.
_DEFAULT_LAYOUTS = {2: "HW", 3: "HWC", 4: "DHWC"}
_NAMED = ("start", "rel_start", "end", "rel_end", "shape", "rel_shape")

SLICE_ARGS = [
    Arg("start", INTS, None, "Start coordinates, one per slice axis.", per_sample=True),
    Arg("rel_start", FLOATS, None, "Start coordinates as fractions of the extents.", per_sample=True),
    Arg("end", INTS, None, "End coordinates (exclusive).", per_sample=True),
    Arg("rel_end", FLOATS, None, "End coordinates as fractions of the extents.", per_sample=True),
    Arg("shape", INTS, None, "Extents of the slice.", per_sample=True),
    Arg("rel_shape", FLOATS, None, "Extents of the slice as fractions of the input's.", per_sample=True),
    Arg("axes", INTS, None, "Dimension indices the slice coordinates refer to (negative count from "
        "the back; empty: all). Default [1, 0]: (x, y) of HWC images.", per_sample=True),
    Arg("axis_names", LAYOUT, None, "Axis names the slice coordinates refer to (default 'WH'); "
        "exclusive with axes."),
    Arg("normalized_anchor", BOOL, True, "Floating-point anchor inputs are fractions of the extents "
        "(integer inputs are always absolute)."),
    Arg("normalized_shape", BOOL, True, "Floating-point shape inputs are fractions of the extents."),
]


class SliceWindows:
    """The slice windows of a whole batch from an operator's slice arguments or positional
    anchor and shape inputs, as DALI's NamedSliceAttr / PositionalSliceAttr compute them."""

    def __init__(self, op, arg_names=None):
        """`arg_names`: the operator's names of slice arguments it names otherwise (readers.numpy's
        roi_start for start, roi_axes for axes ...)."""
        spec = op.spec
        self.op = op
        self.arg = {n: n for n in _NAMED + ("axes",)}
        self.arg.update(arg_names or {})
        given = {n for n in _NAMED if self.arg[n] in spec.arg_input_names or spec.args.get(self.arg[n]) is not None}
        if {"start", "rel_start"} <= given:
            raise op.error(f"'{self.arg['start']}' and '{self.arg['rel_start']}' are mutually exclusive", ValueError)
        ends = given & {"end", "rel_end", "shape", "rel_shape"}
        if len(ends) > 1:
            choices = [self.arg[n] for n in ("end", "rel_end", "shape", "rel_shape")]
            raise op.error(f"{sorted(self.arg[n] for n in ends)} are mutually exclusive: give one of "
                           f"{', '.join(choices[:3])} and {choices[3]}", ValueError)
        self.named = given
        axes = self.arg["axes"]
        axes_given = axes in spec.arg_input_names or spec.args.get(axes) is not None
        if axes_given and spec.args.get("axis_names") is not None:
            raise op.error("'axes' and 'axis_names' are mutually exclusive", ValueError)
        names = spec.args.get("axis_names")
        self.names = None if axes_given else "WH" if names is None else names
        self.normalized = (spec.args.get("normalized_anchor", True), spec.args.get("normalized_shape", True))

    def check_inputs(self, num_inputs):
        """The slice is given by name or by the two extra inputs, not both, not neither."""
        if self.named and num_inputs > 1:
            raise self.op.error(f"slice arguments {sorted(self.named)} cannot be combined with the "
                                "positional anchor and shape inputs", ValueError)
        if not self.named and num_inputs != 3:
            raise self.op.error("give the slice as arguments (start/rel_start with end, rel_end, shape "
                                f"or rel_shape) or as anchor and shape inputs; got {num_inputs - 1} of "
                                "the positional inputs", ValueError)

    def windows(self, args, shapes, layout, positional=(), policy="error", rows=None):
        """Anchors and shapes ([N, ndim] int64) of the slices of inputs of `shapes` ([N, ndim]),
        after the out-of-bounds `policy`: from the slice arguments, or from `positional`, the
        anchor and shape input batches. `rows` are the samples' indices in the batch (default
        0..N-1): they pick the per-sample values and are the samples named in errors."""
        n, ndim = shapes.shape
        rows = np.arange(n) if rows is None else np.asarray(rows, np.int64)
        lo, hi = np.zeros((n, ndim)), shapes.astype(np.float64)
        # The `shape` argument (integers) is the slice's extent as given, not the difference of
        # two coordinates, which float64 rounds beyond 2**53 (DALI keeps it); NaN where the end
        # decides.
        size = np.full((n, ndim), np.nan)
        negative = np.zeros(n, bool)  # samples whose shape / rel_shape argument is below 0 (or NaN)
        given = [self._read(x, name) for x, name in zip(positional, ("anchor", "shape"))]
        for pos, axes in self._axis_groups(args, rows, ndim, layout):
            cells = np.ix_(pos, axes)
            if self.named:
                lo[cells], hi[cells], size[cells], negative[pos] = self._named(args, rows[pos], shapes[cells])
            else:
                lo[cells], hi[cells] = self._positional(given, rows[pos], shapes[cells])  # DALI rounds both ends
        self._check(args, rows, lo, hi, size, negative)
        anchor = round_half_away(lo)
        extent = np.where(np.isnan(size), round_half_away(hi) - anchor, round_half_away(np.nan_to_num(size)))
        self._check_end(rows, anchor, extent)
        return apply_policy(self.op, anchor, extent, shapes, policy, rows)

    def _axis_groups(self, args, rows, ndim, layout):
        """(positions, axes) pairs: the samples (positions in `rows`) whose coordinates refer
        to the dims `axes`. One group unless `axes` is an argument input that differs between
        samples; groups come in the order of their first sample, so errors name the first."""
        everyone = np.arange(len(rows))
        if self.names is not None:
            layout = layout or _DEFAULT_LAYOUTS.get(ndim, "")
            missing = [c for c in self.names if c not in layout]
            if missing:
                raise self.op.error(f"axis_names '{self.names}': {missing} not in the layout '{layout}'",
                                    ValueError)
            return [(everyone, self._axes([layout.index(c) for c in self.names], ndim, rows[0]))]
        axes = args.batch(self.arg["axes"])
        if not args.is_per_sample(self.arg["axes"]):
            return [(everyone, self._axes(list(axes), ndim, rows[0]))]
        if isinstance(axes, list):  # ragged: the samples give different numbers of axes
            groups = {}
            for p, i in enumerate(rows):
                groups.setdefault(tuple(axes[i].tolist()), []).append(p)
            groups = [(np.array(pos), list(key)) for key, pos in groups.items()]
        else:
            keys, first, inverse = np.unique(axes[rows], axis=0, return_index=True, return_inverse=True)
            groups = [(np.flatnonzero(inverse.reshape(-1) == g), keys[g].tolist()) for g in np.argsort(first)]
        return [(pos, self._axes(key, ndim, rows[pos[0]])) for pos, key in groups]

    def _axes(self, axes, ndim, sample):
        """`axes` checked and counted from the front; none: all dims."""
        bad = [a for a in axes if not -ndim <= a < ndim]
        if bad:
            raise self.op.error(f"axes {bad} out of range for samples of {ndim} dims", ValueError, sample=sample)
        axes = [a % ndim for a in axes]
        if len(set(axes)) != len(axes):
            raise self.op.error(f"sample {sample}: the slice axes {axes} repeat a dimension", ValueError,
                                sample=sample)
        return axes or list(range(ndim))

    def _take(self, values, rows, count, what, dtype):
        """Rows `rows` of per-sample values (one row for all, an [N, k] array, or a list of 1D
        arrays of different lengths) as an [len(rows), count] array of `dtype`; an error names
        the first sample that does not give `count` values."""
        if isinstance(values, list):
            values = [values[i] for i in rows]
            lengths = np.array([len(v) for v in values])
        else:
            values = values[rows] if len(values) > 1 else values
            lengths = np.full(len(rows), values.shape[1])
        wrong = lengths != count
        if wrong.any():
            p = int(np.argmax(wrong))
            raise self.op.error(f"sample {rows[p]}: {what} has {lengths[p]} values for {count} slice axes",
                                ValueError, sample=int(rows[p]))
        return np.broadcast_to(np.asarray(values, dtype), (len(rows), count))

    def _arg(self, args, name, rows, count):
        """Slice argument `name` for samples `rows` ([r, count]; float32 for the relative
        ones, as DALI keeps them), or None when not given."""
        if name not in self.named:
            return None
        values = args.batch(self.arg[name])
        if not args.is_per_sample(self.arg[name]):
            values = np.asarray(values).reshape(1, -1)
        dtype = _F32 if name.startswith("rel_") else np.float64
        return self._take(values, rows, count, f"argument '{self.arg[name]}'", dtype)

    def _named(self, args, rows, ext):
        """(lo, hi, negative) for samples `rows` whose slice axes have extents `ext` ([r, k]):
        float64 coordinates, and which samples give a negative (or NaN) shape or rel_shape."""
        start, rel_start, end, rel_end, shape, rel_shape = (self._arg(args, name, rows, ext.shape[1])
                                                             for name in _NAMED)
        # DALI multiplies relative coordinates by the extent in float32, except for the sum
        # rel_start + rel_shape, which it takes in double.
        extent = ext.astype(_F32)
        lo = start if start is not None else np.zeros(ext.shape) if rel_start is None else \
            (rel_start * extent).astype(np.float64)
        if end is not None:
            hi = end
        elif rel_end is not None:
            hi = (rel_end * extent).astype(np.float64)
        elif shape is not None:
            hi = lo + shape
        elif rel_shape is not None and rel_start is not None:
            hi = (rel_start.astype(np.float64) + rel_shape) * ext
        elif rel_shape is not None:
            hi = lo + rel_shape * extent
        else:
            hi = ext.astype(np.float64)
        size = shape if shape is not None else rel_shape
        exact = shape if shape is not None and end is None and rel_end is None else np.full(ext.shape, np.nan)
        return lo, hi, exact, np.zeros(len(rows), bool) if size is None else ~(size >= 0).all(axis=1)

    def _read(self, batch, name):
        """A positional input's batch, read once: float64 rows (an [N, k] array, or a list
        of 1D arrays when the samples' sizes differ) and which samples are floating point."""
        dense = batch.dense_tensor()
        samples = batch.as_torch_list() if dense is None else None
        dtypes = [dense.dtype] if dense is not None else [t.dtype for t in samples]
        bad = [i for i, d in enumerate(dtypes) if d == torch.bool or d.is_complex]
        if bad:
            raise self.op.error(f"sample {bad[0]}: the {name} input must be float or integer, got "
                                f"{dtypes[bad[0]]}", TypeError, sample=bad[0])
        if dense is not None:
            return dense.cpu().reshape(len(dense), -1).double().numpy(), \
                np.full(len(dense), dense.dtype.is_floating_point)
        values = [t.cpu().reshape(-1).double().numpy() for t in samples]
        if len({len(v) for v in values}) == 1:
            values = np.stack(values)
        return values, np.array([d.is_floating_point for d in dtypes])

    def _positional(self, given, rows, ext):
        """(lo, hi) from the anchor and shape inputs for samples `rows` over extents `ext`."""
        k = ext.shape[1]
        (a, norm_a), (s, norm_s) = (
            (self._take(values, rows, k, f"the {name} input", np.float64), floating[rows][:, None] & normalized)
            for (values, floating), name, normalized in zip(given, ("anchor", "shape"), self.normalized))
        ext = ext.astype(np.float64)
        lo = np.where(norm_a, a * ext, a)
        # Normalized anchor and shape: DALI multiplies once, after the sum.
        return lo, np.where(norm_a & norm_s, (a + s) * ext, lo + np.where(norm_s, s * ext, s))

    def _check(self, args, rows, lo, hi, size, negative):
        """An error for the first sample with a negative shape argument, a coordinate that is
        no int64, or a window that ends before it starts (`size`: the given extents, NaN
        where the end decides)."""
        by_end = np.isnan(size)
        bad_lo = ~((lo >= -2.0 ** 63) & (lo < 2.0 ** 63))  # NaN too
        bad_hi = by_end & ~((hi >= -2.0 ** 63) & (hi < 2.0 ** 63))
        per_axis = bad_lo | bad_hi | (by_end & (hi < lo)) | (~by_end & ~(size < 2.0 ** 63))
        bad = negative | per_axis.any(axis=1)
        if not bad.any():
            return
        p = int(np.argmax(bad))
        i = int(rows[p])
        if negative[p]:
            name = self.arg["shape" if "shape" in self.named else "rel_shape"]
            raise self.op.error(f"sample {i}: argument '{name}' = {args.sample(name, i)} must be >= 0", ValueError,
                                sample=i)
        d = int(np.argmax(per_axis[p]))
        if bad_lo[p, d] or bad_hi[p, d]:
            what, v = ("anchor", lo[p, d]) if bad_lo[p, d] else ("end", hi[p, d])
            raise self.op.error(f"sample {i}: the slice {what} {v} on axis {d} is not a valid coordinate",
                                ValueError, sample=i)
        raise self.op.error(f"sample {i}: the slice ends before it starts on axis {d} (start {lo[p, d]}, "
                            f"end {hi[p, d]})", ValueError, sample=i)


    def _check_end(self, rows, anchor, extent):
        """An error for the first sample whose slice ends beyond the int64 range."""
        over = (anchor > 0) & (extent > np.iinfo(np.int64).max - anchor)
        if over.any():
            p, d = (int(x) for x in np.argwhere(over)[0])
            i = int(rows[p])
            raise self.op.error(f"sample {i}: the slice (anchor {anchor[p, d]}, shape {extent[p, d]}) on axis {d} "
                                "ends beyond the int64 range", ValueError, sample=i)


def apply_policy(op, anchor, shape, in_shape, policy, rows):
    """Windows ([N, ndim] anchors and shapes) over inputs of shapes `in_shape` after the
    out-of-bounds policy: 'error' names the first sample (its index in `rows`) whose window
    leaves its input, 'trim_to_shape' clips the windows to the inputs."""
    if policy == "error":
        outside = (anchor < 0) | (anchor + shape > in_shape)
        if outside.any():
            p, d = (int(x) for x in np.argwhere(outside)[0])
            i = int(rows[p])
            raise op.error(f"sample {i}: the slice (anchor {anchor[p].tolist()}, shape {shape[p].tolist()}) is "
                           f"outside the input of shape {in_shape[p].tolist()} on axis {d}; use "
                           "out_of_bounds_policy='pad' or 'trim_to_shape'", ValueError, sample=i)
    elif policy == "trim_to_shape":
        ends = np.clip(anchor + shape, 0, in_shape)
        anchor = np.clip(anchor, 0, in_shape)
        shape = np.maximum(ends - anchor, 0)
    return anchor, shape


def _source_index(idx, n, policy):
    """Input indices for the (possibly outside) indices `idx` of an axis of extent n."""
    if policy in ("edge", "clamp"):
        return idx.clamp(0, n - 1)
    if policy == "wrap":
        return idx.remainder(n)
    if policy == "reflect_101":
        if n == 1:
            return torch.zeros_like(idx)
        m = idx.remainder(2 * n - 2)
        return torch.where(m < n, m, 2 * n - 2 - m)
    m = idx.remainder(2 * n)  # reflect / reflect_1001: the edge element repeats
    return torch.where(m < n, m, 2 * n - 1 - m)


def _convert(t, dtype):
    """Input values in the output type: integers saturate, floats truncate toward zero."""
    if t.dtype == dtype:
        return t
    if not dtype.is_floating_point and dtype != torch.bool:
        info = torch.iinfo(dtype)
        t = t.clamp(info.min, info.max)
    return t.to(dtype)


def fill_tensor(op, fill, dtype, shapes, channel_dim, device):
    """The fill values in `dtype`, shaped to broadcast over each output sample (their shapes:
    `shapes`, [N, ndim]); several values need a channel dim with as many channels."""
    values = [cast_fill(v, dtype) for v in fill]
    if len(values) == 1:
        return torch.tensor(values[0], dtype=dtype, device=device)
    if channel_dim is None:
        raise op.error(f"fill_values has {len(values)} values but the layout has no channel axis 'C'; "
                       "give one value", ValueError)
    wrong = shapes[:, channel_dim] != len(values)
    if wrong.any():
        i = int(np.argmax(wrong))
        raise op.error(f"fill_values has {len(values)} values for {shapes[i, channel_dim]} output "
                       "channels", ValueError, sample=i)
    view = [1] * shapes.shape[1]
    view[channel_dim] = -1
    return torch.tensor(values, dtype=dtype, device=device).view(view)


def copy_window(img, anchor, shape, policy, fill, out):
    """Write img's window (anchor, shape) into `out`; `fill` is the padding ('pad') as a
    tensor that broadcasts over out."""
    src, dst = img, out
    for d, (a, s, n) in enumerate(zip(anchor, shape, img.shape)):
        if a >= 0 and a + s <= n:
            src = src.narrow(d, a, s)
        elif policy in _INDEXED:
            idx = torch.arange(a, a + s, device=img.device)
            src = src.index_select(d, _source_index(idx, n, policy))
        else:  # pad: copy the part inside, fill the rest
            lo, hi = min(max(a, 0), n), max(min(a + s, n), 0)
            hi = max(hi, lo)
            src = src.narrow(d, lo, hi - lo)
            dst = dst.narrow(d, lo - a if hi > lo else 0, hi - lo)
    if dst is not out:
        out.copy_(fill.expand_as(out))
    if src.numel():
        dst.copy_(_convert(src, out.dtype))


@register("slice", devices=("cpu", "gpu"), inputs=(1, 3), input_names=("data", "anchor", "shape_input"),
          deprecated_args={"output_dtype": "dtype", "image_type": None},
          args=SLICE_ARGS + [
              Arg("out_of_bounds_policy", STR, "error", "A window outside the input: 'error', 'pad' "
                  "(or 'constant') with fill_values, 'trim_to_shape', 'edge' (or 'clamp'), 'reflect' "
                  "(or 'reflect_1001'), 'reflect_101' or 'wrap'.", choices=POLICIES),
              Arg("fill_values", FLOATS, [0.0], "Padding values: one, or one per output channel."),
              Arg("dtype", DTYPE, None, "Output type (FLOAT, FLOAT16 or UINT8); the input's if not set. "
                  "Integers saturate, floats are truncated.",
                  choices=(types.FLOAT, types.FLOAT16, types.UINT8)),
          ])
class Slice(Operator):
    """Extract a window of each sample: anchor and shape as positional inputs (normalized or
    absolute, in `axes` / `axis_names` order, default (x, y)) or as start/end/shape
    arguments; windows outside the input follow out_of_bounds_policy."""

    def __init__(self, spec):
        super().__init__(spec)
        self.windows = SliceWindows(self)
        dtype = spec.args["dtype"]
        self.out_dtype = None if dtype is None else types.to_torch_type(dtype)

    def plan(self, inputs):
        """The slice's inputs and the layout, as far as known; the output keeps the input's
        device, rank and layout."""
        self.windows.check_inputs(len(inputs))
        data = inputs[0]
        if data.layout and data.ndim is not None:
            self._check_layout(data.layout, data.ndim)
        return [BatchSpec(data.device, self.out_dtype or data.dtype, data.ndim, data.layout)], self.step

    def _check_layout(self, layout, ndim):
        if layout and len(layout) != ndim:
            raise self.error(f"layout '{layout}' does not match samples of {ndim} dims", ValueError)

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        if len(batch) == 0:
            return [batch]
        in_shapes, in_dtype = self._shapes(batch)
        ndim, layout = in_shapes.shape[1], batch.layout()
        self._check_layout(layout, ndim)
        policy = args["out_of_bounds_policy"]
        anchor, shape = self.windows.windows(args, in_shapes, layout, inputs[1:], policy)
        if policy in _INDEXED:
            empty = ((shape > 0) & (in_shapes == 0)).any(axis=1)
            if empty.any():
                i = int(np.argmax(empty))
                raise self.error(f"sample {i}: an empty input ({tuple(in_shapes[i].tolist())}) cannot be "
                                 f"sliced with out_of_bounds_policy='{policy}'", ValueError, sample=i)
        dtype = self.out_dtype or in_dtype
        full_layout = layout or _DEFAULT_LAYOUTS.get(ndim, "")
        channel_dim = full_layout.find("C")
        fill = None if policy not in _PAD else fill_tensor(self, args["fill_values"], dtype, shape,
                                                           None if channel_dim < 0 else channel_dim,
                                                           batch.sample(0).device)
        if full_layout == "HWC" and in_dtype == torch.uint8 and policy not in _INDEXED and \
                (anchor[:, 2] == 0).all() and (shape[:, 2] == in_shapes[0, 2]).all() and \
                (in_shapes[:, 2] == in_shapes[0, 2]).all() and (shape[:, :2] > 0).all():
            # Windows on H and W only, all of one channel count: crop's kernel call, exact for uint8.
            fill = output_fill(dtype, args["fill_values"] if policy in _PAD else [0])
            windows = np.concatenate([anchor[:, :2], shape[:, :2]], axis=1)
            out = to_torch_samples(crop_normalize(image_batch(self, batch), windows, out_dtype=dtype, out_chw=False,
                                                  fill=fill, device=batch.device))
        else:
            out = self._copy(batch.as_torch_list(), anchor, shape, dtype, policy, fill)
        return [TensorList.make(out, layout, device=batch.device)]

    def _shapes(self, batch):
        """The samples' shapes ([N, ndim]) and their type; an error names the first sample
        that differs from sample 0 in rank or type."""
        first = batch.sample(0)
        try:
            shapes = batch.sample_shapes()
            mixed = batch.dense_tensor() is None and any(s.dtype != first.dtype for s in batch.as_torch_list())
        except ValueError:  # samples of different ranks
            mixed = True
        if mixed:
            samples = batch.as_torch_list()
            i = next(i for i, s in enumerate(samples) if s.dim() != first.dim() or s.dtype != first.dtype)
            raise self.error(f"sample {i} ({tuple(samples[i].shape)}, {samples[i].dtype}) differs from sample 0 in "
                             "rank or type", ValueError, sample=i)
        return shapes, first.dtype

    def _copy(self, samples, anchor, shape, dtype, policy, fill):
        """Torch copies of the windows, sample by sample, into one dense batch when their
        shapes agree."""
        if (shape == shape[0]).all():
            outs = samples[0].new_empty([len(samples)] + shape[0].tolist(), dtype=dtype)
        else:
            outs = [im.new_empty(s, dtype=dtype) for im, s in zip(samples, shape.tolist())]
        for im, a, s, out in zip(samples, anchor.tolist(), shape.tolist(), outs):
            copy_window(im, a, s, policy, fill, out)
        return outs
