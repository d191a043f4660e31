"""Decoders fused with a crop: `decoders.image_crop`, `decoders.image_random_crop` and
`decoders.image_slice`. Each decodes as `decoders.image` does (same arguments, errors
and on_error policy) and then cuts the window, computed on the decoded, EXIF-oriented
image as DALI computes it; a window outside the image is an error, as in DALI."""
import numpy as np

from ..schema import FLOAT, Arg, register
from ..tensor_list import TensorList
from .base import RandomOperator
from .crop import CROP_ARGS, Crop
from .decoders import DECODER_ARGS, DECODER_DEPRECATED_ARGS, ImageDecoder
from .resize import RandomResizedCrop, pair
from .slicing import SLICE_ARGS, SliceWindows
from .windows import crop_windows, fit_windows, random_crop_windows, whole_images

# DALI's fused crop has no padding: a window outside the image is an error.
_CROP_ARGS = [a for a in CROP_ARGS if a.name not in ("out_of_bounds_policy", "fill_values")] + [
    Arg("crop_d", FLOAT, 0.0, "Crop depth, for volumes: decoded images have none, so no effect.",
        per_sample=True),
    Arg("crop_pos_z", FLOAT, 0.5, "Depth position of the window, for volumes: no effect on images.",
        per_sample=True),
]


class _DecodeThenCrop(ImageDecoder):
    """decoders.image, then the windows ([N, 4] (y, x, h, w)) that the subclass's
    `windows(kept, hw, inputs, args)` gives for the decoded images: `kept` are their indices
    in the batch (undecodable samples may have been skipped), `hw` their sizes."""

    def run(self, inputs, args, ctx):
        decoded = super().run(inputs[:1], args, ctx)[0]
        dropped = set(ctx.dropped)  # undecodable samples skipped with on_error="skip"
        kept = [i for i in range(len(inputs[0])) if i not in dropped]
        images = decoded.as_torch_list()
        if not images:
            return [decoded]
        from ..kernels.geometry import gather_windows  # loads the extension on first use

        hw = decoded.sample_shapes()[:, :2]
        out = gather_windows(images, self.windows(kept, hw, inputs, args))  # one call for the batch
        return [TensorList.make(out, "HWC", device=decoded.device, source_info=decoded.source_info)]


@register("decoders.image_crop", devices=("cpu", "mixed"), inputs=(1, 1), aliases=("ImageDecoderCrop",),
          deprecated_args=DECODER_DEPRECATED_ARGS,
          args=DECODER_ARGS + _CROP_ARGS + [Crop.schema.args["rounding"]])
class ImageDecoderCrop(_DecodeThenCrop):
    """Decode images and crop a (crop_h, crop_w) window at (crop_pos_y, crop_pos_x), as
    decoders.image followed by crop."""

    def windows(self, kept, hw, inputs, args):
        windows = crop_windows(self, hw, args.subset(kept), args["rounding"])
        return whole_images(hw) if windows is None else fit_windows(self, windows, hw, "error")


@register("decoders.image_random_crop", devices=("cpu", "mixed"), inputs=(1, 1),
          aliases=("ImageDecoderRandomCrop",), deprecated_args=DECODER_DEPRECATED_ARGS,
          args=DECODER_ARGS + [RandomResizedCrop.schema.args[n]
                               for n in ("random_area", "random_aspect_ratio", "num_attempts")])
class ImageDecoderRandomCrop(_DecodeThenCrop, RandomOperator):
    """Decode images and crop a random window (random area fraction and aspect ratio, as
    DALI's RandomCropGenerator picks it; the random numbers are torchdali's own)."""

    def windows(self, kept, hw, inputs, args):
        empty = (hw == 0).any(axis=1)
        if empty.any():
            i = kept[int(np.argmax(empty))]
            raise self.error(f"sample {i} is empty ({tuple(hw[int(np.argmax(empty))])})", ValueError, sample=i)
        return random_crop_windows(self.rng, hw, pair(args["random_area"]), pair(args["random_aspect_ratio"]),
                                   args["num_attempts"])


@register("decoders.image_slice", devices=("cpu", "mixed"), inputs=(1, 3),
          input_names=("data", "anchor", "shape_input"), aliases=("ImageDecoderSlice",),
          deprecated_args=DECODER_DEPRECATED_ARGS, args=DECODER_ARGS + SLICE_ARGS)
class ImageDecoderSlice(_DecodeThenCrop):
    """Decode images and slice them as fn.slice does, on the (H, W) plane (layout 'HW' for
    axes and axis_names)."""

    def __init__(self, spec):
        super().__init__(spec)
        self.slices = SliceWindows(self)

    def plan(self, inputs):
        self.slices.check_inputs(len(inputs))
        return super().plan(inputs)

    def windows(self, kept, hw, inputs, args):
        anchor, size = self.slices.windows(args, hw, "HW", inputs[1:], rows=kept)
        return np.concatenate([anchor, size], axis=1)
