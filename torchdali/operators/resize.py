"""`resize`: DALI's image resize. Output sizes follow DALI's ResizeAttr exactly (modes,
aspect-ratio keeping, max_size, ROI, subpixel_scale), computed in float32 as DALI does; the
pixels come from the `torchdali::resize` kernel (csrc/) in one call for the whole batch."""
import math

import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, FLOAT, FLOATS, INT, INTERP_TYPE, REQUIRED, STR, Arg, register
from ..tensor_list import TensorList
from .base import Args, BatchSpec, Operator, RandomOperator
from .images import (IMAGE_DTYPES, VOLUME_LAYOUTS, dtype_error, image_batch, image_ndim, image_shapes, narrowed,
                     over_frames, plan_images, refuse_huge_outputs, widened)
from .windows import random_crop_windows, round_half_away

_F32 = np.float32
RESIZE_WIDENED = (torch.int16, torch.uint16)  # DALI's resize takes them too: through float32 (images.widened)
_MODES = ("default", "stretch", "not_larger", "not_smaller")


def _adjust_output_size(out, in_size, mode, max_size):
    """DALI's AdjustOutputSize over a batch: `out` and `in_size` are float32 [N, k] arrays
    (out is modified); 0 in `out` means "keep the aspect ratio"."""
    mask = (out != 0) & (in_size != 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(in_size != 0, out.astype(np.float64) / in_size, 1.0)
    provided = mask.sum(axis=1)
    none = provided == 0
    if mode in ("default", "stretch"):
        if mode == "default":  # the axes not given take the geometric mean of the given axes' scales
            avg = np.abs(np.where(mask, scale, 1.0)).prod(axis=1)
            avg = np.where(provided > 1, avg ** (1.0 / np.maximum(provided, 1)), avg)
            fill = (in_size * avg[:, None]).astype(_F32)
        else:
            fill = in_size
        partial = (provided > 0) & (provided < out.shape[1])
        out = np.where(partial[:, None] & ~mask, fill, out)
        if max_size is not None:
            limit = np.asarray(max_size, np.float64)
            over = (limit > 0) & (np.abs(out) > limit)
            out = np.where(over, np.copysign(limit, out), out).astype(_F32)
        return np.where(none[:, None], in_size, out)
    s = np.abs(scale).astype(_F32).astype(np.float64)
    if mode == "not_smaller":
        final = np.where(mask, s, -np.inf).max(axis=1)
    else:
        final = np.where(mask, s, np.inf).min(axis=1)
    if max_size is not None:
        for d, limit in enumerate(max_size):
            if limit > 0:
                with np.errstate(divide="ignore"):
                    final = np.minimum(final, float(limit) / in_size[:, d].astype(np.float64))
    change = ~mask | (np.abs(scale) != final[:, None])
    scale = np.where(change, np.copysign(final[:, None], scale), scale)
    out = np.where(change, (in_size * scale).astype(_F32), out)
    return np.where(none[:, None], in_size, out)


def output_sizes(op, requested, lo, hi, mode, max_size, subpixel_scale, alignment=0.5, rounding=None,
                 empty=None):
    """(out sizes [N, k] int64, roi_lo, roi_hi [N, k] float32) as DALI's CalculateSampleParams
    computes them, in float32, for the whole batch. `alignment`: the point of the ROI an
    adjusted ROI keeps (0 start, 0.5 center, 1 end; [N, k] or a number); `rounding`: of the
    fractional sizes (float64 array -> int64 array; default half away from zero); `empty`:
    [N] samples without elements, whose sizes may be 0."""
    req = requested.astype(_F32)
    lo, hi = lo.astype(_F32), hi.astype(_F32)
    in_size = hi - lo
    flipped = in_size < 0
    lo, hi = np.where(flipped, hi, lo), np.where(flipped, lo, hi)
    req = np.where(flipped, -req, req)
    in_size = np.abs(in_size)
    out = _adjust_output_size(req, in_size, mode, max_size).astype(_F32)
    empty_roi = (lo == hi) & (out != 0)
    if empty_roi.any():
        i = int(np.argmax(empty_roi.any(axis=1)))
        raise op.error(f"sample {i}: Cannot produce non-empty output from empty input", ValueError, sample=i)
    o = out.astype(np.float64)
    least = 1 if empty is None else np.where(np.asarray(empty)[:, None], 0, 1)
    size = np.maximum(least, (rounding or round_half_away)(np.abs(o)))
    neg = o < 0
    lo, hi = np.where(neg, hi, lo), np.where(neg, lo, hi)
    if subpixel_scale:
        adjust = size != np.abs(o)
        with np.errstate(divide="ignore", invalid="ignore"):
            adj = np.clip(size / np.abs(o), -10.0, 10.0)
        a = np.asarray(alignment, np.float64)
        center = (1.0 - a) * lo + a * hi
        new_lo = np.clip(center + (lo - center) * adj, -1e9, 1e9).astype(_F32)
        new_hi = np.clip(center + (hi - center) * adj, -1e9, 1e9).astype(_F32)
        lo, hi = np.where(adjust, new_lo, lo), np.where(adjust, new_hi, hi)
    return size, lo, hi


def filters(args, n):
    """[N, 2] int64 (min_filter, mag_filter) DALI interp types: min_filter / mag_filter where
    given, else interp_type, else INTERP_LINEAR."""
    interp = args.batch("interp_type")
    base = np.full(n, int(types.DALIInterpType.INTERP_LINEAR)) if interp is None else \
        np.broadcast_to(np.asarray(interp, np.int64), (n,))
    columns = []
    for name in ("min_filter", "mag_filter"):
        v = args.batch(name)
        columns.append(base if v is None else np.broadcast_to(np.asarray(v, np.int64), (n,)))
    return np.stack(columns, axis=1)


def _out_dtype(op, in_dtype, dtype):
    out = in_dtype if dtype is None else types.to_torch_type(dtype)
    if out not in (in_dtype, torch.float32):
        raise op.error(f"dtype must be the input's ({in_dtype}) or FLOAT, got {dtype}", ValueError)
    return out


def resample(images, sizes, lo, hi, interp, antialias, out_dtype, device):
    """One kernel call for the batch (an ImageBatch): sizes [N, 2], the input window from lo to hi
    ([N, 2] (y, x)), interp [N, 2]; a dense batch when every output has one size. A flat batch
    (images of different sizes in one buffer) comes out flat: no tensor per sample either way."""
    from ..kernels import resize as _  # noqa: F401  (loads the extension on first use)

    rois = torch.from_numpy(np.concatenate([lo, hi], axis=1).astype(np.float32))
    interp = torch.from_numpy(np.ascontiguousarray(interp))
    out_sizes = sizes.reshape(-1).tolist()
    if images.flat is not None:
        out = torch.ops.torchdali.resize.flat(*images.flat, out_sizes, rois, interp, bool(antialias), out_dtype,
                                              images.chw)
        c = images.channels[:, None]
        shapes = np.concatenate([c, sizes], axis=1) if images.chw else np.concatenate([sizes, c], axis=1)
        return TensorList.from_flat(out, shapes, images.layout, device=device)
    if not (sizes == sizes[0]).all():
        op, pixels = torch.ops.torchdali.resize.default, images.samples
    elif images.dense is not None:
        op, pixels = torch.ops.torchdali.resize.dense_in, images.dense
    else:
        op, pixels = torch.ops.torchdali.resize.dense, images.samples
    out = op(pixels, out_sizes, rois, interp, bool(antialias), out_dtype, images.chw)
    return TensorList.make(out, images.layout, device=device)


def _finite(v):
    values = v if isinstance(v, (list, tuple)) else [v]
    return None if all(math.isfinite(x) for x in values) else "must be finite"


RESAMPLING_ARGS = [
    Arg("interp_type", INTERP_TYPE, None, "Interpolation (default INTERP_LINEAR).", per_sample=True),
    Arg("min_filter", INTERP_TYPE, None, "Filter used when scaling down.", per_sample=True),
    Arg("mag_filter", INTERP_TYPE, None, "Filter used when scaling up.", per_sample=True),
    Arg("antialias", BOOL, True, "Widen the filter when scaling down (not for INTERP_NN)."),
    Arg("dtype", DTYPE, None, "Output type: the input's or FLOAT.", choices=(types.UINT8, types.FLOAT16, types.FLOAT)),
    Arg("minibatch_size", INT, 32, "Accepted for compatibility."),
    Arg("temp_buffer_hint", INT, 0, "Accepted for compatibility."),
]


@register("resize", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("Resize",), other_names=("experimental.resize",),
          args=RESAMPLING_ARGS + [
              Arg("resize_x", FLOAT, None, "Output width (0 or absent: keep the aspect ratio).", per_sample=True, check=_finite),
              Arg("resize_y", FLOAT, None, "Output height (0 or absent: keep the aspect ratio).", per_sample=True, check=_finite),
              Arg("resize_z", FLOAT, None, "Output depth of volumes (0 or absent: keep the aspect ratio).",
                  per_sample=True, check=_finite),
              Arg("size", FLOATS, None, "Output size (height, width), or (depth, height, width) of volumes; 0 "
                  "extents are computed.", per_sample=True, check=_finite),
              Arg("mode", STR, None, "'default', 'stretch', 'not_larger' or 'not_smaller'.", choices=_MODES),
              Arg("resize_shorter", FLOAT, None, "Length of the shorter side (keeps the aspect ratio).",
                  per_sample=True, check=_finite),
              Arg("resize_longer", FLOAT, None, "Length of the longer side (keeps the aspect ratio).",
                  per_sample=True, check=_finite),
              Arg("max_size", FLOATS, None, "Limit of the output size (one value or one per axis).", check=_finite),
              Arg("subpixel_scale", BOOL, True, "Adjust the ROI to keep fractional output sizes' scale."),
              Arg("roi_start", FLOATS, None, "Input ROI origin (y, x), or (z, y, x) of volumes.", per_sample=True,
                  check=_finite),
              Arg("roi_end", FLOATS, None, "Input ROI end (y, x), or (z, y, x) of volumes.", per_sample=True,
                  check=_finite),
              Arg("roi_relative", BOOL, False, "ROI coordinates relative to the input size (0..1)."),
              Arg("save_attrs", BOOL, False, "Not supported: must be False.",
                  check=lambda v: "is not supported" if v else None),
          ])
class Resize(Operator):
    """Resize HWC or CHW images (and FHWC / FCHW sequences, frame by frame, and DHWC / CDHW
    volumes in three axes) with DALI's filters, output sizes and ROI semantics."""

    def __init__(self, spec):
        super().__init__(spec)
        a = spec.args
        given = lambda n: n in spec.arg_input_names or a.get(n) is not None  # noqa: E731
        self._sep = given("resize_x") or given("resize_y") or given("resize_z")
        methods = self._sep + given("size") + given("resize_shorter") + given("resize_longer")
        if methods != 1:
            raise ValueError(f"{spec.schema.name}: exactly one way of giving the size must be used: "
                             "resize_x/resize_y, size, resize_shorter or resize_longer")
        if given("resize_shorter") + given("resize_longer") + given("mode") > 1:
            raise ValueError(f"{spec.schema.name}: 'resize_shorter', 'resize_longer' and 'mode' are mutually "
                             "exclusive")
        if given("roi_start") != given("roi_end"):
            raise ValueError(f"{spec.schema.name}: 'roi_start' and 'roi_end' must be given together")
        self._has_roi = given("roi_start")
        self._size_args = [n for n in ("size", "resize_x", "resize_y", "resize_z", "resize_shorter", "resize_longer")
                           if given(n)]
        self._size_arg = "size" if given("size") else "resize_shorter" if given("resize_shorter") else \
            "resize_longer" if given("resize_longer") else None
        self._mode = ("not_smaller" if given("resize_shorter") else "not_larger" if given("resize_longer")
                      else a.get("mode") or "default")
        ms = a.get("max_size")
        if ms is not None and len(ms) not in (1, 2, 3):
            raise ValueError(f"{spec.schema.name}: 'max_size' must have 1, 2 or 3 values, got {ms}")
        self._max_size_arg = ms
        self._given = given
        self._fixed = self._fixed_size(spec)
        self._filters = {}  # n -> filters(args, n), when no filter argument is per sample

    def _max_for(self, k):
        """max_size for k axes: one value for all, or one per axis."""
        ms = self._max_size_arg
        if ms is None:
            return None
        if len(ms) not in (1, k):
            raise self.error(f"'max_size' has {len(ms)} values for {k} axes", ValueError)
        return list(ms) * k if len(ms) == 1 else list(ms)

    def _fixed_size(self, spec):
        """The output size (height, width) when the arguments alone decide it, for every
        non-empty image: constant, positive, whole-pixel extents on both axes, without a ROI,
        a maximum or an aspect-ratio mode. Then a batch skips the size arithmetic."""
        if self._has_roi or self._max_size_arg is not None or self._mode not in ("default", "stretch") or \
                any(n in spec.arg_input_names for n in self._size_args):
            return None
        a = spec.args
        v = [a.get("resize_y"), a.get("resize_x")] if self._sep else list(a.get("size") or ())
        if len(v) != 2 or any(x is None for x in v):  # (resize_shorter / longer have their modes)
            return None
        hw = np.asarray(v, _F32)
        if not ((hw >= 1) & (hw == np.round(hw)) & (hw < 2 ** 31)).all():  # larger: refused by the general path
            return None
        return hw.astype(np.int64)

    def plan(self, inputs):
        plan_images(self, inputs[0], IMAGE_DTYPES + RESIZE_WIDENED, sequences=True, volumes=True)
        dtype = self.spec.args["dtype"]
        out = types.to_torch_type(dtype) if dtype is not None else inputs[0].dtype
        return [BatchSpec(inputs[0].device, out, image_ndim(inputs[0]), inputs[0].layout)], over_frames(self, self.step)

    def _requested(self, args, n, k=2):
        """[N, k] requested extents ((height, width), or (depth, height, width) for k = 3); 0 =
        keep the aspect ratio."""
        if self._sep:
            names = ("resize_z", "resize_y", "resize_x")[3 - k:]
            if k == 2 and args.batch("resize_z") is not None:
                raise self.error("'resize_z' applies to volumes (DHWC, CDHW), not to images", ValueError)
            return np.stack([np.zeros(n) if v is None else np.broadcast_to(np.asarray(v, np.float64), (n,))
                             for v in (args.batch(name) for name in names)], axis=1)
        v = args.batch(self._size_arg)
        if self._size_arg != "size":
            v = np.broadcast_to(np.asarray(v, np.float64), (n,))
            return np.stack([v] * k, axis=1)
        v = np.asarray(v, np.float64)
        if v.shape[-1] == 1:
            v = np.concatenate([v] * k, axis=-1)
        if v.shape[-1] != k:
            what = "(height, width)" if k == 2 else "(depth, height, width) for volumes"
            raise self.error(f"'size' must have {k} values {what}, got {v.tolist()}", ValueError)
        return np.broadcast_to(v, (n, k))

    def _roi(self, args, hw):
        """The input windows (lo, hi), [N, 2] each: the ROI arguments, or the whole images."""
        hw = hw.astype(np.float64)
        if not self._has_roi:
            return np.zeros_like(hw), hw
        rs, re = (np.asarray(args.batch(name), np.float64) for name in ("roi_start", "roi_end"))
        k = hw.shape[1]
        if rs.shape[-1] != k or re.shape[-1] != k:
            raise self.error(f"'roi_start'/'roi_end' must have {k} values {'(y, x)' if k == 2 else '(z, y, x)'}",
                             ValueError)
        if args["roi_relative"]:
            rs, re = rs * hw, re * hw
        lo, hi = np.broadcast_arrays(rs, re)
        extent = np.broadcast_to(np.abs(hi - lo), hw.shape)
        if not (extent <= MAX_ROI_EXTENT).all():  # NaN too
            i = int(np.argmax(~(extent <= MAX_ROI_EXTENT).all(axis=1)))
            raise self.error(f"'roi_start'/'roi_end' give sample {i} a window of {extent[i].tolist()} pixels; each "
                             f"extent must be finite and at most {MAX_ROI_EXTENT:,} (the filter reads every pixel of "
                             "it)", ValueError, sample=i)
        tiny = np.abs(hi - lo) < 1e-3  # DALI widens a degenerate ROI to 1e-3
        off = np.where(lo <= hi, 0.5e-3, -0.5e-3)
        lo, hi = np.where(tiny, lo - off, lo), np.where(tiny, hi + off, hi)
        empty = (hw == 0).any(axis=1)[:, None]  # an empty image keeps its (empty) window
        return np.where(empty, 0.0, lo), np.where(empty, hw, hi)

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        if len(batch) == 0:
            return [batch]
        in_dtype = types.to_torch_type(batch.dtype)
        out_dtype = _out_dtype(self, in_dtype, args["dtype"])
        if in_dtype in RESIZE_WIDENED:  # through float32, back to the type asked for
            out = self._resize(widened(batch), args, torch.float32)
            return [out if out_dtype == torch.float32 else narrowed(out, out_dtype)]
        return [self._resize(batch, args, out_dtype)]

    def _resize(self, batch, args, out_dtype):
        if batch.layout() in VOLUME_LAYOUTS:
            return self._resize_volumes(batch, args, out_dtype)
        images = image_batch(self, batch)
        n = len(images)
        sizes, lo, hi = self._sizes(args, images.hw)
        refuse_huge_outputs(self, sizes, self._size_args)
        return resample(images, sizes, lo, hi, self._batch_filters(args, n), args["antialias"], out_dtype, batch.device)

    def _sizes(self, args, hw):
        """(output sizes [N, 2] int64, input windows lo, hi [N, 2] float32) for images of sizes `hw`."""
        n = len(hw)
        if self._fixed is not None and hw.all():
            return np.broadcast_to(self._fixed, (n, 2)), np.zeros((n, 2), _F32), hw.astype(_F32)
        lo, hi = self._roi(args, hw)
        return output_sizes(self, self._requested(args, n), lo, hi, self._mode, self._max_for(2),
                            args["subpixel_scale"])

    def _resize_volumes(self, batch, args, out_dtype):
        """DHWC or CDHW volumes resized in two separable passes of the image kernel, through
        float32: every depth plane in height and width, then each sample's planes in depth
        (the planes side by side as the rows of one image, whose width stays)."""
        from ..kernels.resize import resize  # loads the extension on first use

        layout = batch.layout()
        shapes = image_shapes(self, batch, layout)
        dtype = types.to_torch_type(batch.dtype)
        if dtype not in IMAGE_DTYPES:
            raise dtype_error(self, dtype)
        cf = layout == "CDHW"
        dhw = shapes[:, 1:] if cf else shapes[:, :3]
        if (dhw == 0).any():
            i = int(np.argmax((dhw == 0).any(axis=1)))
            raise self.error(f"sample {i} is empty ({tuple(shapes[i].tolist())})", ValueError, sample=i)
        n = len(batch)
        lo, hi = self._roi(args, dhw)
        sizes, lo, hi = output_sizes(self, self._requested(args, n, 3), lo, hi, self._mode, self._max_for(3),
                                     args["subpixel_scale"])
        refuse_huge_outputs(self, sizes, self._size_args)
        interp = torch.from_numpy(np.ascontiguousarray(self._batch_filters(args, n)))
        samples = batch.as_torch_list()
        planes = [s.reshape(-1, 1, *s.shape[2:]) if cf else s for s in samples]  # CDHW: C * D one-channel CHW planes
        rows = np.repeat(np.arange(n), [len(p) for p in planes])
        first = resize([f for p in planes for f in p.unbind(0)], sizes[rows][:, 1:].tolist(),
                       torch.from_numpy(np.concatenate([lo[rows][:, 1:], hi[rows][:, 1:]], axis=1)),
                       interp[torch.from_numpy(rows)], bool(args["antialias"]), torch.float32, cf)
        starts = np.concatenate([[0], np.cumsum([len(p) for p in planes])])
        columns = []  # each sample's planes as one image: depth its height, a plane's pixels its width
        for i, s in enumerate(samples):
            stacked = torch.stack(first[starts[i]:starts[i + 1]])
            columns.append(stacked.reshape(s.shape[0], s.shape[1], -1) if cf else
                           stacked.reshape(s.shape[0], -1, s.shape[3]))
        whole = np.zeros((n, 1))  # a zero-size ROI keeps the axis as it is
        rois = np.concatenate([lo[:, :1], whole, hi[:, :1], whole], axis=1).astype(np.float32)
        second = resize(columns, [(int(d), c.shape[2 if cf else 1]) for d, c in zip(sizes[:, 0], columns)],
                        torch.from_numpy(rois), interp, bool(args["antialias"]), out_dtype, cf)
        out = [o.reshape(o.shape[0], *sizes[i].tolist()) if cf else o.reshape(*sizes[i].tolist(), o.shape[-1])
               for i, o in enumerate(second)]
        return TensorList.make(out, layout, device=batch.device)

    def _batch_filters(self, args, n):
        """filters(args, n), computed once per batch size where no filter is per sample."""
        if any(args.is_per_sample(name) for name in ("interp_type", "min_filter", "mag_filter")):
            return filters(args, n)
        if n not in self._filters:
            self._filters[n] = filters(args, n)
        return self._filters[n]


def _single_or_pair(v):
    """DALI's rule for a range argument: one value (repeated) or [min, max] with min <= max;
    finite (an infinite bound has no uniform draw)."""
    if len(v) not in (1, 2):
        return "must be one value or two values [min, max]"
    if not all(math.isfinite(x) for x in v):
        return "must be finite"
    return None if v[0] <= v[-1] else "must be [min, max] with min <= max (an empty range)"


# The widest input window: resizing reads every pixel of it (the antialiasing filter spans the
# window over the output), clamped to the image, so a 1e8-pixel window took 29 s for 4 pixels.
MAX_ROI_EXTENT = 1 << 20
MAX_ATTEMPTS = 10 ** 6  # random windows drawn at once per sample: memory, not time, bounds it


def _positive_range(v):
    """A range of ratios, drawn on a log scale: also above 0."""
    return _single_or_pair(v) or (None if v[0] > 0 else "must be > 0")


@register("random_resized_crop", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("RandomResizedCrop",),
          args=RESAMPLING_ARGS + [
              Arg("size", FLOATS, REQUIRED, "Output size (height, width), or one value for both.",
                  check=_finite),
              Arg("random_area", FLOATS, [0.08, 1.0], "Range of the crop's area as a fraction of the image's.",
                  check=_single_or_pair),
              Arg("random_aspect_ratio", FLOATS, [3.0 / 4.0, 4.0 / 3.0], "Range of the crop's width / height.",
                  check=_positive_range),
              Arg("num_attempts", INT, 10, "Tries to find a window before DALI's fallback.",
                  check=lambda v: None if 0 < v <= MAX_ATTEMPTS else f"must be in [1, {MAX_ATTEMPTS:,}]"),
          ])
class RandomResizedCrop(RandomOperator):
    """Crop a random window (random area and aspect ratio, as in Inception training) and
    resize it to `size` with DALI's filters, in one kernel call for the batch."""

    def plan(self, inputs):
        plan_images(self, inputs[0])
        a = self.spec.args
        size = list(a["size"])
        if len(size) == 1:
            size = size * 2
        if len(size) != 2 or any(v <= 0 for v in size):
            raise self.error(f"'size' must be one or two positive values, got {a['size']}", ValueError)
        refuse_huge_outputs(self, [size], ["size"])  # also before the sizes become int64
        self.size = np.array([int(v) for v in size], np.int64)
        self.area, self.aspect = (pair(a[name]) for name in ("random_area", "random_aspect_ratio"))
        dtype = a["dtype"]
        out = types.to_torch_type(dtype) if dtype is not None else inputs[0].dtype
        return [BatchSpec(inputs[0].device, out, 3, inputs[0].layout)], self.step

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        if len(batch) == 0:
            return [batch]
        images = image_batch(self, batch)
        windows = self.draw_windows(images.hw, args)
        return [self.resize_windows(images, windows[:, :2], windows[:, :2] + windows[:, 2:], args, batch.device)]

    def draw_windows(self, hw, args, rows=None):
        """The random windows [N, 4] (y, x, h, w) of images of sizes `hw` [N, 2], drawn from
        this operator's generator; `rows`: the samples' indices in the batch, for errors."""
        empty = (hw == 0).any(axis=1)
        if empty.any():
            k = int(np.argmax(empty))
            i = k if rows is None else int(rows[k])
            raise self.error(f"sample {i} is empty ({tuple(hw[k])})", ValueError, sample=i)
        return random_crop_windows(self.rng, hw, self.area, self.aspect, args["num_attempts"])

    def resize_windows(self, images, lo, hi, args, device):
        """The windows from `lo` to `hi` ([N, 2] (y, x)) of `images` (an ImageBatch) resized
        to `size`, in one kernel call."""
        n = len(images)
        out_dtype = self.output_dtype(images.dtype, args)
        sizes = np.broadcast_to(self.size, (n, 2))
        refuse_huge_outputs(self, sizes, ["size"])
        return resample(images, sizes, lo.astype(np.float32), hi.astype(np.float32), filters(args, n),
                        args["antialias"], out_dtype, device)

    def output_dtype(self, in_dtype, args):
        return _out_dtype(self, in_dtype, args["dtype"])

    @property
    def smooth(self):
        """Whether its filters (constant arguments) are all smooth ones: nearest neighbour
        picks a pixel by rounding, which an offset window may tip to the next one."""
        return (filters(Args(self, {}), 1) != int(types.DALIInterpType.INTERP_NN)).all()

    @staticmethod
    def margin(windows, size):
        """Pixels around each window [N, 4] that the resize to `size` may read: the widest
        filter's reach (Lanczos3's 3 input pixels per output pixel when shrinking, 3 when
        enlarging), and 2 for rounding; [N, 2] (rows, columns)."""
        ratio = np.maximum(1.0, windows[:, 2:] / np.asarray(size, np.float64))
        return np.ceil(3 * ratio).astype(np.int64) + 2


def pair(v):
    """A range argument as [min, max] (one value stands for both)."""
    return [float(v[0]), float(v[-1])]
