"""`crop`: a window of each image at (crop_pos_y, crop_pos_x), and the batched call of the
`torchdali::crop_mirror_normalize` kernel (csrc/) that crop and crop_mirror_normalize
share: one call for the batch when the windows have one size (the usual case), one call
per distinct size otherwise."""
import math

import numpy as np
import torch

from .. import types
from ..schema import DTYPE, FLOAT, FLOATS, STR, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator
from .images import (IMAGE_DTYPES, VOLUME_LAYOUTS, check_channels, image_batch, image_ndim, over_frames, plan_images,
                     volume_batch)
from .conversions import convert_saturate
from .windows import crop_windows, fit_windows, fit_windows_nd, volume_windows, whole_images

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
    Arg("crop_d", FLOAT, 0.0, "Crop depth, for volumes (DHWC, CDHW; overrides `crop`); images have no depth.",
        per_sample=True),
    Arg("crop_pos_z", FLOAT, 0.5, "Depth position of the window, for volumes: 0 = front, 1 = back.",
        per_sample=True, check=_in_unit_range),
    Arg("out_of_bounds_policy", STR, "error", "A window outside the image: 'error', 'pad' with "
        "fill_values, or 'trim_to_shape'.", choices=_POLICIES),
    Arg("fill_values", FLOATS, [0.0], "Output values of padded pixels (one, or one per channel)."),
]


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


def crop_normalize(images, windows, *, out_dtype, out_chw, fill, device, mirror=0, mean=(0.0,), std=(1.0,),
                   out_channels=0, scale=1.0, shift=0.0):
    """`images` (an ImageBatch) cut to `windows` ([N, 4] (y, x, h, w)), flipped where
    `mirror`, normalized as (in - mean) / std * scale + shift: a dense TensorList when the
    windows have one size and mean/std are one row, else one kernel call per distinct
    (size, mean, std)."""
    from ..kernels.crop_mirror_normalize import crop_mirror_normalize  # loads the extension on first use

    n = len(images)
    mean, std = np.asarray(mean, np.float64), np.asarray(std, np.float64)
    mirror = torch.from_numpy(np.broadcast_to(np.asarray(mirror, np.uint8), (n,)).copy())
    anchors = torch.from_numpy(np.ascontiguousarray(windows[:, :2]))
    keys = [windows[:, 2:]] + [v for v in (mean, std) if v.ndim == 2]  # per-sample rows split the batch
    layout = "CHW" if out_chw else "HWC"

    def call(idx, first):
        h, w = (int(v) for v in windows[first, 2:])
        row_mean = mean[first] if mean.ndim == 2 else mean
        row_std = std[first] if std.ndim == 2 else std
        if idx is not None:
            pixels, shapes = [samples[i] for i in idx], None
        elif images.dense is None and images.flat is not None:  # the whole batch, held in one buffer
            pixels, shapes = images.flat
        else:
            pixels, shapes = images.pixels, None
        return crop_mirror_normalize(
            pixels, anchors if idx is None else anchors[idx], mirror if idx is None else mirror[idx],
            torch.from_numpy(row_mean.astype(np.float32)), torch.from_numpy((1.0 / row_std).astype(np.float32)), h, w,
            out_dtype, out_chw, out_channels, scale, shift, fill, in_chw=images.chw, shapes=shapes)

    key = np.concatenate([k.astype(np.float64) for k in keys], axis=1)
    if (key == key[0]).all():
        return TensorList.make(call(None, 0), layout, device=device)
    outs = [None] * n
    samples = images.samples
    _, first, group = np.unique(key, axis=0, return_index=True, return_inverse=True)
    for g, f in enumerate(first):
        idx = np.flatnonzero(group.reshape(-1) == g)
        for i, out in zip(idx, call(torch.from_numpy(idx), int(f))):
            outs[i] = out
    return TensorList.make(outs, layout, device=device)


# Integer images (label maps, masks) that crop takes beside IMAGE_DTYPES, as DALI's crop does;
# they are cut by indexing, not by the normalizing kernel.
LABEL_DTYPES = (torch.int8, torch.uint16, torch.int16, torch.int32, torch.int64)


def gather_windows_nd(pixels, windows, channel_first):
    """The windows [n, 2k] (k anchors, then k extents, equal for every row) of a dense batch
    `pixels` [n, *k spatial, C] (or [n, C, *k spatial]) in one indexing call: (the elements
    [n, *extents, C], channels last, in the input's type; whether each position lies inside
    its sample, [n, *extents, 1])."""
    n, k = len(windows), windows.shape[1] // 2
    first = 2 if channel_first else 1
    sizes = pixels.shape[first:first + k]
    index, inside = [], None
    for a in range(k):
        shape = [n] + [1] * k
        shape[1 + a] = -1
        at = torch.from_numpy(windows[:, a:a + 1] + np.arange(windows[0, k + a]))
        ok = ((at >= 0) & (at < sizes[a])).reshape(shape)
        inside = ok if inside is None else inside & ok
        index.append(at.clamp(0, max(sizes[a] - 1, 0)).reshape(shape).to(pixels.device))
    rows = torch.arange(n, device=pixels.device).reshape([n] + [1] * k)
    # torch has few uint16 kernels (no indexing or where in some versions): int16 bits stand in
    source = pixels.view(torch.int16) if pixels.dtype == torch.uint16 else pixels
    # advanced indices around a slice (channels first): the gathered dims come first
    out = source[(rows, slice(None), *index)] if channel_first else source[(rows, *index)]
    return out.view(pixels.dtype), inside.to(pixels.device).unsqueeze(-1)


