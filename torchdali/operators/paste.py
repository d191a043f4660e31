"""fn.paste: each HWC image on a larger canvas of a fill colour, with DALI's float32 canvas
size and truncated paste position. A fill and a strided copy per sample in torch (one
dense batch when the canvases agree), on the CPU as on the GPU."""
import numpy as np
import torch

from ..schema import FLOAT, INT, INTS, REQUIRED, Arg, register
from ..tensor_list import TensorList
from .base import Operator
from .crop import cast_fill

_F32 = np.float32


def _unit(v):
    return None if 0.0 <= v <= 1.0 else "must be in [0, 1]"


@register("paste", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("ratio", FLOAT, REQUIRED, "Canvas size / input size (>= 1).", per_sample=True,
        check=lambda v: None if v >= 1 else "must be >= 1"),
    Arg("fill_value", INTS, REQUIRED, "Canvas colour: one value, or one per channel."),
    Arg("n_channels", INT, 3, "Number of channels of the images.",
        check=lambda v: None if 0 < v <= 1024 else "must be in 1..1024"),
    Arg("paste_x", FLOAT, 0.5, "Horizontal position of the image: 0 = left, 1 = right.",
        per_sample=True, check=_unit),
    Arg("paste_y", FLOAT, 0.5, "Vertical position of the image: 0 = top, 1 = bottom.",
        per_sample=True, check=_unit),
    Arg("min_canvas_size", FLOAT, 0.0, "Smallest canvas extent, after scaling by ratio.",
        per_sample=True, check=lambda v: None if v >= 0 else "must be >= 0"),
])
class Paste(Operator):
    """Paste HWC images onto canvases `ratio` times larger (at least min_canvas_size),
    at (paste_y, paste_x), the rest filled with fill_value. DALI supports uint8 only;
    here any type works (fill_value cast as DALI casts)."""

    def _fill(self, c, dtype, device):
        fill, n_channels = self.spec.args["fill_value"], self.spec.args["n_channels"]
        if len(fill) not in (1, n_channels):
            raise self.error(f"fill_value has {len(fill)} values; give 1 or n_channels={n_channels}",
                             ValueError)
        if len(fill) > 1 and c != n_channels:
            raise self.error(f"the images have {c} channels but n_channels={n_channels}", ValueError)
        return torch.tensor([cast_fill(v, dtype) for v in fill], dtype=dtype, device=device)

    def sample_plan(self, i, h, w, args):
        """(canvas_h, canvas_w, y, x) of sample i, as DALI computes them in float32."""
        ratio, least = _F32(args.sample("ratio", i)), int(_F32(args.sample("min_canvas_size", i)))
        ch, cw = max(int(ratio * _F32(h)), least), max(int(ratio * _F32(w)), least)
        y = int(_F32(args.sample("paste_y", i)) * _F32(ch - h))
        x = int(_F32(args.sample("paste_x", i)) * _F32(cw - w))
        return ch, cw, y, x

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        images = batch.as_torch_list()
        if not images:
            return [batch]
        if batch.layout() not in ("", "HWC"):
            raise self.error(f"input layout '{batch.layout()}' is not supported; give HWC images", ValueError)
        plans = []
        for i, im in enumerate(images):
            if im.dim() != 3 or im.dtype != images[0].dtype or im.shape[2] != images[0].shape[2]:
                raise self.error(f"sample {i} ({tuple(im.shape)}, {im.dtype}): expected HWC images of "
                                 f"one type and number of channels", ValueError)
            plans.append(self.sample_plan(i, im.shape[0], im.shape[1], args))
        c = images[0].shape[2]
        fill = self._fill(c, images[0].dtype, images[0].device)
        shapes = {p[:2] for p in plans}
        if len(shapes) == 1:
            outs = images[0].new_empty((len(images),) + shapes.pop() + (c,))
            outs.copy_(fill.expand_as(outs))
        else:
            outs = [im.new_empty(p[:2] + (c,)) for im, p in zip(images, plans)]
            for o in outs:
                o.copy_(fill.expand_as(o))
        for o, im, (_, _, y, x) in zip(outs, images, plans):
            o[y:y + im.shape[0], x:x + im.shape[1]] = im
        return [TensorList.make(outs, "HWC", device=batch.device)]
