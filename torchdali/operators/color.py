"""Colour operators: brightness_contrast (brightness, contrast), hsv (hue, saturation) and
color_twist. Each is a per-sample affine colour transform, out = M @ pixel + offset, built
here on the host with DALI's formulas and applied to the whole batch by one call of the
`torchdali::color_transform` kernel (csrc/)."""
import numpy as np
import torch

from .. import types
from ..schema import DTYPE, FLOAT, IMAGE_TYPE, Arg, register
from ..tensor_list import TensorList
from .base import Operator

_OUT_TYPES = (types.UINT8, types.INT16, types.INT32, types.FLOAT16, types.FLOAT)
_LAYOUTS = ("", "HWC", "FHWC", "DHWC", "FDHWC")

# DALI's YIQ transform; its inverse is exact (DALI 2.4 matches the exact inverse, not the
# rounded textbook YIQ -> RGB matrix).
_RGB2YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])
_YIQ2RGB = np.linalg.inv(_RGB2YIQ)


def _dtype_arg(default, doc="Output type; the input type when not set."):
    return Arg("dtype", DTYPE, default, doc, choices=_OUT_TYPES)


def _full_range(dtype):
    """DALI's output range for brightness_shift: the largest value of an integer type, 1 for floats."""
    return 1.0 if dtype.is_floating_point else float(torch.iinfo(dtype).max)


def _half_range(dtype):
    """DALI's default contrast centre: half the input type's positive range, 0.5 for floats."""
    if dtype.is_floating_point:
        return 0.5
    info = torch.iinfo(dtype)
    return float(1 << (info.bits - int(info.min < 0) - 1))


def yiq_matrix(hue=0.0, saturation=1.0, value=1.0):
    """DALI's hsv approximation: rotate the IQ plane by `hue` degrees, scale IQ by
    `saturation` and everything by `value`, in YIQ space. Scalars give one 3x3 matrix,
    arrays of N values N of them ([N, 3, 3])."""
    h, s, v = np.broadcast_arrays(*(np.asarray(x, np.float64) for x in (hue, saturation, value)))
    h = np.radians(h)
    cos, sin, zero, one = np.cos(h), np.sin(h), np.zeros_like(h), np.ones_like(h)
    rot = np.stack([np.stack([one, zero, zero], -1), np.stack([zero, cos, sin], -1),
                    np.stack([zero, -sin, cos], -1)], -2)
    scale = np.stack([np.stack([v, zero, zero], -1), np.stack([zero, v * s, zero], -1),
                      np.stack([zero, zero, v * s], -1)], -2)
    return _YIQ2RGB @ rot @ scale @ _RGB2YIQ


class ColorOperator(Operator):
    """Shared step: check the batch, ask `transform(args, n, in_dtype, out_dtype, channels)`
    for the batch's matrices [N, C, C] and offsets [N, C], and apply them all in one kernel
    call. Subclasses registered with fewer arguments see the missing ones at DALI's
    neutral values."""

    needs_rgb = False

    def arg(self, args, name, n, neutral):
        """Argument `name` as N float values (its neutral value where not declared or None)."""
        v = args.batch(name) if name in self.spec.schema.args else None
        return np.broadcast_to(np.asarray(neutral if v is None else v, np.float64), (n,))

    def transform(self, args, n, in_dtype, out_dtype, channels):
        raise NotImplementedError

    def run(self, inputs, args, ctx):
        from ..kernels.color import color_transform  # loads the extension on first use

        batch = inputs[0]
        if batch.layout() not in _LAYOUTS:
            raise self.error(f"input layout '{batch.layout()}' is not supported; give channel-last "
                             "(HWC or FHWC) images", ValueError)
        images = batch.as_torch_list()
        if not images:
            return [batch]
        in_dtype = images[0].dtype
        if in_dtype not in (torch.uint8, torch.float16, torch.float32):
            raise self.error(f"input type {in_dtype} is not supported; give uint8, float16 or "
                             "float32 images", TypeError)
        out_dtype = in_dtype if args["dtype"] is None else types.to_torch_type(args["dtype"])
        c = images[0].shape[-1] if images[0].dim() else 0
        try:
            shapes = batch.sample_shapes()
            fits = shapes.shape[1] >= 2 and bool((shapes[:, -1] == c).all())
        except ValueError:  # samples of different ndim
            fits = False
        if not fits:
            i = next(i for i, im in enumerate(images) if im.dim() < 2 or im.shape[-1] != c)
            raise self.error(f"sample {i} has shape {tuple(images[i].shape)}; expected channel-last "
                             f"images with {c} channels like sample 0", ValueError, sample=i)
        if self.needs_rgb and c != 3:
            raise self.error(f"sample 0 has {c} channels; this operator needs RGB images "
                             "(3 channels)", ValueError, sample=0)
        matrices, offsets = self.transform(args, len(images), in_dtype, out_dtype, c)
        matrices = torch.from_numpy(np.ascontiguousarray(matrices, np.float32))
        offsets = torch.from_numpy(np.ascontiguousarray(offsets, np.float32))
        # A dense batch stays one tensor (color_transform.dense); a list stays a list.
        src = batch.as_torch() if batch.is_dense_tensor() else images
        out = color_transform(src, matrices, offsets, out_dtype)
        return [TensorList.make(out, batch.layout(), device=batch.device)]


