"""Decoders fused with a crop: `decoders.image_crop`, `decoders.image_random_crop` and
`decoders.image_slice`. Each decodes as `decoders.image` does (same arguments, errors
and on_error policy) and then cuts the window, computed on the decoded, EXIF-oriented
image as DALI computes it; a window outside the image is an error, as in DALI. Also the
step that `decoders.image` followed by `random_resized_crop` fuses into (torchdali/fusion.py)."""
import numpy as np
import torch

from ..schema import register
from ..tensor_list import TensorList
from .base import Args, RandomOperator
from .crop import CROP_ARGS, Crop
from .decoders import CPU_DECODER, DECODER_ARGS, DECODER_DEPRECATED_ARGS, ImageDecoder, cuda_device, place
from .images import image_batch
from .resize import RandomResizedCrop, pair
from .slicing import SLICE_ARGS, SliceWindows
from .windows import crop_windows, fit_windows, random_crop_windows, whole_images

# DALI's fused crop has no padding: a window outside the image is an error.
_CROP_ARGS = [a for a in CROP_ARGS if a.name not in ("out_of_bounds_policy", "fill_values")]


class _DecodeThenCrop(ImageDecoder):
    """decoders.image, then the windows ([N, 4] (y, x, h, w)) that the subclass's
    `windows(kept, hw, inputs, args)` gives for the images: `kept` are their indices in the
    batch (undecodable samples may have been skipped), `hw` their sizes."""

    def run(self, inputs, args, ctx):
        images, errors = decode_cut(self, inputs[0], lambda kept, hw: self.windows(kept, hw, inputs, args), ctx)
        return [self.settle(inputs[0], images, errors, args, ctx)]


def decode_cut(dec, batch, windows_of, ctx, defer=True):
    """`batch`'s files decoded by the ImageDecoder `dec` and cut to the windows [N, 4]
    (y, x, h, w) that `windows_of(kept, hw)` gives for the decodable samples `kept` (indices
    in the batch) of sizes `hw`: (images, errors), as ImageDecoder.settle takes them. Our
    engine (CPU or GPU) decodes only the window of each upright JPEG, its size known from its
    header; the other files are decoded whole and cut in one call. `defer`: the hardware
    decoder's share may be finished in the GPU stage (ImageDecoder.decode_windows)."""
    data = dec.encoded(batch)
    n = len(data)
    hw = np.zeros((n, 2), np.int64)
    direct = np.zeros(n, bool)  # decoded within the window only
    errors, images = {}, [None] * n
    if dec.decodes_windows:
        head, batched = dec.batched_jpegs(data, errors)
        direct = batched & ((head["orientation"] == 1) | (not dec.orient))
        hw[direct] = np.stack([head["height"], head["width"]], axis=1)[direct]
    whole = np.array([i for i in np.flatnonzero(~direct).tolist() if i not in errors], np.int64)
    if len(whole):
        failed = {}
        place(images, whole, dec.decode(data.subset(whole), failed, ctx))
        errors.update({int(whole[k]): e for k, e in failed.items()})
        hw[whole] = [img.shape[:2] if img is not None else (0, 0) for img in (images[i] for i in whole)]
    failed = np.zeros(n, bool)
    failed[list(errors)] = True
    kept = np.flatnonzero(~failed)
    windows = np.zeros((n, 4), np.int64)
    if len(kept):
        windows[kept] = windows_of(kept.tolist(), hw[kept])
    cut = kept[~direct[kept]]
    if len(cut):
        from ..kernels.geometry import gather_windows  # loads the extension on first use

        crops = gather_windows([images[i] for i in cut], windows[cut])  # one call for these
        if len(cut) == n and isinstance(crops, torch.Tensor):  # one window size: a dense batch
            return crops, errors
        place(images, cut, crops)
    fused = kept[direct[kept]]
    if len(fused):
        whole_batch = _decode_windows(dec, batch, data, fused, windows[fused], images, errors, ctx, defer)
        if whole_batch is not None:
            return whole_batch, errors
    return images, errors


