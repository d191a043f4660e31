"""fn.slice: a window of any rank, given by anchor/shape inputs or start/end/shape
arguments (absolute or relative), with DALI's rounding and out-of-bounds policies.

HWC uint8 batches sliced on H and W only run the `torchdali::crop_mirror_normalize`
kernel (one call per window size, exact for uint8); every other case is torch's narrow,
index_select and copy per sample into one dense batch when the window shapes agree."""

import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, FLOATS, INTS, LAYOUT, STR, Arg, register
from ..tensor_list import TensorList
from .base import Operator
from .crop import cast_fill
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
    """Per-sample slice windows from an operator's slice arguments or positional anchor and
    shape inputs, as DALI's NamedSliceAttr / PositionalSliceAttr compute them."""

    def __init__(self, op):
        spec = op.spec
        self.op = op
        given = {n for n in _NAMED if n in spec.arg_input_names or spec.args.get(n) is not None}
        if {"start", "rel_start"} <= given:
            raise op.error("'start' and 'rel_start' are mutually exclusive", ValueError)
        ends = given & {"end", "rel_end", "shape", "rel_shape"}
        if len(ends) > 1:
            raise op.error(f"{sorted(ends)} are mutually exclusive: give one of end, rel_end, shape "
                           "and rel_shape", ValueError)
        self.named = given
        axes_given = "axes" in spec.arg_input_names or spec.args.get("axes") is not None
        if axes_given and spec.args.get("axis_names") is not None:
            raise op.error("'axes' and 'axis_names' are mutually exclusive", ValueError)
        names = spec.args.get("axis_names")
        self.names = None if axes_given else "WH" if names is None else names
        self.normalized = (spec.args["normalized_anchor"], spec.args["normalized_shape"])

    def check_inputs(self, num_inputs):
        """The slice is given by name or by the two extra inputs, not both, not neither."""
        if self.named and num_inputs > 1:
            raise self.op.error(f"slice arguments {sorted(self.named)} cannot be combined with the "
                                "positional anchor and shape inputs", ValueError)
        if not self.named and num_inputs != 3:
            raise self.op.error("give the slice as arguments (start/rel_start with end, rel_end, shape "
                                f"or rel_shape) or as anchor and shape inputs; got {num_inputs - 1} of "
                                "the positional inputs", ValueError)

    def axes(self, i, args, ndim, layout):
        """The dimensions sample i's slice coordinates refer to, in their order."""
        op = self.op
        if self.names is not None:
            layout = layout or _DEFAULT_LAYOUTS.get(ndim, "")
            missing = [c for c in self.names if c not in layout]
            if missing:
                raise op.error(f"axis_names '{self.names}': {missing} not in the layout '{layout}'", ValueError)
            axes = [layout.index(c) for c in self.names]
        else:
            axes = list(args.sample("axes", i))
            bad = [a for a in axes if not -ndim <= a < ndim]
            if bad:
                raise op.error(f"axes {bad} out of range for samples of {ndim} dims", ValueError)
            axes = [a % ndim for a in axes]
        if len(set(axes)) != len(axes):
            raise op.error(f"sample {i}: the slice axes {axes} repeat a dimension", ValueError)
        return axes or list(range(ndim))

    def window(self, i, args, in_shape, layout, anchor=None, shape=None):
        """(anchor, shape) over all dims of sample i; `anchor`/`shape` are its positional input
        tensors (CPU) when the slice is given that way."""
        ndim = len(in_shape)
        axes = self.axes(i, args, ndim, layout)
        if self.named:
            pairs = self._named(i, args, axes, in_shape)
        else:
            pairs = self._positional(i, anchor, shape, axes, in_shape)
        out_anchor, out_shape = [0] * ndim, list(in_shape)
        for d, (lo, hi) in zip(axes, pairs):
            for what, v in (("anchor", lo), ("end", hi)):
                if not -2.0 ** 63 <= v <= 2.0 ** 63:
                    raise self.op.error(f"sample {i}: the slice {what} {v} on axis {d} is not a valid "
                                        "coordinate", ValueError)
            if hi < lo:
                raise self.op.error(f"sample {i}: the slice ends before it starts on axis {d} "
                                    f"(start {lo}, end {hi})", ValueError)
            out_anchor[d] = round_half_away(lo)
            out_shape[d] = round_half_away(hi) - out_anchor[d]
        return out_anchor, out_shape

    def _values(self, i, args, name, count):
        if name not in self.named:
            return None
        v = list(args.sample(name, i))
        if len(v) != count:
            raise self.op.error(f"sample {i}: argument '{name}' has {len(v)} values for {count} slice "
                                "axes", ValueError)
        return [_F32(x) for x in v] if name.startswith("rel_") else [float(x) for x in v]

    def _named(self, i, args, axes, in_shape):
        n = len(axes)
        start, rel_start = self._values(i, args, "start", n), self._values(i, args, "rel_start", n)
        end, rel_end = self._values(i, args, "end", n), self._values(i, args, "rel_end", n)
        shape, rel_shape = self._values(i, args, "shape", n), self._values(i, args, "rel_shape", n)
        pairs = []
        for k, d in enumerate(axes):
            # DALI multiplies relative coordinates by the extent in float32, except for the
            # sum rel_start + rel_shape, which it takes in double.
            extent = _F32(in_shape[d])
            lo = start[k] if start else float(rel_start[k] * extent) if rel_start else 0.0
            for name, v in (("shape", shape), ("rel_shape", rel_shape)):
                if v and not v[k] >= 0:  # NaN too
                    raise self.op.error(f"sample {i}: argument '{name}' = {v} must be >= 0", ValueError)
            if end:
                hi = end[k]
            elif rel_end:
                hi = float(rel_end[k] * extent)
            elif shape:
                hi = lo + shape[k]
            elif rel_shape and rel_start:
                hi = (float(rel_start[k]) + float(rel_shape[k])) * in_shape[d]
            elif rel_shape:
                hi = lo + float(rel_shape[k] * extent)
            else:
                hi = float(in_shape[d])
            pairs.append((lo, hi))
        return pairs

    def _positional(self, i, anchor, shape, axes, in_shape):
        vals = []
        for name, t, normalized in (("anchor", anchor, self.normalized[0]), ("shape", shape, self.normalized[1])):
            t = t.cpu().reshape(-1)
            if t.dtype == torch.bool or t.is_complex():
                raise self.op.error(f"sample {i}: the {name} input must be float or integer, got {t.dtype}",
                                    TypeError)
            if t.numel() != len(axes):
                raise self.op.error(f"sample {i}: the {name} input has {t.numel()} values for {len(axes)} "
                                    "slice axes", ValueError)
            vals.append((t.double().tolist(), normalized and t.dtype.is_floating_point))
        (a, norm_a), (s, norm_s) = vals
        pairs = []
        for k, d in enumerate(axes):
            extent = in_shape[d]
            if norm_a and norm_s:  # DALI multiplies once, after the sum
                pairs.append((a[k] * extent, (a[k] + s[k]) * extent))
                continue
            lo = a[k] * extent if norm_a else a[k]
            pairs.append((lo, lo + (s[k] * extent if norm_s else s[k])))
        return pairs


