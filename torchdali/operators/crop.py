"""Cropping operators. `crop_mirror_normalize` runs the `torchdali::crop_mirror_normalize`
kernel (csrc/) over the whole batch in one call when the samples share the crop size
and normalization parameters."""
import math

import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, FLOAT, FLOATS, LAYOUT, STR, Arg, register
from ..tensor_list import TensorList
from .base import Operator

_POLICIES = ("error", "pad", "trim_to_shape")


def _in_unit_range(v):
    return None if 0.0 <= v <= 1.0 else "must be in [0, 1]"


def _positive_list(v):
    return None if all(x > 0 for x in v) else "must be positive"


CROP_ARGS = [
    Arg("crop", FLOATS, None, "Crop size (height, width).", per_sample=True, check=_positive_list),
    Arg("crop_h", FLOAT, 0.0, "Crop height (overrides `crop`).", per_sample=True),
    Arg("crop_w", FLOAT, 0.0, "Crop width (overrides `crop`).", per_sample=True),
    Arg("crop_pos_x", FLOAT, 0.5, "Horizontal position of the window: 0 = left, 1 = right.",
        per_sample=True, check=_in_unit_range),
    Arg("crop_pos_y", FLOAT, 0.5, "Vertical position of the window: 0 = top, 1 = bottom.",
        per_sample=True, check=_in_unit_range),
    Arg("out_of_bounds_policy", STR, "error", "A window outside the image: 'error', 'pad' with "
        "fill_values, or 'trim_to_shape'.", choices=_POLICIES),
    Arg("fill_values", FLOATS, [0.0], "Output values of padded pixels (one, or one per channel)."),
]


def crop_window(op, i, shape, args):
    """(y, x, h, w) of sample i's crop window in an image of `shape` (H, W, ...), with
    DALI's anchor rule round(pos * (size - crop)); None when no crop is requested."""
    h, w = shape[0], shape[1]
    crop = args.sample("crop", i)
    ch, cw = (crop if crop else (0.0, 0.0))
    if crop is not None and len(crop) != 2:
        raise op.error(f"argument 'crop' must be (height, width), got {crop}", ValueError)
    ch = args.sample("crop_h", i) or ch
    cw = args.sample("crop_w", i) or cw
    if not ch and not cw:
        return None
    if ch < 0 or cw < 0 or math.isnan(ch) or math.isnan(cw):
        raise op.error(f"sample {i}: crop size ({ch}, {cw}) is not valid", ValueError)
    ch, cw = int(ch or h), int(cw or w)  # DALI truncates fractional sizes (4.6 -> 4 rows)
    if ch <= 0 or cw <= 0:
        raise op.error(f"sample {i}: crop size ({ch}, {cw}) must be positive", ValueError)
    y = _round_half_away(args.sample("crop_pos_y", i) * (h - ch))
    x = _round_half_away(args.sample("crop_pos_x", i) * (w - cw))
    return y, x, ch, cw


def cast_fill(value, dtype):
    """`value` as DALI's static_cast<OutputType>(float) gives it: float32 first; integers
    truncated toward zero and wrapped to the type's width (x86: -3.7 -> 253 in uint8)."""
    v = float(np.float32(value))
    if dtype.is_floating_point:
        return v
    if dtype == torch.bool:
        return v != 0
    bits = torch.iinfo(dtype).bits
    if not math.isfinite(v) or abs(v) >= 2.0 ** 63:
        t = -(1 << 63)  # x86's "integer indefinite"
    else:
        t = int(v)
    if bits == 32 and torch.iinfo(dtype).min < 0 and not -(1 << 31) <= t < (1 << 31):
        t = -(1 << 31)
    t &= (1 << bits) - 1
    return t - (1 << bits) if torch.iinfo(dtype).min < 0 and t >= 1 << (bits - 1) else t


def output_fill(dtype, values):
    """`fill_values` as the float32 tensor the crop kernel writes: already in the output
    type, so that the kernel's rounding does not change them."""
    return torch.tensor([float(cast_fill(v, dtype)) for v in values], dtype=torch.float32)


def _round_half_away(v):
    return int(math.floor(v + 0.5)) if v >= 0 else -int(math.floor(-v + 0.5))


