"""fn.resize_crop_mirror: resize, then crop, then flip, fused as DALI fuses them: the output
sizes and input windows of `resize`, the crop windows of `crop` placed on the resized images,
each window projected back onto the input (and reversed where mirrored), and one `resize`
kernel call that samples only those windows."""
import numpy as np

from ..schema import COMMON_ARGS, INT, STR, Arg, register
from .crop import CROP_ARGS
from .images import image_batch, refuse_huge_outputs
from .resize import Resize, _out_dtype, resample
from .windows import crop_windows, whole_images

_COMMON = {a.name for a in COMMON_ARGS}
_RESIZE_ARGS = [a for a in Resize.schema.args.values() if a.name not in _COMMON and a.name != "save_attrs"]
_CROP_ARGS = [a for a in CROP_ARGS if a.name not in ("out_of_bounds_policy", "fill_values")]


@register("resize_crop_mirror", devices=("cpu", "gpu"), inputs=(1, 1),
          deprecated_names=("fast_resize_crop_mirror",), args=_RESIZE_ARGS + _CROP_ARGS + [
    Arg("rounding", STR, "round", "Crop anchor rounding: 'round' (half away from zero) or 'truncate'.",
        choices=("round", "truncate")),
    Arg("mirror", INT, 0, "Flips of the output: 1 horizontal, 2 vertical, 3 both (bits of a mask).",
        per_sample=True),
])
class ResizeCropMirror(Resize):
    """Resize HWC or CHW images as `resize` does, crop the resized images as `crop` does (no
    crop: the whole image) and flip them, in one resampling of the crop windows."""

    def __init__(self, spec):
        super().__init__(spec)
        a, names = spec.args, spec.arg_input_names
        if ("crop_w" in names or a["crop_w"] != 0) != ("crop_h" in names or a["crop_h"] != 0):
            raise ValueError(f"{self.name}: `crop_w` and `crop_h` must be given together")

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        if len(batch) == 0:
            return [batch]
        images = image_batch(self, batch)
        n = len(images)
        sizes, lo, hi = self._sizes(args, images.hw)
        windows, asked = crop_windows(self, sizes, args, args["rounding"]), ["crop", "crop_h", "crop_w"]
        if windows is None:
            windows, asked = whole_images(sizes), self._size_args
        refuse_huge_outputs(self, windows[:, 2:], asked)
        lo, hi = self.project(windows, sizes, lo, hi, args.batch("mirror"))
        out_dtype = _out_dtype(self, images.dtype, args["dtype"])
        return [resample(images, windows[:, 2:], lo, hi, self._batch_filters(args, n), args["antialias"], out_dtype,
                         batch.device)]

    @staticmethod
    def project(windows, sizes, lo, hi, mirror):
        """The input windows ([N, 2] (y, x) lo, hi, float32) of crop `windows` ([N, 4] (y, x, h, w))
        on images resized to `sizes` from the input windows lo..hi, reversed where `mirror` has
        bit 0 (horizontal) or bit 1 (vertical)."""
        ratio = (hi.astype(np.float64) - lo) / sizes
        start = windows[:, :2] * ratio + lo
        end = (windows[:, :2] + windows[:, 2:]) * ratio + lo
        bits = np.broadcast_to(np.asarray(mirror, np.int64), (len(windows),))
        flip = np.stack([bits & 2, bits & 1], axis=1) != 0
        return np.where(flip, end, start).astype(np.float32), np.where(flip, start, end).astype(np.float32)
