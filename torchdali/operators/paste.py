"""fn.paste: each HWC image on a larger canvas of a fill colour, with DALI's float32 canvas
size and truncated paste position. The canvases are crop windows that reach outside the
images, so one `torchdali::crop_mirror_normalize` call per canvas size (one for the batch
when the canvases agree) fills and copies, on the CPU as on the GPU."""
import math

import numpy as np

from ..schema import FLOAT, INT, INTS, REQUIRED, Arg, register
from .base import BatchSpec, Operator
from .crop import crop_normalize, output_fill
from .images import check_channels, image_batch, plan_images, refuse_huge_outputs

_F32 = np.float32


def _unit(v):
    return None if 0.0 <= v <= 1.0 else "must be in [0, 1]"


def paste_windows(hw, ratio, least, paste_y, paste_x):
    """Canvas windows [N, 4] (y, x, h, w) in image coordinates for images of sizes `hw`
    ([N, 2]): the canvas `ratio` times the image (at least `least`), the image at
    (paste_y, paste_x) on it, all in float32 and truncated as DALI computes them."""
    h, w = hw[:, 0], hw[:, 1]
    ratio, least = np.asarray(ratio, _F32), np.asarray(least, _F32).astype(np.int64)
    ch = np.maximum((ratio * h.astype(_F32)).astype(np.int64), least)
    cw = np.maximum((ratio * w.astype(_F32)).astype(np.int64), least)
    y = (np.asarray(paste_y, _F32) * (ch - h).astype(_F32)).astype(np.int64)
    x = (np.asarray(paste_x, _F32) * (cw - w).astype(_F32)).astype(np.int64)
    return np.stack(np.broadcast_arrays(-y, -x, ch, cw), axis=1)


@register("paste", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("ratio", FLOAT, REQUIRED, "Canvas size / input size (>= 1).", per_sample=True,
        check=lambda v: None if 1 <= v < math.inf else "must be finite and >= 1"),
    Arg("fill_value", INTS, REQUIRED, "Canvas colour: one value, or one per channel."),
    Arg("n_channels", INT, 3, "Number of channels of the images.",
        check=lambda v: None if 0 < v <= 1024 else "must be in 1..1024"),
    Arg("paste_x", FLOAT, 0.5, "Horizontal position of the image: 0 = left, 1 = right.",
        per_sample=True, check=_unit),
    Arg("paste_y", FLOAT, 0.5, "Vertical position of the image: 0 = top, 1 = bottom.",
        per_sample=True, check=_unit),
    Arg("min_canvas_size", FLOAT, 0.0, "Smallest canvas extent, after scaling by ratio.",
        per_sample=True, check=lambda v: None if 0 <= v < math.inf else "must be finite and >= 0"),
])
class Paste(Operator):
    """Paste HWC images onto canvases `ratio` times larger (at least min_canvas_size),
    at (paste_y, paste_x), the rest filled with fill_value. DALI supports uint8 only;
    here float16 and float32 images work too (fill_value cast as DALI casts)."""

    def plan(self, inputs):
        spec = inputs[0]
        if spec.layout not in (None, "", "HWC"):
            raise self._layout_error(spec.layout)
        plan_images(self, spec)
        fill, n_channels = self.spec.args["fill_value"], self.spec.args["n_channels"]
        if len(fill) not in (1, n_channels):
            raise self.error(f"fill_value has {len(fill)} values; give 1 or n_channels={n_channels}",
                             ValueError)
        return [BatchSpec(spec.device, spec.dtype, 3, "HWC")], self.step

    def _layout_error(self, layout):
        return self.error(f"input layout '{layout}' is not supported; give HWC images", ValueError)

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        if not len(batch):
            return [batch]
        if batch.layout() not in ("", "HWC"):
            raise self._layout_error(batch.layout())
        images = image_batch(self, batch)
        fill, n_channels = args["fill_value"], args["n_channels"]
        check_channels(self, images)
        channels = images.channels
        if len(fill) > 1 and channels[0] != n_channels:
            raise self.error(f"the images have {channels[0]} channels but n_channels={n_channels}", ValueError)
        ratio, least = (np.asarray(args.batch(a), np.float64).reshape(-1, 1) for a in ("ratio", "min_canvas_size"))
        refuse_huge_outputs(self, np.maximum(ratio * images.hw, least), ["ratio", "min_canvas_size"])
        windows = paste_windows(images.hw, args.batch("ratio"), args.batch("min_canvas_size"),
                                args.batch("paste_y"), args.batch("paste_x"))
        return [crop_normalize(images, windows, out_dtype=images.dtype, out_chw=False,
                               fill=output_fill(images.dtype, fill), device=batch.device)]
