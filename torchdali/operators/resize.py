"""`resize`: DALI's image resize. Output sizes follow DALI's ResizeAttr exactly (modes,
aspect-ratio keeping, max_size, ROI, subpixel_scale), computed in float32 as DALI does; the
pixels come from the `torchdali::resize` kernel (csrc/) in one call for the whole batch."""
import math

import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, FLOAT, FLOATS, INT, INTERP_TYPE, REQUIRED, STR, Arg, register
from ..tensor_list import TensorList
from .base import Operator, RandomOperator

_F32 = np.float32
_MODES = ("default", "stretch", "not_larger", "not_smaller")


def _round_int(v):
    return int(math.floor(v + 0.5)) if v >= 0 else -int(math.floor(-v + 0.5))


def _adjust_output_size(out, in_size, mode, max_size):
    """DALI's ResizeAttr::AdjustOutputSize on float32 extents (out is modified)."""
    nd = len(out)
    mask = [out[d] != 0 and in_size[d] != 0 for d in range(nd)]
    scale = [float(out[d]) / float(in_size[d]) if in_size[d] else 1.0 for d in range(nd)]
    provided = sum(mask)
    if provided == 0:
        return [in_size[d] for d in range(nd)]
    if mode in ("default", "stretch"):
        if provided < nd:
            if mode == "default":
                avg = 1.0
                for d in range(nd):
                    if mask[d]:
                        avg *= abs(scale[d])
                if provided > 1:
                    avg = avg ** (1.0 / provided)
            for d in range(nd):
                if not mask[d]:
                    out[d] = _F32(float(in_size[d]) * avg) if mode == "default" else in_size[d]
        if max_size is not None:
            for d in range(nd):
                if max_size[d] > 0 and abs(out[d]) > max_size[d]:
                    out[d] = _F32(math.copysign(max_size[d], out[d]))
        return out
    final, first = 0.0, True
    for d in range(nd):
        if mask[d]:
            s = float(_F32(abs(scale[d])))
            if first or (mode == "not_smaller" and s > final) or (mode == "not_larger" and s < final):
                final = s
            first = False
    if max_size is not None:
        for d in range(nd):
            if max_size[d] > 0:
                final = min(final, float(max_size[d]) / float(in_size[d]))
    for d in range(nd):
        if not mask[d] or abs(scale[d]) != final:
            scale[d] = math.copysign(final, scale[d])
            out[d] = _F32(float(in_size[d]) * scale[d])
    return out


def sample_params(requested, lo, hi, mode, max_size, subpixel_scale):
    """(out_size, roi_lo, roi_hi) of one sample, as DALI's ResizeAttr::CalculateSampleParams."""
    nd = len(requested)
    req = [_F32(v) for v in requested]
    lo, hi = [_F32(v) for v in lo], [_F32(v) for v in hi]
    in_size = []
    for d in range(nd):
        sz = _F32(hi[d] - lo[d])
        if sz < 0:
            lo[d], hi[d] = hi[d], lo[d]
            req[d] = -req[d]
            sz = -sz
        in_size.append(sz)
    out = _adjust_output_size(req, in_size, mode, max_size)
    sizes = []
    for d in range(nd):
        if lo[d] == hi[d] and out[d] != 0:
            raise ValueError("Cannot produce non-empty output from empty input")
        o = float(out[d])
        size = max(1, _round_int(abs(o)))
        if o < 0:
            lo[d], hi[d] = hi[d], lo[d]
        if subpixel_scale and size != abs(o):
            adj = min(max(size / abs(o), -10.0), 10.0)
            center = (float(lo[d]) + float(hi[d])) * 0.5
            lo[d] = _F32(min(max(center + (float(lo[d]) - center) * adj, -1e9), 1e9))
            hi[d] = _F32(min(max(center + (float(hi[d]) - center) * adj, -1e9), 1e9))
        sizes.append(size)
    return sizes, [float(v) for v in lo], [float(v) for v in hi]


def sample_filters(i, args):
    """[min_filter, mag_filter] (DALI interp types) of sample i: min_filter/mag_filter where
    given, else interp_type, else INTERP_LINEAR."""
    interp = args.sample("interp_type", i)
    base = int(types.DALIInterpType.INTERP_LINEAR) if interp is None else int(interp)
    mn, mg = args.sample("min_filter", i), args.sample("mag_filter", i)
    return [base if mn is None else int(mn), base if mg is None else int(mg)]


def _out_dtype(op, in_dtype, dtype):
    out = in_dtype if dtype is None else types.to_torch_type(dtype)
    if out not in (in_dtype, torch.float32):
        raise op.error(f"dtype must be the input's ({in_dtype}) or FLOAT, got {dtype}", ValueError)
    return out


def _images(op, batch):
    """The batch's samples, their layout ('HWC' or 'CHW') and each one's (height, width)."""
    layout = batch.layout() or "HWC"
    if layout not in ("HWC", "CHW"):
        raise op.error(f"input layout '{layout}' is not supported; give HWC or CHW images", ValueError)
    images = batch.as_torch_list()
    for i, img in enumerate(images):
        if img.dim() != 3:
            raise op.error(f"sample {i} has shape {tuple(img.shape)}; expected {layout} images", ValueError)
    hw = [tuple(img.shape[1:] if layout == "CHW" else img.shape[:2]) for img in images]
    return images, layout, hw


