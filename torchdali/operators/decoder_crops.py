"""Decoders fused with a crop: `decoders.image_crop`, `decoders.image_random_crop` and
`decoders.image_slice`. Each decodes as `decoders.image` does (same arguments, errors
and on_error policy) and then cuts the window, computed on the decoded, EXIF-oriented
image as DALI computes it; a window outside the image is an error, as in DALI."""
import math

from ..schema import FLOAT, Arg, register
from ..tensor_list import TensorList
from .base import RandomOperator
from .crop import CROP_ARGS, crop_window, fit_window
from .decoders import DECODER_ARGS, DECODER_DEPRECATED_ARGS, ImageDecoder
from .geometry import Crop
from .resize import RandomResizedCrop, random_crop_window
from .slicing import SLICE_ARGS, SliceWindows, apply_policy

# DALI's fused crop has no padding: a window outside the image is an error.
_CROP_ARGS = [a for a in CROP_ARGS if a.name not in ("out_of_bounds_policy", "fill_values")] + [
    Arg("crop_d", FLOAT, 0.0, "Crop depth, for volumes: decoded images have none, so no effect.",
        per_sample=True),
    Arg("crop_pos_z", FLOAT, 0.5, "Depth position of the window, for volumes: no effect on images.",
        per_sample=True),
]


class _DecodeThenCrop(ImageDecoder):
    """decoders.image, then the window (y, x, h, w) that the subclass's
    `window(i, shape, inputs, args)` gives for each decoded image."""

    def run(self, inputs, args, ctx):
        decoded = super().run(inputs[:1], args, ctx)[0]
        dropped = set(ctx.dropped)  # undecodable samples skipped with on_error="skip"
        kept = [i for i in range(len(inputs[0])) if i not in dropped]
        crops = []
        for i, img in zip(kept, decoded.as_torch_list()):
            y, x, h, w = self.window(i, tuple(img.shape), inputs, args)
            crops.append(img[y:y + h, x:x + w])
        if crops and all(c.shape == crops[0].shape for c in crops):
            out = crops[0].new_empty((len(crops),) + tuple(crops[0].shape))
            for o, c in zip(out, crops):
                o.copy_(c)
        else:
            out = [c.contiguous() for c in crops]
        return [TensorList.make(out, "HWC", device=decoded.device, source_info=decoded.source_info)]


@register("decoders.image_crop", devices=("cpu", "mixed"), inputs=(1, 1), aliases=("ImageDecoderCrop",),
          deprecated_args=DECODER_DEPRECATED_ARGS,
          args=DECODER_ARGS + _CROP_ARGS + [Crop.schema.args["rounding"]])
class ImageDecoderCrop(_DecodeThenCrop):
    """Decode images and crop a (crop_h, crop_w) window at (crop_pos_y, crop_pos_x), as
    decoders.image followed by crop."""

    def window(self, i, shape, inputs, args):
        h, w = shape[0], shape[1]
        window = crop_window(self, i, shape, args) or (0, 0, h, w)
        if args["rounding"] == "truncate":
            _, _, ch, cw = window
            window = (math.trunc(args.sample("crop_pos_y", i) * (h - ch)),
                      math.trunc(args.sample("crop_pos_x", i) * (w - cw)), ch, cw)
        return fit_window(self, i, window, shape, "error")


@register("decoders.image_random_crop", devices=("cpu", "mixed"), inputs=(1, 1),
          aliases=("ImageDecoderRandomCrop",), deprecated_args=DECODER_DEPRECATED_ARGS,
          args=DECODER_ARGS + [RandomResizedCrop.schema.args[n]
                               for n in ("random_area", "random_aspect_ratio", "num_attempts")])
class ImageDecoderRandomCrop(_DecodeThenCrop, RandomOperator):
    """Decode images and crop a random window (random area fraction and aspect ratio, as
    DALI's RandomCropGenerator picks it; the random numbers are torchdali's own)."""

    def window(self, i, shape, inputs, args):
        if shape[0] == 0 or shape[1] == 0:
            raise self.error(f"sample {i} is empty ({shape})", ValueError)
        return random_crop_window(self.rng, shape[0], shape[1], args["random_area"],
                                  args["random_aspect_ratio"], args["num_attempts"])


@register("decoders.image_slice", devices=("cpu", "mixed"), inputs=(1, 3),
          input_names=("data", "anchor", "shape_input"), aliases=("ImageDecoderSlice",),
          deprecated_args=DECODER_DEPRECATED_ARGS, args=DECODER_ARGS + SLICE_ARGS)
class ImageDecoderSlice(_DecodeThenCrop):
    """Decode images and slice them as fn.slice does, on the (H, W) plane (layout 'HW' for
    axes and axis_names)."""

    def __init__(self, spec):
        super().__init__(spec)
        self.windows = SliceWindows(self)

    def run(self, inputs, args, ctx):
        self.windows.check_inputs(len(inputs))
        return super().run(inputs, args, ctx)

    def window(self, i, shape, inputs, args):
        anchor, size = [x.as_torch_list()[i] for x in inputs[1:]] or (None, None)
        anchor, size = self.windows.window(i, args, shape[:2], "HW", anchor, size)
        (y, x), (h, w) = apply_policy(self, i, anchor, size, shape[:2], "error")
        return y, x, h, w
