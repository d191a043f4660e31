"""RandAugment (https://arxiv.org/abs/1909.13719): each sample goes through `n`
augmentations drawn uniformly from a suite, all with the magnitude bin `m`."""
import warnings

from .. import fn, types
from . import augmentations as a
from ._common import pretty_select, seeds, translations, without_excluded
from .core import signed_bin
from .core._args import forbid_unused_kwargs

_DEFAULT_TRANSLATE_ABS, _DEFAULT_TRANSLATE_REL = 100, 100 / 224


def rand_augment(data, n, m, num_magnitude_bins=31, shape=None, fill_value=128, interp_type=None,
                 max_translate_abs=None, max_translate_rel=None, seed=None, monotonic_mag=True, excluded=None):
    """Apply RandAugment with its standard suite to a batch of uint8 images (HWC) or videos (FHWC).

    n: augmentations per sample; m: their magnitude bin, in [0, num_magnitude_bins - 1].
    shape: the (height, width) of the images (a DataNode or a tuple); with it, translations
    go up to `max_translate_rel` (default 100/224) of it, else up to `max_translate_abs`
    pixels (default 100). fill_value: padding of the warps; None repeats the border.
    interp_type: INTERP_LINEAR (default) or INTERP_NN. seed: of the random choices.
    monotonic_mag: the suite whose strength grows with the bin (`get_rand_augment_suite`),
    else `get_rand_augment_non_monotonic_suite`. excluded: names of augmentations to leave out."""
    use_shape = shape is not None
    suite = get_rand_augment_suite if monotonic_mag else get_rand_augment_non_monotonic_suite
    augmentations = without_excluded(suite(use_shape, max_translate_abs, max_translate_rel), excluded,
                                     "RandAugment")
    aug_kwargs = {"fill_value": fill_value, "interp_type": interp_type}
    if use_shape:
        aug_kwargs["shape"] = shape
    return apply_rand_augment(augmentations, data, n, m, num_magnitude_bins=num_magnitude_bins, seed=seed,
                              **aug_kwargs)


def apply_rand_augment(augmentations, data, n, m, num_magnitude_bins=31, seed=None, **kwargs):
    """Apply `n` augmentations drawn uniformly (independently per sample and step) from
    `augmentations`, each with magnitude bin `m` of `num_magnitude_bins`. `kwargs` go to
    the augmentations that take them by name. Needs a pipeline with `enable_conditionals=True`
    (unless the list has one augmentation)."""
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"The number of operations to apply `n` must be a non-negative integer, got {n}.")
    if not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 1:
        raise ValueError(f"The `num_magnitude_bins` must be a positive integer, got {num_magnitude_bins}.")
    if not isinstance(m, int) or not 0 <= m < num_magnitude_bins:
        raise ValueError(f"The magnitude bin `m` must be an integer from `[0, {num_magnitude_bins - 1}]` range. "
                         f"Got {m}.")
    if n == 0:
        warnings.warn("The `apply_rand_augment` was called with `n=0`, no augmentation will be applied.", Warning)
        return data
    if len(augmentations) == 0:
        raise ValueError("The `augmentations` list cannot be empty, unless n=0. Got empty list in "
                         "`apply_rand_augment` call.")
    shape = () if n == 1 else (n,)
    op_seed, sign_seed = seeds(seed, 2)
    op_idx = fn.random.uniform(values=list(range(len(augmentations))), seed=op_seed, shape=shape, dtype=types.INT32)
    signed = any(aug.randomly_negate for aug in augmentations)
    mag_bin = signed_bin(m, seed=sign_seed, shape=shape) if signed else m
    forbid_unused_kwargs(augmentations, kwargs, "apply_rand_augment")
    for level in range(n):
        op_kwargs = dict(data=data, magnitude_bin=mag_bin if not signed or n == 1 else mag_bin[level],
                         num_magnitude_bins=num_magnitude_bins, **kwargs)
        data = pretty_select(augmentations, op_idx if n == 1 else op_idx[level], op_kwargs,
                             auto_aug_name="apply_rand_augment", ref_suite_name="get_rand_augment_suite")
    return data


def get_rand_augment_suite(use_shape=False, max_translate_abs=None, max_translate_rel=None):
    """RandAugment's 14 augmentations, stronger with higher bins. use_shape: translations
    relative to the image shape (up to `max_translate_rel`, default 100/224) rather than in
    pixels (up to `max_translate_abs`, default 100); a pair is (height, width)."""
    return translations(use_shape, _DEFAULT_TRANSLATE_ABS, _DEFAULT_TRANSLATE_REL, max_translate_abs,
                        max_translate_rel) + [
        a.shear_x.augmentation((0, 0.3), True),
        a.shear_y.augmentation((0, 0.3), True),
        a.rotate.augmentation((0, 30), True),
        a.brightness.augmentation((0, 0.9), True, a.shift_enhance_range),
        a.contrast.augmentation((0, 0.9), True, a.shift_enhance_range),
        a.color.augmentation((0, 0.9), True, a.shift_enhance_range),
        a.sharpness.augmentation((0, 0.9), True, a.sharpness_kernel),
        a.posterize.augmentation((8, 4), False, a.poster_mask_uint8),
        a.solarize.augmentation((256, 0)),  # a lower threshold is stronger
        a.equalize,
        a.auto_contrast,
        a.identity,
    ]


def get_rand_augment_non_monotonic_suite(use_shape=False, max_translate_abs=None, max_translate_rel=None):
    """RandAugment's suite with AutoAugment's ranges for brightness, contrast, color,
    sharpness (0.1 to 1.9: weakest in the middle bins), posterize and solarize (weaker with
    higher bins)."""
    return translations(use_shape, _DEFAULT_TRANSLATE_ABS, _DEFAULT_TRANSLATE_REL, max_translate_abs,
                        max_translate_rel) + [
        a.shear_x.augmentation((0, 0.3), True),
        a.shear_y.augmentation((0, 0.3), True),
        a.rotate.augmentation((0, 30), True),
        a.brightness.augmentation((0.1, 1.9), False, None),
        a.contrast.augmentation((0.1, 1.9), False, None),
        a.color.augmentation((0.1, 1.9), False, None),
        a.sharpness.augmentation((0.1, 1.9), False, a.sharpness_kernel_shifted),
        a.posterize.augmentation((0, 4), False, a.poster_mask_uint8),
        a.solarize.augmentation((0, 256), False, None),
        a.equalize,
        a.auto_contrast,
        a.identity,
    ]