def _resample(images, layout, sizes, rois, filters, args, out_dtype, device):
    """One kernel call for the batch: a dense batch when every output has one size."""
    from ..kernels.resize import resize  # loads the extension on first use

    out = resize(images, sizes, torch.tensor(rois, dtype=torch.float32),
                 torch.tensor(filters, dtype=torch.int64), bool(args["antialias"]), out_dtype,
                 chw=layout == "CHW", dense=all(s == sizes[0] for s in sizes))
    return TensorList.make(out, layout, device=device)


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


@register("resize", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("Resize",),
          args=RESAMPLING_ARGS + [
              Arg("resize_x", FLOAT, None, "Output width (0 or absent: keep the aspect ratio).", per_sample=True, check=_finite),
              Arg("resize_y", FLOAT, None, "Output height (0 or absent: keep the aspect ratio).", per_sample=True, check=_finite),
              Arg("size", FLOATS, None, "Output size (height, width); 0 extents are computed.", per_sample=True, check=_finite),
              Arg("mode", STR, None, "'default', 'stretch', 'not_larger' or 'not_smaller'.", choices=_MODES),
              Arg("resize_shorter", FLOAT, None, "Length of the shorter side (keeps the aspect ratio).",
                  per_sample=True, check=_finite),
              Arg("resize_longer", FLOAT, None, "Length of the longer side (keeps the aspect ratio).",
                  per_sample=True, check=_finite),
              Arg("max_size", FLOATS, None, "Limit of the output size (one value or one per axis).", check=_finite),
              Arg("subpixel_scale", BOOL, True, "Adjust the ROI to keep fractional output sizes' scale."),
              Arg("roi_start", FLOATS, None, "Input ROI origin (y, x).", per_sample=True, check=_finite),
              Arg("roi_end", FLOATS, None, "Input ROI end (y, x).", per_sample=True, check=_finite),
              Arg("roi_relative", BOOL, False, "ROI coordinates relative to the input size (0..1)."),
              Arg("save_attrs", BOOL, False, "Not supported: must be False.",
                  check=lambda v: "is not supported" if v else None),
          ])
class Resize(Operator):
    """Resize HWC or CHW images with DALI's filters, output sizes and ROI semantics."""

    def __init__(self, spec):
        super().__init__(spec)
        a = spec.args
        given = lambda n: n in spec.arg_input_names or a.get(n) is not None  # noqa: E731
        self._sep = given("resize_x") or given("resize_y")
        methods = self._sep + given("size") + given("resize_shorter") + given("resize_longer")
        if methods != 1:
            raise ValueError("resize: exactly one way of giving the size must be used: resize_x/resize_y, "
                             "size, resize_shorter or resize_longer")
        if given("resize_shorter") + given("resize_longer") + given("mode") > 1:
            raise ValueError("resize: 'resize_shorter', 'resize_longer' and 'mode' are mutually exclusive")
        if given("roi_start") != given("roi_end"):
            raise ValueError("resize: 'roi_start' and 'roi_end' must be given together")
        self._has_roi = given("roi_start")
        self._size_arg = "size" if given("size") else "resize_shorter" if given("resize_shorter") else \
            "resize_longer" if given("resize_longer") else None
        self._mode = ("not_smaller" if given("resize_shorter") else "not_larger" if given("resize_longer")
                      else a.get("mode") or "default")
        ms = a.get("max_size")
        if ms is not None and len(ms) not in (1, 2):
            raise ValueError(f"resize: 'max_size' must have 1 or 2 values, got {ms}")
        self._max_size = None if ms is None else (list(ms) * 2)[:2]
        self._given = given

    def _requested(self, i, args):
        if self._sep:
            y = args.sample("resize_y", i) or 0.0
            x = args.sample("resize_x", i) or 0.0
            return [y, x]
        v = args.sample(self._size_arg, i)
        if self._size_arg == "size":
            v = list(v)
            if len(v) == 1:
                v = v * 2
            if len(v) != 2:
                raise self.error(f"sample {i}: 'size' must have 2 values (height, width), got {v}", ValueError)
            return v
        return [v, v]

    def sample_plan(self, i, shape, args):
        """(out (h, w), roi (y0, x0, y1, x1), (min_filter, mag_filter)) of sample i."""
        h, w = int(shape[0]), int(shape[1])
        lo, hi = [0.0, 0.0], [float(h), float(w)]
        if self._has_roi and h > 0 and w > 0:
            rs, re = list(args.sample("roi_start", i)), list(args.sample("roi_end", i))
            if len(rs) != 2 or len(re) != 2:
                raise self.error(f"sample {i}: 'roi_start'/'roi_end' must have 2 values (y, x)", ValueError)
            for d, size in enumerate((h, w)):
                a, b = float(rs[d]), float(re[d])
                if args["roi_relative"]:
                    a, b = a * size, b * size
                if abs(b - a) < 1e-3:
                    off = 0.5e-3 if a <= b else -0.5e-3
                    a, b = a - off, b + off
                lo[d], hi[d] = a, b
        try:
            out, lo, hi = sample_params(self._requested(i, args), lo, hi, self._mode, self._max_size,
                                        args["subpixel_scale"])
        except ValueError as e:
            raise self.error(f"sample {i}: {e}", ValueError) from None
        return out, (lo[0], lo[1], hi[0], hi[1]), sample_filters(i, args)

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        images, layout, hws = _images(self, batch)
        if not images:
            return [batch]
        sizes, rois, filters = [], [], []
        for i, hw in enumerate(hws):
            out, roi, flt = self.sample_plan(i, hw, args)
            sizes.append(out)
            rois.append(roi)
            filters.append(flt)
        out_dtype = _out_dtype(self, images[0].dtype, args["dtype"])
        return [_resample(images, layout, sizes, rois, filters, args, out_dtype, batch.device)]


