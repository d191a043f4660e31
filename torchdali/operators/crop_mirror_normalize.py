"""`crop_mirror_normalize`: crop, flip and normalize into one dense batch, the last step of
most training pipelines. Planned once (output type, layout, channel padding, fill); each
batch computes its windows, flips and normalization rows as arrays and makes one kernel
call."""
import numpy as np

from .. import types
from ..schema import BOOL, DTYPE, FLOAT, FLOATS, LAYOUT, Arg, register
from .base import BatchSpec, Operator
from .crop import CROP_ARGS, crop_normalize, output_fill
from .images import IMAGE_DTYPES, WIDENED_DTYPES, check_channels, image_batch, plan_images, widened
from .windows import crop_windows, fit_windows, whole_images


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

    def plan(self, inputs):
        plan_images(self, inputs[0], IMAGE_DTYPES + WIDENED_DTYPES)
        a = self.spec.args
        self.out_dtype = types.to_torch_type(a["dtype"])
        self.out_chw = a["output_layout"] == "CHW"
        self.fill = output_fill(self.out_dtype, a["fill_values"])
        inputs_ = self.spec.arg_input_names
        self.crops = any(n in inputs_ for n in ("crop", "crop_h", "crop_w")) or a["crop"] is not None or \
            bool(a["crop_h"]) or bool(a["crop_w"])
        self.constant_rows = {n: np.asarray(a[n], np.float64) for n in ("mean", "std") if n not in inputs_}
        crop_inputs = {"crop", "crop_h", "crop_w", "crop_pos_x", "crop_pos_y"}.intersection(inputs_)
        self.window_cache = None if crop_inputs else {}  # (n, h, w) -> windows, for constant crop arguments
        return [BatchSpec(inputs[0].device, self.out_dtype, 3, "CHW" if self.out_chw else "HWC")], self.step

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        if len(batch) == 0:
            return [batch]
        if types.to_torch_type(batch.dtype) in WIDENED_DTYPES:  # the kernel reads them as float32
            batch = widened(batch)
        images = image_batch(self, batch)
        check_channels(self, images)
        c = int(images.channels[0])
        windows = self._windows(images, args)
        mean, std = (self.constant_rows[name] if name in self.constant_rows else
                     np.asarray(args.batch(name), np.float64) for name in ("mean", "std"))
        for name, v in (("mean", mean), ("std", std)):
            if v.shape[-1] not in (1, c):
                raise self.error(f"argument '{name}' has {v.shape[-1]} values for {c} channels", ValueError)
        out_c = 1 << (c - 1).bit_length() if args["pad_output"] else c
        if self.fill.numel() not in (1, c, out_c):
            raise self.error(f"argument 'fill_values' has {self.fill.numel()} values for {c} channels; give 1 or "
                             "one per channel", ValueError)
        return [crop_normalize(images, windows, out_dtype=self.out_dtype,
                               out_chw=self.out_chw, fill=self.fill, device=batch.device,
                               mirror=args.batch("mirror"), mean=mean, std=std, out_channels=out_c,
                               scale=args["scale"], shift=args["shift"])]

    def _windows(self, images, args):
        """The crop windows [N, 4] of the batch: computed once per size where the crop
        arguments are constants and the images share one size (the usual batch, after a
        resize to a fixed size), else for each batch."""
        key = None
        if self.window_cache is not None and images.dense is not None:
            key = (len(images), *images.hw[0].tolist())
            windows = self.window_cache.get(key)
            if windows is not None:
                return windows
        windows = crop_windows(self, images.hw, args) if self.crops else None
        windows = whole_images(images.hw) if windows is None else \
            fit_windows(self, windows, images.hw, args["out_of_bounds_policy"])
        if key is not None:
            if len(self.window_cache) >= 16:  # sizes keep changing: keep a few
                self.window_cache.clear()
            self.window_cache[key] = windows
        return windows
