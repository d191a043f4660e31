"""Reductions (`reductions.*`): sums, extremes, means and spreads of each sample over some of its
axes. One operator class serves all eight, the reduction its parameter. A dense batch reduces as one
[N, ...] tensor; a ragged one sample by sample.

The arithmetic is DALI's: an integer result accumulates in its own type (wrapping on overflow) and
a mean is float32(sum) * float32(1 / count), truncated toward zero for an integer output; a float
result is float32. A 0-dim sample is taken as the shape (1,), as DALI takes it."""
import math

import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, INT, INTS, LAYOUT, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator

T = types.DALIDataType
_INTEGERS = (T.UINT8, T.INT8, T.UINT16, T.INT16, T.UINT32, T.INT32, T.UINT64, T.INT64)
_UNSIGNED = (T.UINT8, T.UINT16, T.UINT32, T.UINT64)
_INT64_MIN = -2 ** 63
_FLOAT_MAX = float(np.finfo(np.float32).max)

_AXIS_ARGS = [
    Arg("axes", INTS, None, "Axes to reduce, of -ndim to ndim - 1 (negative: from the back); all of them by "
        "default; none: the input, converted as the reduction converts it. Not with `axis_names`."),
    Arg("axis_names", LAYOUT, None, "Axes to reduce by their names in the input's layout (e.g. 'HW' of 'HWC'). "
        "Not with `axes`."),
    Arg("keep_dims", BOOL, False, "Keep the reduced axes, with extent 1 (and the input's layout)."),
]
_DTYPE_ARG = Arg("dtype", DTYPE, None, "The output type, also the one the result accumulates in; the types "
                 "accepted depend on the input's (see the operator's description).")
_DDOF_ARG = Arg("ddof", INT, 0, "Delta degrees of freedom: the divisor is count - ddof.")


def _wide(t):
    return T.UINT64 if t in _UNSIGNED else T.INT64


def output_types(reduction, t):
    """(the default output type, all those `dtype` may pick) of `reduction` over input type `t`."""
    if t == T.FLOAT or reduction in ("variance", "std_dev"):
        return T.FLOAT, (T.FLOAT,)
    if reduction in ("min", "max"):
        return t, (t,)
    if reduction == "sum":
        return _wide(t), (t, _wide(t)) + ((T.FLOAT,) if _wide(t) != t else ())
    if reduction == "mean_square":
        return T.FLOAT, (_wide(t), T.FLOAT)
    return T.FLOAT, (t, T.FLOAT)  # mean, rms