def take_windows(pixels, windows, fill, out_dtype, channel_first):
    """gather_windows_nd's windows converted to `out_dtype` (saturating), `fill` ([1] or one per
    channel, already in the output type) where a window leaves its sample; in the input's layout."""
    out, inside = gather_windows_nd(pixels, windows, channel_first)
    out, values = convert_saturate(out, out_dtype), fill.reshape(*[1] * (out.dim() - 1), -1).to(pixels.device)
    if out_dtype == torch.uint16:
        values = values.to(torch.int32).to(torch.int16)  # the fill's bits (it is in 0..65535)
        out = torch.where(inside, out.view(torch.int16), values).view(torch.uint16)
    else:
        out = torch.where(inside, out, values.to(out_dtype))
    return (out.movedim(-1, 1) if channel_first else out).contiguous()


def cut_batch(dense, samples, windows, fill, out_dtype, channel_first):
    """take_windows over a batch: one call for a dense batch whose windows share a size, one
    per sample otherwise (`samples`: a callable giving the list of samples)."""
    k = windows.shape[1] // 2
    if dense is not None and (windows[:, k:] == windows[0, k:]).all():
        return take_windows(dense, windows, fill, out_dtype, channel_first)
    return [take_windows(s[None], windows[i:i + 1], fill, out_dtype, channel_first)[0]
            for i, s in enumerate(samples())]


def cut(images, windows, fill, out_dtype):
    """`images` (an ImageBatch) cut to `windows` ([N, 4] (y, x, h, w)) by indexing, `fill`
    ([1] or one per channel) where a window leaves its image: any element type."""
    out = cut_batch(images.dense, lambda: images.samples, windows, fill, out_dtype, images.chw)
    return TensorList.make(out, images.layout, device=images.batch.device)


@register("crop", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("Crop",),
          deprecated_args={"output_dtype": "dtype", "image_type": None},
          args=CROP_ARGS + [
              Arg("rounding", STR, "round", "Anchor rounding: 'round' (half away from zero) or "
                  "'truncate' (toward zero).", choices=("round", "truncate")),
              Arg("dtype", DTYPE, None, "Output type; the input's type if not set.",
                  choices=(types.FLOAT, types.FLOAT16, types.UINT8)),
          ])
class Crop(Operator):
    """Crop a window of each HWC or CHW image (or of every frame of an FHWC / FCHW sequence) at
    (crop_pos_y, crop_pos_x), or of each DHWC / CDHW volume in depth too (crop_d, crop_pos_z);
    windows outside the image follow out_of_bounds_policy. Integer images (masks, label maps of
    int8 to int64, uint16) are cut with every value kept, as DALI's crop does."""

    def plan(self, inputs):
        plan_images(self, inputs[0], IMAGE_DTYPES + LABEL_DTYPES, sequences=True, volumes=True)
        a = self.spec.args
        self.out_dtype = types.to_torch_type(a["dtype"]) if a["dtype"] is not None else None
        return [BatchSpec(inputs[0].device, self.out_dtype or inputs[0].dtype, image_ndim(inputs[0]),
                          inputs[0].layout)], over_frames(self, self.step)

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        if len(batch) == 0:
            return [batch]
        if batch.layout() in VOLUME_LAYOUTS:
            return [self._crop_volumes(batch, args)]
        images = image_batch(self, batch, IMAGE_DTYPES + LABEL_DTYPES)
        check_channels(self, images)
        out_dtype = self.out_dtype or images.dtype
        fill = output_fill(out_dtype, args["fill_values"])
        if fill.numel() not in (1, int(images.channels[0])):
            raise self.error(f"fill_values has {fill.numel()} values for {int(images.channels[0])} "
                             "channels; give 1 or one per channel", ValueError)
        windows = crop_windows(self, images.hw, args, args["rounding"])
        windows = whole_images(images.hw) if windows is None else \
            fit_windows(self, windows, images.hw, args["out_of_bounds_policy"])
        if images.dtype in LABEL_DTYPES:
            return [cut(images, windows, fill, out_dtype)]
        return [crop_normalize(images, windows, out_dtype=out_dtype, out_chw=images.chw, fill=fill,
                               device=batch.device)]

    def _crop_volumes(self, batch, args):
        """DHWC or CDHW volumes cut to their (z, y, x, d, h, w) windows by indexing."""
        volumes = volume_batch(self, batch, IMAGE_DTYPES + LABEL_DTYPES)
        dhw, channels, dtype = volumes.dhw, volumes.channels, volumes.dtype
        out_dtype = self.out_dtype or dtype
        fill = output_fill(out_dtype, args["fill_values"])
        if fill.numel() not in (1, int(channels[0])):
            raise self.error(f"fill_values has {fill.numel()} values for {int(channels[0])} channels; give 1 or one "
                             "per channel", ValueError)
        windows = fit_windows_nd(self, volume_windows(self, dhw, args, args["rounding"]), dhw,
                                 args["out_of_bounds_policy"])
        out = cut_batch(batch.dense_tensor(), batch.as_torch_list, windows, fill, out_dtype, volumes.channel_first)
        return TensorList.make(out, batch.layout(), device=batch.device)
