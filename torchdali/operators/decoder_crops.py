"""Decoders fused with a crop: `decoders.image_crop`, `decoders.image_random_crop` and
`decoders.image_slice`. Each decodes as `decoders.image` does (same arguments, errors
and on_error policy) and then cuts the window, computed on the decoded, EXIF-oriented
image as DALI computes it; a window outside the image is an error, as in DALI."""
import numpy as np
import torch

from ..schema import FLOAT, Arg, register
from .base import RandomOperator
from .crop import CROP_ARGS, Crop
from .decoders import CPU_DECODER, DECODER_ARGS, DECODER_DEPRECATED_ARGS, ImageDecoder, place
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
    `windows(kept, hw, inputs, args)` gives for the images: `kept` are their indices in the
    batch (undecodable samples may have been skipped), `hw` their sizes. Our engine (CPU or
    GPU) decodes only the window of each upright JPEG, its size known from its header; the
    other files are decoded whole and cut in one call."""

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        data = self.encoded(batch)
        n = len(data)
        hw = np.zeros((n, 2), np.int64)
        direct = np.zeros(n, bool)  # decoded within the window only
        if self.decodes_windows:
            head, batched = self.batched_jpegs(data)
            direct = batched & ((head["orientation"] == 1) | (not self.orient))
            hw[direct] = np.stack([head["height"], head["width"]], axis=1)[direct]
        errors, images = {}, [None] * n
        whole = np.flatnonzero(~direct)
        if len(whole):
            place(images, whole, self.decode(data.subset(whole), errors, ctx))
            errors = {int(whole[k]): e for k, e in errors.items()}
            hw[whole] = [img.shape[:2] if img is not None else (0, 0) for img in (images[i] for i in whole)]
        failed = np.zeros(n, bool)
        failed[list(errors)] = True
        kept = np.flatnonzero(~failed)
        windows = np.zeros((n, 4), np.int64)
        if len(kept):
            windows[kept] = self.windows(kept.tolist(), hw[kept], inputs, args)
        cut = kept[~direct[kept]]
        if len(cut):
            from ..kernels.geometry import gather_windows  # loads the extension on first use

            crops = gather_windows([images[i] for i in cut], windows[cut])  # one call for these
            if len(cut) == n and isinstance(crops, torch.Tensor):  # one window size: a dense batch
                return [self.settle(batch, crops, errors, args, ctx)]
            place(images, cut, crops)
        fused = kept[direct[kept]]
        if len(fused):
            whole_batch = self._decode_fused(batch, data, fused, windows[fused], images, errors, ctx)
            if whole_batch is not None:
                return [self.settle(batch, whole_batch, errors, args, ctx)]
        return [self.settle(batch, images, errors, args, ctx)]

    def _decode_fused(self, batch, data, index, windows, images, errors, ctx):
        """Windows of the files `index` decoded by our engine into images[i]; a file it
        refuses is decoded whole by torchvision (or fails there, in `errors`) and cut. The
        usual batch, all of it decoded by the engine as it outputs it, is returned instead:
        one buffer, no tensor per sample made here (see decode_windows)."""
        as_is = len(index) == len(images) and self.plain_rgb
        decoded, refused = self.decode_windows(data.subset(index), windows, ctx, batch if as_is else None)
        if as_is and not len(refused):
            return decoded
        decoded = self.but_refused(decoded, refused)
        if not self.plain_rgb:
            decoded = [None if img is None else self.finish_rgb(img) for img in decoded]
        place(images, index, decoded)
        for k in refused.tolist():
            i, (y, x, h, w) = int(index[k]), windows[k].tolist()
            img = self.decode_one(data.file(i), errors, i)  # whole, on the CPU
            if img is not None:
                self.count(CPU_DECODER, 1)
                images[i] = self.on_device(img[y:y + h, x:x + w], ctx)
        return None

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