class Reduction(Operator):
    """A reduction of each sample over some of its axes (`reduction` names which)."""

    reduction = None

    def plan(self, inputs):
        a = self.spec.args
        if a["axes"] is not None and a["axis_names"] is not None:
            raise self.error("arguments 'axes' and 'axis_names' are exclusive: give one", ValueError)
        self.keep_dims = a["keep_dims"]
        self.ddof = a.get("ddof", 0)
        self._axes_of = {}
        spec = inputs[0]
        dtype = ndim = layout = None
        if spec.dtype is not None:
            dtype = types.to_torch_type(self.output_type(types.to_dali_type(spec.dtype)))
        if spec.ndim is not None and spec.layout is not None:
            axes = self.axes(max(spec.ndim, 1), spec.layout)
            ndim = max(spec.ndim, 1) if self.keep_dims or not axes else max(spec.ndim, 1) - len(axes)
            layout = self.output_layout(spec.layout, axes)
        device = "cpu" if self.spec.device == "cpu" else "gpu"
        return [BatchSpec(device, dtype, ndim, layout)], self.step

    def output_type(self, t):
        """The output's DALI type for input type `t`; an error where DALI has no such reduction."""
        if t not in _INTEGERS + (T.FLOAT,):
            raise self.error(f"input type {t.name} is not supported; give one of "
                             f"{', '.join(x.name for x in _INTEGERS + (T.FLOAT,))}", TypeError)
        default, accepted = output_types(self.reduction, t)
        chosen = self.spec.args.get("dtype")
        if chosen is None:
            return default
        if chosen not in accepted:
            raise self.error(f"argument 'dtype' = {chosen.name} is not accepted for input type {t.name}; give "
                             f"one of {', '.join(x.name for x in accepted)}", TypeError)
        return chosen

    def axes(self, ndim, layout):
        """The sorted axes reduced in samples of `ndim` dims and this layout (checked once for each)."""
        key = (ndim, layout)
        if key not in self._axes_of:
            self._axes_of[key] = self._check_axes(ndim, layout)
        return self._axes_of[key]

    def _check_axes(self, ndim, layout):
        a = self.spec.args
        if a["axis_names"] is not None:
            names = str(a["axis_names"])
            missing = [c for c in names if c not in layout]
            if missing:
                raise self.error(f"argument 'axis_names' = '{names}': axis '{missing[0]}' is not in the input's "
                                 f"layout '{layout}'", ValueError)
            axes = [layout.index(c) for c in names]
        elif a["axes"] is not None:
            axes = list(a["axes"])
            bad = [x for x in axes if not -ndim <= x < ndim]
            if bad:
                raise self.error(f"argument 'axes' = {axes}: axis {bad[0]} is out of range [{-ndim}, {ndim - 1}] "
                                 f"for samples of {ndim} dims", ValueError)
            axes = [x % ndim for x in axes]
        else:
            axes = list(range(ndim))
        if len(set(axes)) != len(axes):
            which = "axis_names" if a["axis_names"] is not None else "axes"
            raise self.error(f"argument '{which}' names an axis twice", ValueError)
        return tuple(sorted(axes))

    def output_layout(self, layout, axes):
        if self.keep_dims or not layout:
            return layout
        return "".join(c for i, c in enumerate(layout) if i not in axes)

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        out_type = types.to_torch_type(self.output_type(batch.dtype)) if len(batch) else None
        try:
            shapes = batch.sample_shapes()
        except ValueError as e:  # samples of different ndim
            raise self.error(str(e), ValueError) from None
        ndim = max(shapes.shape[1], 1)
        layout = batch.layout()
        axes = self.axes(ndim, layout)
        means = self.means(inputs[1]) if len(inputs) > 1 else None
        dense = batch.as_torch() if batch.is_dense_tensor() and len(batch) else None
        if dense is not None:
            x = dense.reshape(len(dense), *dense.shape[1:] or (1,))
            out = self.reduce(x, axes, out_type, means, 0)
        else:
            samples = [s.reshape(s.shape or (1,))[None] for s in batch.as_torch_list()]
            out = [self.reduce(s, axes, out_type, means, i)[0] for i, s in enumerate(samples)]
        return [TensorList.make(out, self.output_layout(layout, axes), device=batch.device)]

    def means(self, batch):
        """The `mean` input's samples (float32)."""
        if len(batch) and batch.dtype != T.FLOAT:
            raise self.error(f"input 'mean' has type {batch.dtype.name}; give FLOAT", TypeError)
        return batch.as_torch_list()

    def reduce(self, x, axes, out_type, means, first):
        """x [B, ...] (samples `first`...) reduced over `axes` of its samples: [B, ...], keeping
        the reduced axes only where keep_dims says."""
        dims = tuple(1 + a for a in axes)
        kept = [1 if d in dims else n for d, n in enumerate(x.shape)]
        count = math.prod(x.shape[d] for d in dims)
        if self.reduction in ("min", "max"):
            out = _extreme(x, dims, kept, count, self.reduction == "max")
        elif self.reduction in ("variance", "std_dev") and not dims:
            out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)  # as DALI: nothing to spread
        else:
            centre = self.centre(means, first, x.shape[0], kept, x.device) if means is not None else None
            out = _moment(self.reduction, x, dims, count - self.ddof, out_type, centre)
        if self.keep_dims:
            return out
        return out.reshape([n for d, n in enumerate(x.shape) if d not in dims])

    def centre(self, means, first, count, kept, device):
        """float32 [count, *kept sample shape]: the means of samples first... as the reduced shape."""
        volume = math.prod(kept[1:])
        rows = means[first:first + count]
        for i, m in enumerate(rows):
            if m.numel() != volume:
                raise self.error(f"input 'mean' sample {first + i} has {m.numel()} values (shape {tuple(m.shape)}); "
                                 f"the reduced sample has {volume} (shape {tuple(kept[1:])})", ValueError,
                                 sample=first + i)
        return torch.stack([m.reshape(kept[1:]) for m in rows]).to(device=device, dtype=torch.float32)