def _decode_windows(dec, batch, data, index, windows, images, errors, ctx, defer):
    """Windows of the files `index` decoded by our engine into images[i]; a file it refuses
    is decoded whole by torchvision (or fails there, in `errors`) and cut. The usual batch,
    all of it decoded by the engine as it outputs it, is returned instead: one buffer, no
    tensor per sample made here (see ImageDecoder.decode_windows)."""
    as_is = len(index) == len(images) and dec.plain_rgb
    decoded, refused = dec.decode_windows(data.subset(index), windows, ctx, batch if as_is and defer else None)
    if as_is and not len(refused):
        return decoded
    decoded = dec.but_refused(decoded, refused)
    if not dec.plain_rgb:
        decoded = [None if img is None else dec.finish_rgb(img) for img in decoded]
    place(images, index, decoded)
    for k in refused.tolist():
        i, (y, x, h, w) = int(index[k]), windows[k].tolist()
        img = dec.decode_one(data.file(i), errors, i)  # whole, on the CPU
        if img is not None:
            dec.count(CPU_DECODER, 1)
            images[i] = dec.on_device(img[y:y + h, x:x + w], ctx)
    return None


def decode_resized_crops(dec, rrc, batch, args, ctx):
    """decoders.image (`dec`) followed by random_resized_crop (`rrc`, all its arguments
    constant) as one step: each JPEG decoded only within its random window and the margin
    that the resize filter reads around it, then resized. The same windows (from `rrc`'s
    generator) and pixels as the two operators one after the other, up to rounding of the
    filter's position (the window's offset in the decoded part differs). Where the hardware
    decoder's share is left to the GPU stage, so is the resize, into the batch returned."""
    rrc_args = Args(rrc, {})
    drawn = {}

    def regions(kept, hw):
        windows = rrc.draw_windows(hw, rrc_args, rows=kept)
        margin = rrc.margin(windows, rrc.size)
        lo = np.maximum(0, windows[:, :2] - margin)
        hi = np.minimum(hw, windows[:, :2] + windows[:, 2:] + margin)
        drawn.update(kept=kept, windows=windows, regions=np.concatenate([lo, hi - lo], axis=1))
        return drawn["regions"]

    waiting = len(ctx.unfinished or ())
    images, errors = decode_cut(dec, batch, regions, ctx)
    decoded = dec.settle(batch, images, errors, args, ctx)
    if not len(decoded):
        return decoded
    rows = [k for k, i in enumerate(drawn["kept"]) if i not in errors]
    lo = drawn["windows"][rows, :2] - drawn["regions"][rows, :2]
    hi = lo + drawn["windows"][rows, 2:]

    def resized():
        return rrc.resize_windows(image_batch(rrc, decoded), lo, hi, rrc_args, decoded.device)

    if len(ctx.unfinished or ()) == waiting:
        out = resized()
    else:  # decode_cut left the hardware decoder's share (of the whole batch) to the GPU stage
        dense = torch.empty((len(decoded), *rrc.size.tolist(), 3), device=cuda_device(ctx),
                            dtype=rrc.output_dtype(torch.uint8, rrc_args))
        ctx.finish_later(lambda c: dense.copy_(resized().dense_tensor()))
        out = TensorList.make(dense, "HWC", device="gpu")
    out.source_info = decoded.source_info
    return out


@register("decoders.image_crop", devices=("cpu", "mixed"), inputs=(1, 1), aliases=("ImageDecoderCrop",),
          deprecated_names=("image_decoder_crop", "experimental.decoders.image_crop"),
          deprecated_args=DECODER_DEPRECATED_ARGS,
          args=DECODER_ARGS + _CROP_ARGS + [Crop.schema.args["rounding"]])
class ImageDecoderCrop(_DecodeThenCrop):
    """Decode images and crop a (crop_h, crop_w) window at (crop_pos_y, crop_pos_x), as
    decoders.image followed by crop."""

    def windows(self, kept, hw, inputs, args):
        windows = crop_windows(self, hw, args.subset(kept), args["rounding"])
        return whole_images(hw) if windows is None else fit_windows(self, windows, hw, "error")


@register("decoders.image_random_crop", devices=("cpu", "mixed"), inputs=(1, 1),
          deprecated_names=("image_decoder_random_crop", "experimental.decoders.image_random_crop"),
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
          deprecated_names=("image_decoder_slice", "experimental.decoders.image_slice"),
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
