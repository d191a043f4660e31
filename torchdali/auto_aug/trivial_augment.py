"""TrivialAugment (https://arxiv.org/abs/2103.10158): each sample goes through one
augmentation drawn uniformly from a suite, with a magnitude bin drawn uniformly too."""
from .. import fn, types
from . import augmentations as a
from ._common import pretty_select, seeds, translations, without_excluded
from .core import signed_bin
from .core._args import forbid_unused_kwargs

_DEFAULT_TRANSLATE_ABS, _DEFAULT_TRANSLATE_REL = 32, 1.0


def trivial_augment_wide(data, num_magnitude_bins=31, shape=None, fill_value=128, interp_type=None,
                         max_translate_abs=None, max_translate_rel=None, seed=None, excluded=None):
    """Apply TrivialAugment with its wide augmentation space to a batch of uint8 images
    (HWC) or videos (FHWC).

    shape: the (height, width) of the images (a DataNode or a tuple); with it, translations
    go up to `max_translate_rel` (default 1) of it, else up to `max_translate_abs` pixels
    (default 32). fill_value: padding of the warps; None repeats the border. interp_type:
    INTERP_LINEAR (default) or INTERP_NN. seed: of the random choices. excluded: names of
    augmentations to leave out."""
    use_shape = shape is not None
    augmentations = without_excluded(
        get_trivial_augment_wide_suite(use_shape=use_shape, max_translate_abs=max_translate_abs,
                                       max_translate_rel=max_translate_rel), excluded, "TrivialAugmentWide")
    aug_kwargs = {"fill_value": fill_value, "interp_type": interp_type}
    if use_shape:
        aug_kwargs["shape"] = shape
    return apply_trivial_augment(augmentations, data, num_magnitude_bins=num_magnitude_bins, seed=seed,
                                 **aug_kwargs)


def apply_trivial_augment(augmentations, data, num_magnitude_bins=31, seed=None, **kwargs):
    """Apply one augmentation drawn uniformly from `augmentations` per sample, its magnitude
    bin drawn uniformly from [0, num_magnitude_bins - 1]. `kwargs` go to the augmentations
    that take them by name. Needs a pipeline with `enable_conditionals=True` (unless the
    list has one augmentation)."""
    if not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 1:
        raise ValueError(f"The `num_magnitude_bins` must be a positive integer, got {num_magnitude_bins}.")
    if len(augmentations) == 0:
        raise ValueError("The `augmentations` list cannot be empty. Got empty list in `apply_trivial_augment` call.")
    bin_seed, sign_seed, op_seed = seeds(seed, 3)
    magnitude_bin = fn.random.uniform(values=list(range(num_magnitude_bins)), dtype=types.INT32, seed=bin_seed)
    if any(aug.randomly_negate for aug in augmentations):
        magnitude_bin = signed_bin(magnitude_bin, seed=sign_seed)
    forbid_unused_kwargs(augmentations, kwargs, "apply_trivial_augment")
    op_kwargs = dict(data=data, magnitude_bin=magnitude_bin, num_magnitude_bins=num_magnitude_bins, **kwargs)
    op_idx = fn.random.uniform(values=list(range(len(augmentations))), seed=op_seed, dtype=types.INT32)
    return pretty_select(augmentations, op_idx, op_kwargs, auto_aug_name="apply_trivial_augment",
                         ref_suite_name="get_trivial_augment_wide_suite")


def get_trivial_augment_wide_suite(use_shape=False, max_translate_abs=None, max_translate_rel=None):
    """TrivialAugment's 14 augmentations of the wide space. use_shape: translations relative
    to the image shape (up to `max_translate_rel`, default 1) rather than in pixels (up to
    `max_translate_abs`, default 32); a pair is (height, width)."""
    return translations(use_shape, _DEFAULT_TRANSLATE_ABS, _DEFAULT_TRANSLATE_REL, max_translate_abs,
                        max_translate_rel) + [
        a.shear_x.augmentation((0, 0.99), True),
        a.shear_y.augmentation((0, 0.99), True),
        a.rotate.augmentation((0, 135), True),
        a.brightness.augmentation((0.01, 0.99), True, a.shift_enhance_range),
        a.contrast.augmentation((0.01, 0.99), True, a.shift_enhance_range),
        a.color.augmentation((0.01, 0.99), True, a.shift_enhance_range),
        a.sharpness.augmentation((0.01, 0.99), True, a.sharpness_kernel),
        a.posterize.augmentation((8, 2), False, a.poster_mask_uint8),
        a.solarize.augmentation((256, 0)),  # a lower threshold is stronger
        a.equalize,
        a.auto_contrast,
        a.identity,
    ]