def apply_policy(op, i, anchor, shape, in_shape, policy):
    """The window after the out-of-bounds policy ('error' raises for a window outside)."""
    if policy == "error":
        for d, (a, s, n) in enumerate(zip(anchor, shape, in_shape)):
            if a < 0 or a + s > n:
                raise op.error(f"sample {i}: the slice (anchor {anchor}, shape {shape}) is outside the "
                               f"input of shape {list(in_shape)} on axis {d}; use out_of_bounds_policy="
                               "'pad' or 'trim_to_shape'", ValueError)
    elif policy == "trim_to_shape":
        ends = [min(max(a + s, 0), n) for a, s, n in zip(anchor, shape, in_shape)]
        anchor = [min(max(a, 0), n) for a, n in zip(anchor, in_shape)]
        shape = [max(e - a, 0) for a, e in zip(anchor, ends)]
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


def fill_tensor(op, fill, dtype, out_shape, channel_dim, device):
    """The fill values in `dtype`, shaped to broadcast over an output of `out_shape`."""
    values = [cast_fill(v, dtype) for v in fill]
    if len(values) == 1:
        return torch.tensor(values[0], dtype=dtype, device=device)
    if channel_dim is None:
        raise op.error(f"fill_values has {len(values)} values but the layout has no channel axis 'C'; "
                       "give one value", ValueError)
    if len(values) != out_shape[channel_dim]:
        raise op.error(f"fill_values has {len(values)} values for {out_shape[channel_dim]} output "
                       "channels", ValueError)
    view = [1] * len(out_shape)
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

    def run(self, inputs, args, ctx):
        self.windows.check_inputs(len(inputs))
        batch = inputs[0]
        images = batch.as_torch_list()
        if not images:
            return [batch]
        ndim, layout = images[0].dim(), batch.layout()
        if layout and len(layout) != ndim:
            raise self.error(f"layout '{layout}' does not match samples of {ndim} dims", ValueError)
        plans = self._plans(images, inputs[1:], layout, args)
        dtype = images[0].dtype if args["dtype"] is None else types.to_torch_type(args["dtype"])
        policy = args["out_of_bounds_policy"]
        fill = args["fill_values"] if policy in _PAD else None
        full_layout = layout or _DEFAULT_LAYOUTS.get(ndim, "")
        if full_layout == "HWC" and images[0].dtype == torch.uint8 and policy not in _INDEXED and \
                all(a[2] == 0 and s[2] == im.shape[2] and s[0] and s[1] for (a, s), im in zip(plans, images)):
            out = self._hwc_kernel(images, plans, dtype, fill)
        else:
            out = self._copy(images, plans, dtype, policy, fill, full_layout.find("C"))
        return [TensorList.make(out, layout, device=batch.device)]

    def _plans(self, images, positional, layout, args):
        """(anchor, shape) of every sample after the out-of-bounds policy."""
        policy = args["out_of_bounds_policy"]
        positional = [x.as_torch_list() for x in positional] or [[None] * len(images)] * 2
        plans = []
        for i, im in enumerate(images):
            if im.dim() != images[0].dim() or im.dtype != images[0].dtype:
                raise self.error(f"sample {i} ({tuple(im.shape)}, {im.dtype}) differs from sample 0 in "
                                 "rank or type", ValueError)
            anchor, shape = self.windows.window(i, args, tuple(im.shape), layout,
                                                positional[0][i], positional[1][i])
            anchor, shape = apply_policy(self, i, anchor, shape, im.shape, policy)
            if policy in _INDEXED and any(s and not m for s, m in zip(shape, im.shape)):
                raise self.error(f"sample {i}: an empty input ({tuple(im.shape)}) cannot be sliced "
                                 f"with out_of_bounds_policy='{policy}'", ValueError)
            plans.append((anchor, shape))
        return plans

    def _copy(self, images, plans, dtype, policy, fill, channel_dim):
        """Torch copies of the windows, into one dense batch when their shapes agree."""
        shapes = [s for _, s in plans]
        if all(s == shapes[0] for s in shapes):
            outs = images[0].new_empty([len(images)] + shapes[0], dtype=dtype)
        else:
            outs = [im.new_empty(s, dtype=dtype) for im, s in zip(images, shapes)]
        channel_dim = None if channel_dim < 0 else channel_dim
        for im, (anchor, shape), out in zip(images, plans, outs):
            pad = None if fill is None else fill_tensor(self, fill, dtype, shape, channel_dim, im.device)
            copy_window(im, anchor, shape, policy, pad, out)
        return outs

    def _hwc_kernel(self, images, plans, dtype, fill_values):
        """One crop_mirror_normalize call per window size (mean 0, std 1: exact for uint8)."""
        from ..kernels.crop_mirror_normalize import crop_mirror_normalize

        c = images[0].shape[2]
        fill = torch.zeros(1) if fill_values is None else \
            fill_tensor(self, fill_values, dtype, [1, 1, c], 2, "cpu").reshape(-1).float()
        groups = {}
        for i, (_, s) in enumerate(plans):
            groups.setdefault((s[0], s[1]), []).append(i)
        one, zero = torch.ones(1), torch.zeros(1)
        outs = [None] * len(images)
        for (h, w), idx in groups.items():
            anchors = torch.tensor([plans[i][0][:2] for i in idx], dtype=torch.int64)
            out = crop_mirror_normalize([images[i] for i in idx], anchors, torch.zeros(len(idx), dtype=torch.uint8),
                                        zero, one, h, w, dtype, False, c, 1.0, 0.0, fill)
            if len(groups) == 1:
                return out
            for k, i in enumerate(idx):
                outs[i] = out[k]
        return outs
