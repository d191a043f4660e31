"""`crop_mirror_normalize`: crop, flip and normalize into one dense batch, the last step of
most training pipelines. Planned once (output type, layout, channel padding, fill); each
batch computes its windows, flips and normalization rows as arrays and makes one kernel
call."""
import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, FLOAT, FLOATS, LAYOUT, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator
from .crop import CROP_ARGS, crop_normalize, gather_windows_nd, output_fill
from .conversions import convert_saturate
from .images import (IMAGE_DTYPES, VOLUME_LAYOUTS, WIDENED_DTYPES, check_channels, image_batch, image_shapes,
                     plan_images, widened)
from .windows import crop_windows, fit_windows, fit_windows_nd, volume_windows, whole_images


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
              Arg("output_layout", LAYOUT, types.NCHW, "'CHW' or 'HWC' for images, 'CDHW' or 'DHWC' for "
                  "volumes.", choices=("CHW", "HWC", "CDHW", "DHWC")),
              Arg("pad_output", BOOL, False, "Pad the channels to the next power of two with zeros."),
          ])
class CropMirrorNormalize(Operator):
    """Crop, flip and normalize HWC or CHW images: (in - mean) / std * scale + shift, into
    one dense batch in CHW or HWC layout; DHWC and CDHW volumes likewise (cropped in depth
    too, flipped in width), into CDHW or DHWC."""

    def plan(self, inputs):
        plan_images(self, inputs[0], IMAGE_DTYPES + WIDENED_DTYPES, volumes=True)
        a = self.spec.args
        volumes = inputs[0].layout in VOLUME_LAYOUTS
        if inputs[0].layout and volumes != (a["output_layout"] in VOLUME_LAYOUTS):
            raise self.error(f"output_layout '{a['output_layout']}' does not fit {inputs[0].layout} input; give "
                             f"{'CDHW or DHWC' if volumes else 'CHW or HWC'}", ValueError)
        self.out_dtype = types.to_torch_type(a["dtype"])
        self.out_chw = a["output_layout"] == "CHW"
        self.fill = output_fill(self.out_dtype, a["fill_values"])
        inputs_ = self.spec.arg_input_names
        self.crops = any(n in inputs_ for n in ("crop", "crop_h", "crop_w")) or a["crop"] is not None or \
            bool(a["crop_h"]) or bool(a["crop_w"])
        self.constant_rows = {n: np.asarray(a[n], np.float64) for n in ("mean", "std") if n not in inputs_}
        crop_inputs = {"crop", "crop_h", "crop_w", "crop_pos_x", "crop_pos_y"}.intersection(inputs_)
        self.window_cache = None if crop_inputs else {}  # (n, h, w) -> windows, for constant crop arguments
        return [BatchSpec(inputs[0].device, self.out_dtype, 4 if volumes else 3, a["output_layout"])], self.step

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        if len(batch) == 0:
            return [batch]
        if batch.layout() in VOLUME_LAYOUTS:
            return [self._volumes(batch, args)]
        if types.to_torch_type(batch.dtype) in WIDENED_DTYPES:  # the kernel reads them as float32
            batch = widened(batch)
        images = image_batch(self, batch)
        check_channels(self, images)
        c = int(images.channels[0])
        windows = self._windows(images, args)
        mean, std, out_c = self._normalization(args, c)
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

    def _normalization(self, args, c):
        """(mean, std, output channels) for images of `c` channels, checked."""
        mean, std = (self.constant_rows[name] if name in self.constant_rows else
                     np.asarray(args.batch(name), np.float64) for name in ("mean", "std"))
        for name, v in (("mean", mean), ("std", std)):
            if v.shape[-1] not in (1, c):
                raise self.error(f"argument '{name}' has {v.shape[-1]} values for {c} channels", ValueError)
        out_c = 1 << (c - 1).bit_length() if args["pad_output"] else c
        if self.fill.numel() not in (1, c, out_c):
            raise self.error(f"argument 'fill_values' has {self.fill.numel()} values for {c} channels; give 1 or "
                             "one per channel", ValueError)
        return mean, std, out_c

    def _volumes(self, batch, args):
        """DHWC or CDHW volumes cut to their (z, y, x, d, h, w) windows, flipped in width where
        `mirror`, normalized as the image kernel does (float32, (in - mean) * (1 / std) * scale +
        shift), `fill_values` outside: one gather and one arithmetic pass per window size."""
        layout, out_layout = batch.layout(), args["output_layout"]
        if out_layout not in VOLUME_LAYOUTS:
            raise self.error(f"output_layout '{out_layout}' does not fit {layout} volumes; give CDHW or DHWC",
                             ValueError)
        shapes = image_shapes(self, batch, layout)
        channel_first = layout == "CDHW"
        dhw, channels = (shapes[:, 1:], shapes[:, 0]) if channel_first else (shapes[:, :3], shapes[:, 3])
        if (channels != channels[0]).any() or channels[0] == 0:
            i = int(np.argmax(channels != channels[0]))
            raise self.error(f"sample {i} has {channels[i]} channels, sample 0 has {channels[0]}; give volumes of "
                             "one number of channels, at least one", ValueError, sample=i)
        n, c = len(batch), int(channels[0])
        mean, std, out_c = self._normalization(args, c)
        windows = fit_windows_nd(self, volume_windows(self, dhw, args), dhw, args["out_of_bounds_policy"])
        def per_sample(v):  # a row, or one per sample, as float32 [N, 1, 1, 1, C]
            v = np.asarray(v, np.float32)
            return torch.from_numpy(np.broadcast_to(v.reshape(-1, v.shape[-1]), (n, v.shape[-1])).copy()).reshape(
                n, 1, 1, 1, -1)

        mean_t, inv_std_t = per_sample(mean), per_sample((1.0 / std).astype(np.float32))
        mirror = torch.from_numpy(np.broadcast_to(np.asarray(args.batch("mirror"), bool), (n,)).copy())
        fill = self.fill if self.fill.numel() in (1, out_c) else torch.cat([self.fill, torch.zeros(out_c - c)])
        dense = batch.dense_tensor()
        groups = [np.arange(n)] if dense is not None and (windows[:, 3:] == windows[0, 3:]).all() else \
            [np.array([i]) for i in range(n)]
        samples = None if len(groups) == 1 else batch.as_torch_list()
        outs = []
        for idx in groups:
            pixels = dense if samples is None else samples[int(idx[0])][None]
            x, inside = gather_windows_nd(pixels, windows[idx], channel_first)
            sel = torch.from_numpy(idx)
            x = x.float()
            flip = mirror[sel].reshape(-1, 1, 1, 1, 1).to(x.device)
            x, inside = torch.where(flip, x.flip(-2), x), torch.where(flip, inside.flip(-2), inside)
            y = (x - mean_t[sel].to(x.device)) * inv_std_t[sel].to(x.device) * args["scale"] + args["shift"]
            if out_c > c:
                y = torch.cat([y, y.new_zeros(*y.shape[:-1], out_c - c)], dim=-1)
            y = torch.where(inside, convert_saturate(y, self.out_dtype),
                            fill.reshape(1, 1, 1, 1, -1).to(x.device, self.out_dtype))
            y = y.movedim(-1, 1) if out_layout == "CDHW" else y
            outs.extend(y.contiguous().unbind(0) if samples is not None else [y.contiguous()])
        return TensorList.make(outs[0] if samples is None else outs, out_layout, device=batch.device)