def fit_window(op, i, window, shape, policy):
    """Apply the out-of-bounds policy; returns the window to read (may exceed the image for 'pad')."""
    y, x, ch, cw = window
    h, w = shape[0], shape[1]
    inside = y >= 0 and x >= 0 and y + ch <= h and x + cw <= w
    if inside or policy == "pad":
        return window
    if policy == "error":
        raise op.error(f"sample {i}: the crop window {ch}x{cw} at (y={y}, x={x}) is outside the "
                       f"{h}x{w} image; use out_of_bounds_policy='pad' or 'trim_to_shape'", ValueError)
    y0, x0 = max(y, 0), max(x, 0)
    return y0, x0, min(y + ch, h) - y0, min(x + cw, w) - x0


@register("crop_mirror_normalize", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("CropMirrorNormalize",),
          deprecated_args={"output_dtype": "dtype", "image_type": None},
          args=CROP_ARGS + [
              Arg("mirror", BOOL, False, "Flip the (cropped) image horizontally.", per_sample=True),
              Arg("mean", FLOATS, [0.0], "Mean subtracted per channel.", per_sample=True),
              Arg("std", FLOATS, [1.0], "Standard deviation divided by, per channel.", per_sample=True,
                  check=lambda v: None if all(s != 0 for s in v) else "must not contain 0"),
              Arg("scale", FLOAT, 1.0, "Multiplies the normalized value."),
              Arg("shift", FLOAT, 0.0, "Added after scaling."),
              Arg("dtype", DTYPE, types.FLOAT, "Output type.",
                  choices=(types.FLOAT, types.FLOAT16, types.UINT8, types.INT8, types.INT16, types.INT32)),
              Arg("output_layout", LAYOUT, types.NCHW, "'CHW' or 'HWC'.", choices=("CHW", "HWC")),
              Arg("pad_output", BOOL, False, "Pad the channels to the next power of two with zeros."),
          ])
class CropMirrorNormalize(Operator):
    """Crop, flip and normalize HWC or CHW images: (in - mean) / std * scale + shift, into
    one dense batch in CHW or HWC layout."""

    def run(self, inputs, args, ctx):
        from ..kernels.crop_mirror_normalize import crop_mirror_normalize  # loads the extension on first use

        batch = inputs[0]
        in_layout = batch.layout() or "HWC"
        if in_layout not in ("HWC", "CHW"):
            raise self.error(f"input layout '{in_layout}' is not supported; give HWC or CHW images",
                             ValueError)
        in_chw = in_layout == "CHW"
        images = batch.as_torch_list()
        n = len(images)
        if n == 0:
            return [batch]
        policy = args["out_of_bounds_policy"]
        plans = []
        for i, img in enumerate(images):
            if img.dim() != 3:
                raise self.error(f"sample {i} has shape {tuple(img.shape)}; expected {in_layout} "
                                 "images", ValueError)
            hw = img.shape[1:] if in_chw else img.shape[:2]
            c = img.shape[0] if in_chw else img.shape[2]
            window = crop_window(self, i, hw, args) or (0, 0, hw[0], hw[1])
            window = fit_window(self, i, window, hw, policy)
            mean, std = args.sample("mean", i), args.sample("std", i)
            for name, v in (("mean", mean), ("std", std)):
                if len(v) not in (1, c):
                    raise self.error(f"argument '{name}' has {len(v)} values for {c} channels", ValueError)
            plans.append((window, tuple(mean), tuple(std), bool(args.sample("mirror", i))))
        out_dtype = types.to_torch_type(args["dtype"])
        chw = args["output_layout"] == "CHW"
        c = images[0].shape[0 if in_chw else 2]
        out_c = 1 << (c - 1).bit_length() if args["pad_output"] else c
        fill = output_fill(out_dtype, args["fill_values"])

        def call(idx, window_hw, mean, std):
            anchors = torch.tensor([plans[i][0][:2] for i in idx], dtype=torch.int64)
            mirror = torch.tensor([plans[i][3] for i in idx], dtype=torch.uint8)
            inv_std = torch.tensor([1.0 / s for s in std], dtype=torch.float32)
            return crop_mirror_normalize(
                [images[i] for i in idx], anchors, mirror, torch.tensor(mean, dtype=torch.float32), inv_std,
                window_hw[0], window_hw[1], out_dtype, chw, out_c, args["scale"], args["shift"], fill,
                in_chw=in_chw)

        layout = "CHW" if chw else "HWC"
        keys = {(p[0][2], p[0][3], p[1], p[2]) for p in plans}
        if len(keys) == 1:
            h, w, mean, std = keys.pop()
            out = call(list(range(n)), (h, w), mean, std)
            return [TensorList.make(out, layout, device=batch.device)]
        outs = [call([i], p[0][2:], p[1], p[2])[0] for i, p in enumerate(plans)]
        return [TensorList.make(outs, layout, device=batch.device)]