def random_crop_window(rng, h, w, area, aspect, num_attempts):
    """(y, x, crop_h, crop_w) as DALI's RandomCropGenerator picks it (log-uniform aspect ratio,
    uniform area, then DALI's fallback), drawing from the NumPy generator `rng`."""
    lo_r, hi_r = float(_F32(aspect[0])), float(_F32(aspect[1]))
    max_hw = float(_F32(1.0 / lo_r))
    min_area = float(_F32(w * h * area[0]))
    max_w = max(1, int(h * hi_r))
    max_h = max(1, int(w * max_hw))
    if h * max_w < min_area:  # image too wide
        ch, cw = h, max_w
    elif w * max_h < min_area:  # image too tall
        ch, cw = max_h, w
    else:
        for _ in range(num_attempts):
            target = float(_F32(rng.uniform(area[0], area[1]) * (h * w)))
            ratio = math.exp(rng.uniform(math.log(lo_r), math.log(hi_r)))
            cw = max(1, _round_int(math.sqrt(target * ratio)))
            ch = max(1, _round_int(math.sqrt(target / ratio)))
            r = float(_F32(cw / ch))
            if cw <= w and ch <= h and lo_r <= r <= hi_r:
                break
        else:
            # DALI's fallback: the whole image (or its widest/tallest allowed part), shrunk to
            # the largest allowed area, keeping its aspect ratio.
            max_area = float(_F32(area[1] * w * h))
            ratio = float(_F32(w / h))
            ch, cw = (h, max_w) if ratio > hi_r else (max_h, w) if ratio < lo_r else (h, w)
            scale = min(1.0, max_area / (ch * cw))
            ch = max(1, int(ch * math.sqrt(scale)))
            cw = max(1, int(cw * math.sqrt(scale)))
    y = int(rng.integers(0, h - ch + 1))
    x = int(rng.integers(0, w - cw + 1))
    return y, x, ch, cw


def _range_of_two(upper):
    def check(v):
        if len(v) != 2 or not 0 < v[0] <= v[1] <= upper:
            return f"must be two values [min, max] with 0 < min <= max <= {upper}"
        return None
    return check


@register("random_resized_crop", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("RandomResizedCrop",),
          args=RESAMPLING_ARGS + [
              Arg("size", FLOATS, REQUIRED, "Output size (height, width), or one value for both.",
                  check=_finite),
              Arg("random_area", FLOATS, [0.08, 1.0], "Range of the crop's area as a fraction of the image's.",
                  check=_range_of_two(1.0)),
              Arg("random_aspect_ratio", FLOATS, [3.0 / 4.0, 4.0 / 3.0], "Range of the crop's width / height.",
                  check=_range_of_two(math.inf)),
              Arg("num_attempts", INT, 10, "Tries to find a window before DALI's fallback.",
                  check=lambda v: None if v > 0 else "must be positive"),
          ])
class RandomResizedCrop(RandomOperator):
    """Crop a random window (random area and aspect ratio, as in Inception training) and
    resize it to `size` with DALI's filters, in one kernel call for the batch."""

    def __init__(self, spec):
        super().__init__(spec)
        size = list(spec.args["size"])
        if len(size) == 1:
            size = size * 2
        if len(size) != 2 or any(v <= 0 for v in size):
            raise ValueError(f"random_resized_crop: 'size' must be one or two positive values, got "
                             f"{spec.args['size']}")
        self._size = [int(v) for v in size]

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        images, layout, hws = _images(self, batch)
        if not images:
            return [batch]
        area, aspect = args["random_area"], args["random_aspect_ratio"]
        rois, filters = [], []
        for i, (h, w) in enumerate(hws):
            h, w = int(h), int(w)
            if h == 0 or w == 0:
                raise self.error(f"sample {i} is empty ({tuple(images[i].shape)})", ValueError)
            y, x, ch, cw = random_crop_window(self.rng, h, w, area, aspect, args["num_attempts"])
            rois.append((y, x, y + ch, x + cw))
            filters.append(sample_filters(i, args))
        out_dtype = _out_dtype(self, images[0].dtype, args["dtype"])
        sizes = [self._size] * len(images)
        return [_resample(images, layout, sizes, rois, filters, args, out_dtype, batch.device)]
