"""The standard augmentations of AutoAugment (ImageNet), RandAugment and TrivialAugmentWide,
written with torchdali's operators on uint8 images (HWC, or FHWC videos).

Decorated with `@augmentation`, each takes a batch and `magnitude_bin` /
`num_magnitude_bins` instead of its parameter; the magnitude ranges here are examples
that the suites and policies adjust, e.g. `shear_x.augmentation(mag_range=(0, 0.5))`."""
import numpy as np

from .. import fn, types
from .core import augmentation


def warp_x_param(magnitude):
    """The parameter of the horizontal warps (shear_x, translate_x): [magnitude, 0]."""
    return [magnitude, 0]


def warp_y_param(magnitude):
    """The parameter of the vertical warps (shear_y, translate_y): [0, magnitude]."""
    return [0, magnitude]


def _warp(data, matrix, fill_value, interp_type):
    """`data` moved by the forward affine `matrix` (an output of fn.transforms.*)."""
    return fn.warp_affine(data, matrix=matrix, fill_value=fill_value, interp_type=interp_type, inverse_map=False)


@augmentation(mag_range=(0, 0.3), randomly_negate=True, mag_to_param=warp_x_param)
def shear_x(data, shear, fill_value=128, interp_type=None):
    return _warp(data, fn.transforms.shear(shear=shear), fill_value, interp_type)


@augmentation(mag_range=(0, 0.3), randomly_negate=True, mag_to_param=warp_y_param)
def shear_y(data, shear, fill_value=128, interp_type=None):
    return _warp(data, fn.transforms.shear(shear=shear), fill_value, interp_type)


@augmentation(mag_range=(0.0, 1.0), randomly_negate=True, mag_to_param=warp_x_param)
def translate_x(data, rel_offset, shape, fill_value=128, interp_type=None):
    """Shift by a fraction of the width; `shape` is the images' (height, width, ...)."""
    return _warp(data, fn.transforms.translation(offset=rel_offset * shape[1]), fill_value, interp_type)


@augmentation(mag_range=(0, 250), randomly_negate=True, mag_to_param=warp_x_param, name="translate_x")
def translate_x_no_shape(data, offset, fill_value=128, interp_type=None):
    """Shift by a number of pixels."""
    return _warp(data, fn.transforms.translation(offset=offset), fill_value, interp_type)


@augmentation(mag_range=(0.0, 1.0), randomly_negate=True, mag_to_param=warp_y_param)
def translate_y(data, rel_offset, shape, fill_value=128, interp_type=None):
    """Shift by a fraction of the height; `shape` is the images' (height, width, ...)."""
    return _warp(data, fn.transforms.translation(offset=rel_offset * shape[0]), fill_value, interp_type)


@augmentation(mag_range=(0, 250), randomly_negate=True, mag_to_param=warp_y_param, name="translate_y")
def translate_y_no_shape(data, offset, fill_value=128, interp_type=None):
    """Shift by a number of pixels."""
    return _warp(data, fn.transforms.translation(offset=offset), fill_value, interp_type)


@augmentation(mag_range=(0, 30), randomly_negate=True)
def rotate(data, angle, fill_value=128, interp_type=None, rotate_keep_size=True):
    return fn.rotate(data, angle=angle, fill_value=fill_value, interp_type=interp_type, keep_size=rotate_keep_size)


def shift_enhance_range(magnitude):
    """The enhance operations (brightness, contrast, color, sharpness) are neutral at 1 and
    stronger the further from it: their magnitudes, in [0, 1] and randomly negated, are
    shifted by 1."""
    return 1 + magnitude


@augmentation(mag_range=(0, 0.9), randomly_negate=True, mag_to_param=shift_enhance_range)
def brightness(data, parameter):
    return fn.brightness(data, brightness=parameter)