_BRIGHTNESS_ARGS = [
    Arg("brightness", FLOAT, 1.0, "Brightness multiplier.", per_sample=True),
    Arg("brightness_shift", FLOAT, 0.0, "Brightness shift, in units of the output type's range "
        "(1 for floats, the largest value for integers).", per_sample=True),
]
_CONTRAST_ARGS = [
    Arg("contrast", FLOAT, 1.0, "Contrast multiplier; 0 makes every pixel contrast_center.",
        per_sample=True),
    Arg("contrast_center", FLOAT, None, "The intensity left unchanged by contrast; half the input "
        "type's positive range (0.5 for floats) when not set.", per_sample=True),
]


@register("brightness_contrast", devices=("cpu", "gpu"), inputs=(1, 1),
          args=_BRIGHTNESS_ARGS + _CONTRAST_ARGS + [_dtype_arg(None)])
class BrightnessContrast(ColorOperator):
    """Adjusts brightness and contrast: out = brightness_shift * output_range +
    brightness * (contrast_center + contrast * (in - contrast_center))."""

    def transform(self, args, n, in_dtype, out_dtype, channels):
        b = self.arg(args, "brightness", n, 1.0)
        shift = self.arg(args, "brightness_shift", n, 0.0)
        k = self.arg(args, "contrast", n, 1.0)
        center = self.arg(args, "contrast_center", n, _half_range(in_dtype))
        offset = shift * _full_range(out_dtype) + b * (center - k * center)
        eye = np.eye(channels)
        return eye * (b * k)[:, None, None], np.repeat(offset[:, None], channels, axis=1)


@register("brightness", devices=("cpu", "gpu"), inputs=(1, 1),
          args=_BRIGHTNESS_ARGS + [_dtype_arg(None)])
class Brightness(BrightnessContrast):
    """Adjusts brightness: out = brightness_shift * output_range + brightness * in."""


@register("contrast", devices=("cpu", "gpu"), inputs=(1, 1), args=_CONTRAST_ARGS + [_dtype_arg(None)])
class Contrast(BrightnessContrast):
    """Adjusts contrast: out = contrast_center + contrast * (in - contrast_center)."""


_HUE = Arg("hue", FLOAT, 0.0, "Hue change, in degrees.", per_sample=True)
_SATURATION = Arg("saturation", FLOAT, 1.0, "Saturation multiplier.", per_sample=True)
_IMAGE_TYPE = Arg("image_type", IMAGE_TYPE, types.RGB, "Colour space of the images; accepted and "
                  "ignored, as in DALI 2.4.")


# DALI 2.4 quirk kept on purpose: hsv's dtype defaults to UINT8 (not the input type).
@register("hsv", devices=("cpu", "gpu"), inputs=(1, 1),
          args=[_HUE, _SATURATION, Arg("value", FLOAT, 1.0, "Value (brightness) multiplier.",
                                       per_sample=True),
                _dtype_arg(types.UINT8, "Output type (UINT8 by default, as in DALI).")])
class Hsv(ColorOperator):
    """Adjusts hue (additive, degrees), saturation and value (multipliers) of RGB images,
    approximated by a linear transform in YIQ space as DALI does."""

    needs_rgb = True

    def transform(self, args, n, in_dtype, out_dtype, channels):
        m = yiq_matrix(self.arg(args, "hue", n, 0.0), self.arg(args, "saturation", n, 1.0),
                       self.arg(args, "value", n, 1.0))
        return m, np.zeros((n, 3))


@register("hue", devices=("cpu", "gpu"), inputs=(1, 1), args=[_HUE, _dtype_arg(None), _IMAGE_TYPE])
class Hue(Hsv):
    """Rotates the hue of RGB images by `hue` degrees."""


@register("saturation", devices=("cpu", "gpu"), inputs=(1, 1),
          args=[_SATURATION, _dtype_arg(None), _IMAGE_TYPE])
class Saturation(Hsv):
    """Scales the saturation of RGB images."""


@register("color_twist", devices=("cpu", "gpu"), inputs=(1, 1),
          args=[Arg("brightness", FLOAT, 1.0, "Brightness multiplier.", per_sample=True),
                Arg("contrast", FLOAT, 1.0, "Contrast multiplier, around half the input range.",
                    per_sample=True),
                _HUE, _SATURATION, _dtype_arg(None), _IMAGE_TYPE])
class ColorTwist(ColorOperator):
    """Adjusts hue, saturation, brightness and contrast of RGB images:
    out = brightness * (contrast * hsv(in) + (1 - contrast) * half_range), with half_range
    128 for integer inputs and 0.5 for floats."""

    needs_rgb = True

    def transform(self, args, n, in_dtype, out_dtype, channels):
        b, k = self.arg(args, "brightness", n, 1.0), self.arg(args, "contrast", n, 1.0)
        m = (b * k)[:, None, None] * yiq_matrix(self.arg(args, "hue", n, 0.0), self.arg(args, "saturation", n, 1.0))
        half = 0.5 if in_dtype.is_floating_point else 128.0
        return m, np.repeat(((half - half * k) * b)[:, None], 3, axis=1)