def _extreme(x, dims, kept, count, largest):
    """min or max over dims (kept), in x's type; where nothing is reduced, the type's highest
    value (min) or lowest (max), floats' finite ones, as DALI."""
    dtype = x.dtype
    if count == 0:
        info = torch.iinfo(dtype) if not dtype.is_floating_point else None
        lowest, highest = (info.min, info.max) if info else (-_FLOAT_MAX, _FLOAT_MAX)
        return torch.full(kept, lowest if largest else highest, dtype=dtype, device=x.device)
    if not dims:
        return x
    if dtype == torch.uint64:  # ordered as int64 with the sign bit flipped
        flipped = x.view(torch.int64) ^ _INT64_MIN
        found = flipped.amax(dims, keepdim=True) if largest else flipped.amin(dims, keepdim=True)
        return (found ^ _INT64_MIN).view(torch.uint64)
    wide = x.to(torch.int64) if dtype in (torch.uint16, torch.uint32) else x
    found = wide.amax(dims, keepdim=True) if largest else wide.amin(dims, keepdim=True)
    return found.to(dtype)


def _moment(reduction, x, dims, divisor, out_type, centre):
    """sum, mean, mean_square, rms, variance or std_dev over dims (kept) in out_type; the means
    divide by `divisor`."""
    squared = reduction not in ("sum", "mean")
    if x.is_floating_point() or centre is not None:
        v = x.to(torch.float32 if x.is_floating_point() else torch.float64)
        v = v if centre is None else v - centre.to(v.dtype)
        terms = v * v if squared else v
    else:
        terms, unsigned = _integer_terms(x, squared)
        if out_type.is_floating_point:
            terms = _to_float(terms, unsigned, torch.float64)
    total = _sum(terms, dims)
    if out_type.is_floating_point:
        total = total.to(torch.float32)
    else:  # accumulated in out_type, as DALI, wrapping: the int64 sum's low bits
        total = total.to(out_type)
        if reduction == "sum":
            return total
        unsigned = out_type == torch.uint64
        total = _to_float(total.view(torch.int64) if unsigned else total.to(torch.int64), unsigned, torch.float32)
    if reduction == "sum":
        return total
    with np.errstate(divide="ignore"):
        scale = np.float32(1) / np.float32(divisor)
    result = total * torch.tensor(scale, device=total.device)
    if reduction in ("rms", "std_dev"):  # rounded once, as C++'s sqrtf (torch's float32 sqrt may be 1 ulp off)
        result = result.double().sqrt().float()
    return result if out_type.is_floating_point else _truncate(result, out_type)


def _integer_terms(x, squared):
    """(int64 [the bits of] the integers x or their squares, whether those bits are unsigned). DALI
    squares in C++'s types: 8 and 16 bits in int32 (wrapping for uint16), 32 and 64 in 64 bits
    (wrapping for 64)."""
    bits = x.view(torch.int64) if x.dtype == torch.uint64 else x.to(torch.int64)
    if not squared:
        return bits, x.dtype == torch.uint64
    squares = bits * bits
    if x.element_size() <= 2:
        return squares.to(torch.int32).to(torch.int64), False
    return squares, x.dtype in (torch.uint32, torch.uint64)


def _sum(v, dims):
    return v.sum(dims, keepdim=True) if dims else v


def _to_float(bits, unsigned, dtype):
    """int64 `bits`, read as signed or unsigned integers, as floats of dtype, rounded once to nearest."""
    if not unsigned:
        return bits.to(dtype)
    halved = ((bits >> 1) & (2 ** 63 - 1)) | (bits & 1)  # keeps the rounding of the dropped bit
    return torch.where(bits >= 0, bits.to(dtype), halved.to(dtype) * 2)