@augmentation(mag_range=(0, 0.9), randomly_negate=True, mag_to_param=shift_enhance_range)
def contrast(data, parameter):
    """PIL's ImageEnhance.Contrast: around the mean of the luma (channel-weighted mean) of
    each image (HWC or FHWC)."""
    mean = fn.reductions.mean(data, axis_names="HW", keep_dims=True)
    luma_weights = types.Constant(np.array([0.299, 0.587, 0.114], dtype=np.float32), device=data.device)
    center = fn.reductions.sum(mean * luma_weights, axis_names="C", keep_dims=True)
    # Arithmetic rather than fn.contrast(contrast_center=center): a GPU `center` can't be an argument input.
    return fn.cast_like(center + (data - center) * parameter, data)


@augmentation(mag_range=(0, 0.9), randomly_negate=True, mag_to_param=shift_enhance_range)
def color(data, parameter):
    return fn.saturation(data, saturation=parameter)


def sharpness_kernel(magnitude):
    """The 3x3 filter blending PIL's smoothing filter and the identity, for magnitudes in [-1, 1]."""
    blur = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], dtype=np.float32) / 13
    ident = np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0]], dtype=np.float32)
    return -magnitude * blur + (1 + magnitude) * ident


def sharpness_kernel_shifted(magnitude):
    """`sharpness_kernel` for magnitudes in [0, 2]."""
    return sharpness_kernel(magnitude - 1)


@augmentation(mag_range=(0, 0.9), randomly_negate=True, mag_to_param=sharpness_kernel, param_device="auto")
def sharpness(data, kernel):
    """PIL's ImageEnhance.Sharpness, but for the 1 px border: PIL keeps the input there,
    here the filter reads the border reflected."""
    return fn.filter(data, kernel)


def poster_mask_uint8(magnitude):
    """The mask keeping the `magnitude` (rounded, 1 to 8) highest bits of uint8 values; 0 is
    taken as 1 (as in the RandAugment paper's implementations), so that no image is blanked."""
    bits = int(min(max(np.round(magnitude), 1), 8))
    return np.array(np.uint8(255) ^ np.uint8(2 ** (8 - bits) - 1), dtype=np.uint8)


@augmentation(mag_range=(0, 4), mag_to_param=poster_mask_uint8, param_device="auto")
def posterize(data, mask):
    return data & mask


@augmentation(mag_range=(256, 0), param_device="auto")
def solarize(data, threshold):
    """Invert the values at or above `threshold`."""
    inverted = types.Constant(255, dtype=types.UINT8) - data
    below = data < threshold
    return below * data + (below ^ True) * inverted


def solarize_add_shift(shift):
    """solarize_add's parameter: the shift as uint8; shifts of 128 or more are refused, as in DALI."""
    if shift >= 128:
        raise ValueError("The solarize_add augmentation accepts shifts from 0 to 128")
    return np.uint8(shift)


@augmentation(mag_range=(0, 110), param_device="auto", mag_to_param=solarize_add_shift)
def solarize_add(data, shift):
    """Add `shift` to the values below 128."""
    below = data < types.Constant(128, dtype=types.UINT8)
    return below * (data + shift) + (below ^ True) * data


@augmentation
def invert(data, _):
    return types.Constant(255, dtype=types.UINT8) - data


@augmentation
def equalize(data, _):
    """Histogram equalization per channel, as OpenCV's (PIL's lookup table differs slightly)."""
    return fn.equalize(data)


@augmentation
def auto_contrast(data, _):
    """Stretch each channel of each image (HWC or FHWC) to [0, 255]; a constant channel is kept."""
    lo = fn.reductions.min(data, axis_names="HW", keep_dims=True)
    hi = fn.reductions.max(data, axis_names="HW", keep_dims=True)
    diff = hi - lo
    stretch = diff > 0
    keep = stretch ^ True
    # 255 / diff where diff > 0, else 1 (and no shift)
    scale = 255 / (diff * stretch + types.Constant(255, dtype=types.UINT8) * keep)
    return fn.cast_like((data - lo * stretch) * scale, data)


@augmentation
def identity(data, _):
    return data
