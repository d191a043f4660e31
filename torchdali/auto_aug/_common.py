"""What AutoAugment, RandAugment and TrivialAugment share: the seeds of their random
choices, the translations of a suite (relative to the image shape or in pixels), the
suite less the `excluded` names, and the per-sample choice of an augmentation with errors
naming the scheme."""
import numpy as np

from . import augmentations as a
from .core._args import MissingArgException
from .core._select import select_for


def seeds(seed, count):
    """Seeds for the `count` random choices of a scheme: None (the pipeline's) or `count`
    seeds derived from `seed`. DALI gives each choice `seed` itself, so that they all read
    one random stream and depend on each other (TrivialAugment with a seed then makes only
    10 of its 48 (augmentation, magnitude, sign) combinations); these are independent."""
    if seed is None:
        return [None] * count
    return [int(s) & 0x7FFFFFFF for s in np.random.SeedSequence(seed).generate_state(count)]


def _height_width(max_translate):
    if isinstance(max_translate, (tuple, list)):
        height, width = max_translate
        return height, width
    return max_translate, max_translate


def max_translations(use_shape, max_translate_abs=None, max_translate_rel=None, default_translate_abs=250,
                     default_translate_rel=1.0):
    """The largest translation (height, width): relative with `use_shape`, else in pixels."""
    if not isinstance(use_shape, bool):
        raise TypeError(f"The `use_shape` is a flag that should be set to either True or False, got {use_shape}.")
    if use_shape:
        if max_translate_abs is not None:
            raise ValueError("The argument `max_translate_abs` cannot be used with image shapes. You may use "
                             "`max_translate_rel` instead.")
        return _height_width(default_translate_rel if max_translate_rel is None else max_translate_rel)
    if max_translate_rel is not None:
        raise ValueError("The argument `max_translate_rel` cannot be used without image shapes. You may use "
                         "`max_translate_abs` instead.")
    return _height_width(default_translate_abs if max_translate_abs is None else max_translate_abs)


def translations(use_shape, default_translate_abs, default_translate_rel, max_translate_abs=None,
                 max_translate_rel=None):
    """[translate_x, translate_y] of a suite, their magnitudes up to the largest translation."""
    height, width = max_translations(use_shape, max_translate_abs, max_translate_rel, default_translate_abs,
                                     default_translate_rel)
    x, y = (a.translate_x, a.translate_y) if use_shape else (a.translate_x_no_shape, a.translate_y_no_shape)
    return [x.augmentation((0, width), True), y.augmentation((0, height), True)]


def without_excluded(augmentations, excluded, suite_name):
    """`augmentations` less those named in `excluded`; an unknown name is an error."""
    names = [aug.name for aug in augmentations]
    excluded = excluded or []
    for name in excluded:
        if name not in names:
            raise ValueError(f"The `{name}` was specified in `excluded`, but the {suite_name} suite does not contain "
                             f"augmentation with this name. The augmentations in the suite are: {', '.join(names)}.")
    return [aug for aug in augmentations if aug.name not in excluded]


def pretty_select(augmentations, aug_ids, op_kwargs, auto_aug_name, ref_suite_name):
    """`select` for `auto_aug_name`, explaining a missing `shape` of the translations."""
    try:
        return select_for(auto_aug_name, augmentations, aug_ids, (), op_kwargs)
    except MissingArgException as e:
        if e.missing_args != ["shape"] or e.augmentation.op not in (a.translate_x.op, a.translate_y.op):
            raise
        raise MissingArgException(
            f"The augmentation `{e.augmentation.name}` requires `shape` argument that describes image shape (in "
            f"HWC layout). Please provide it as `shape` argument to `{auto_aug_name}` call. You can get the image "
            f"shape from encoded images with `fn.peek_image_shape`. Alternatively, you can use "
            f"`translate_x_no_shape`/`translate_y_no_shape` that does not rely on image shape, but uses offset "
            f"from fixed range: for reference see `{ref_suite_name}` and its `use_shape` argument.",
            augmentation=e.augmentation, missing_args=e.missing_args) from None