def _truncate(v, out_type):
    """Floats to out_type as DALI's C++ casts on x86: toward zero, through int32 (types of up to
    32 bits but uint32) or int64, a NaN or a value out of that range giving its lowest value."""
    if out_type == torch.uint64:
        high = v >= 2.0 ** 63
        low = _truncate(torch.where(high, v - 2.0 ** 63, v), torch.int64)
        return torch.where(high, low ^ _INT64_MIN, low).view(torch.uint64)
    wide = torch.int64 if out_type in (torch.int64, torch.uint32) else torch.int32
    bound = 2.0 ** (torch.iinfo(wide).bits - 1)
    valid = (v > -bound - 1) & (v < bound)
    ints = torch.where(valid, v, torch.zeros_like(v)).to(wide)
    return torch.where(valid, ints, torch.iinfo(wide).min).to(out_type)


_DEVICES = ("cpu", "gpu")


@register("reductions.sum", devices=_DEVICES, inputs=(1, 1), args=_AXIS_ARGS + [_DTYPE_ARG])
class Sum(Reduction):
    """The sum of the elements over the given axes. By default integers sum into 64 bits (signed or
    not as the input), floats into float32; `dtype` may keep the input's type (wrapping) or, for
    integers of up to 32 bits, pick FLOAT."""

    reduction = "sum"


@register("reductions.min", devices=_DEVICES, inputs=(1, 1), args=_AXIS_ARGS)
class Min(Reduction):
    """The least element over the given axes, in the input's type; of nothing, the type's highest
    value (the largest finite one for floats)."""

    reduction = "min"


@register("reductions.max", devices=_DEVICES, inputs=(1, 1), args=_AXIS_ARGS)
class Max(Reduction):
    """The greatest element over the given axes, in the input's type; of nothing, the type's lowest
    value (the lowest finite one for floats)."""

    reduction = "max"


@register("reductions.mean", devices=_DEVICES, inputs=(1, 1), args=_AXIS_ARGS + [_DTYPE_ARG])
class Mean(Reduction):
    """The mean of the elements over the given axes: FLOAT, or with `dtype` the integer input's own
    type (summed in it, wrapping, then truncated toward zero); of nothing, NaN."""

    reduction = "mean"


@register("reductions.mean_square", devices=_DEVICES, inputs=(1, 1), args=_AXIS_ARGS + [_DTYPE_ARG])
class MeanSquare(Reduction):
    """The mean of the squared elements over the given axes: FLOAT, or with `dtype` the integer
    input's 64-bit type (INT64 or UINT64, truncated toward zero)."""

    reduction = "mean_square"


@register("reductions.rms", devices=_DEVICES, inputs=(1, 1), aliases=("reductions.RMS",),
          args=_AXIS_ARGS + [_DTYPE_ARG])
class RMS(Reduction):
    """The root mean square of the elements over the given axes: FLOAT, or with `dtype` the integer
    input's own type (squares summed in it, wrapping; the root truncated toward zero)."""

    reduction = "rms"


@register("reductions.variance", devices=_DEVICES, inputs=(2, 2), input_names=("data", "mean"),
          args=_AXIS_ARGS + [_DDOF_ARG])
class Variance(Reduction):
    """The variance of the elements over the given axes about a given mean (the second input, FLOAT, as
    many values as the reduced sample, e.g. reductions.mean's output): sum((x - mean)^2) / (count -
    ddof), FLOAT. With no axes to reduce, zeros."""

    reduction = "variance"


@register("reductions.std_dev", devices=_DEVICES, inputs=(2, 2), input_names=("data", "mean"),
          args=_AXIS_ARGS + [_DDOF_ARG])
class StdDev(Reduction):
    """The standard deviation of the elements over the given axes about a given mean (the second
    input, as for reductions.variance): the square root of the variance, FLOAT."""

    reduction = "std_dev"
