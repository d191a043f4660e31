"""AutoAugment (https://arxiv.org/abs/1805.09501): each sample takes one sub-policy of a
`Policy` at random and applies its augmentations in order, each with its probability and
magnitude bin. The policies of the paper: ImageNet, reduced ImageNet, SVHN, reduced CIFAR-10."""
import numpy as np

from .. import fn, types
from ..conditionals import runtime
from . import augmentations as a
from ._common import pretty_select, seeds, translations
from .core import Policy, signed_bin
from .core._args import forbid_unused_kwargs
from .core._select import require_conditionals

_DEFAULT_TRANSLATE_ABS, _DEFAULT_TRANSLATE_REL = 250, 1.0
_POLICIES_WITHOUT_TRANSLATION = ("reduced_image_net",)


def auto_augment(data, policy_name="image_net", shape=None, fill_value=128, interp_type=None,
                 max_translate_abs=None, max_translate_rel=None, seed=None):
    """Apply one of the paper's policies to a batch of uint8 images (HWC) or videos (FHWC).

    policy_name: 'image_net', 'reduced_image_net', 'svhn' or 'reduced_cifar10'.
    shape: the (height, width) of the images (a DataNode or a tuple); with it, translations
    go up to `max_translate_rel` (default 1) of it, else up to `max_translate_abs` pixels
    (default 250). fill_value: padding of the warps (translation, shear, rotation); None
    repeats the border. interp_type: INTERP_LINEAR (default) or INTERP_NN.
    seed: of the random choices (sub-policies, application, signs of magnitudes)."""
    policies = {"image_net": get_image_net_policy, "reduced_image_net": get_reduced_image_net_policy,
                "svhn": get_svhn_policy, "reduced_cifar10": get_reduced_cifar10_policy}
    if not isinstance(policy_name, str) or policy_name not in policies:
        names = ", ".join(f"`{name}`" for name in policies)
        raise ValueError(f"The `policy_name` must be a string that takes one of the values: {names}")
    if policy_name in _POLICIES_WITHOUT_TRANSLATION:
        given = next((name for value, name in ((shape, "shape"), (max_translate_abs, "max_translate_abs"),
                                               (max_translate_rel, "max_translate_rel")) if value is not None), None)
        if given is not None:
            raise ValueError(f"The policy `{policy_name}` does not contain any augmentations that rely on the image "
                             f"shape. The `{given}` argument must not be specified in that case.")
        policy = policies[policy_name]()
    else:
        policy = policies[policy_name](use_shape=shape is not None, max_translate_abs=max_translate_abs,
                                       max_translate_rel=max_translate_rel)
    aug_kwargs = {"fill_value": fill_value, "interp_type": interp_type}
    if shape is not None:
        aug_kwargs["shape"] = shape
    return apply_auto_augment(policy, data, seed, **aug_kwargs)


def auto_augment_image_net(data, shape=None, fill_value=128, interp_type=None, max_translate_abs=None,
                           max_translate_rel=None, seed=None):
    """`auto_augment` with the ImageNet policy."""
    return auto_augment(data, "image_net", shape, fill_value, interp_type, max_translate_abs, max_translate_rel,
                        seed)


def apply_auto_augment(policy, data, seed=None, **kwargs):
    """Apply `policy` AutoAugment's way: per sample, a sub-policy drawn uniformly, then each
    of its steps applied with its probability. `kwargs` go to the augmentations that take
    them by name (e.g. `shape`, `fill_value`, `interp_type`). Needs a pipeline with
    `enable_conditionals=True`."""
    if len(policy.sub_policies) == 0:
        raise ValueError(f"Cannot run empty policy. Got {policy} in `apply_auto_augment` call.")
    steps = max(len(sub_policy) for sub_policy in policy.sub_policies)
    run_seed, sub_policy_seed, sign_seed = seeds(seed, 3)
    should_run = fn.random.uniform(range=[0, 1], shape=(steps,), dtype=types.FLOAT, seed=run_seed)
    sub_policy_id = fn.random.uniform(values=list(range(len(policy.sub_policies))), seed=sub_policy_seed,
                                      dtype=types.INT32)
    probabilities, bins, aug_ids, stage_augmentations = _tables(policy, steps)
    run_probabilities = types.Constant(probabilities)[sub_policy_id]
    magnitude_bins = types.Constant(bins)[sub_policy_id]
    aug_ids = types.Constant(aug_ids)[sub_policy_id]
    if any(aug.randomly_negate for aug in policy.augmentations.values()):
        magnitude_bins = signed_bin(magnitude_bins, seed=sign_seed, shape=(steps,))
    forbid_unused_kwargs(policy.augmentations.values(), kwargs, "apply_auto_augment")
    require_conditionals("apply_auto_augment")
    for step in range(steps):
        op_kwargs = dict(data=data, magnitude_bin=magnitude_bins[step], num_magnitude_bins=policy.num_magnitude_bins,
                         **kwargs)
        data = runtime.if_exp(
            should_run[step] < run_probabilities[step],
            lambda: pretty_select(stage_augmentations[step], aug_ids[step], op_kwargs,
                                  auto_aug_name="apply_auto_augment", ref_suite_name="get_image_net_policy"),
            lambda: data, f"random < probability of step {step}")
    return data


def _tables(policy, steps):
    """Per sub-policy and step: the probability [S, steps] (0 past a sub-policy's end), the
    magnitude bin (-999 where there is none) and the index of the augmentation in that step's
    list (each step's distinct augmentations, then identity, which pads the short sub-policies)."""
    subs = policy.sub_policies
    probabilities = np.zeros((len(subs), steps), np.float32)
    bins = np.zeros((len(subs), steps), np.int32)
    stage_augmentations = [list(dict.fromkeys(sub[step][0] for sub in subs if step < len(sub))) + [a.identity]
                           for step in range(steps)]
    aug_ids = np.array([[len(stage) - 1 for stage in stage_augmentations]] * len(subs), np.int32)
    for i, sub in enumerate(subs):
        for step, (aug, p, mag) in enumerate(sub):
            probabilities[i, step] = p
            bins[i, step] = -999 if mag is None else mag
            aug_ids[i, step] = stage_augmentations[step].index(aug)
    return probabilities, bins, aug_ids, stage_augmentations


def _translate_and_warps(use_shape, max_translate_abs, max_translate_rel):
    """translate_x, translate_y, shear_x, shear_y and rotate as the AutoAugment policies use them."""
    translate_x, translate_y = translations(use_shape, _DEFAULT_TRANSLATE_ABS, _DEFAULT_TRANSLATE_REL,
                                            max_translate_abs, max_translate_rel)
    return (translate_x, translate_y, a.shear_x.augmentation((0, 0.3), True), a.shear_y.augmentation((0, 0.3), True),
            a.rotate.augmentation((0, 30), True))


def _enhance(aug, mag_to_param=None):
    """An enhance augmentation over AutoAugment's non-negated magnitudes 0.1 to 1.9."""
    return aug.augmentation((0.1, 1.9), False, mag_to_param)


def _posterize():
    return a.posterize.augmentation((0, 4), False, a.poster_mask_uint8)


def _solarize():
    return a.solarize.augmentation((0, 256), False)


def get_image_net_policy(use_shape=False, max_translate_abs=None, max_translate_rel=None):
    """AutoAugment's policy for ImageNet. use_shape: translations relative to the image shape
    (up to `max_translate_rel`, default 1) rather than in pixels (up to `max_translate_abs`,
    default 250); a pair is (height, width)."""
    _, translate_y, shear_x, shear_y, rotate = _translate_and_warps(use_shape, max_translate_abs, max_translate_rel)
    color = _enhance(a.color)
    posterize, solarize = _posterize(), _solarize()
    solarize_add = a.solarize_add.augmentation((0, 110), False)
    invert, equalize, auto_contrast = a.invert, a.equalize, a.auto_contrast
    return Policy(name="ImageNetPolicy", num_magnitude_bins=11, sub_policies=[
        [(equalize, 0.8, None), (shear_y, 0.8, 4)],
        [(color, 0.4, 9), (equalize, 0.6, None)],
        [(color, 0.4, 1), (rotate, 0.6, 8)],
        [(solarize, 0.8, 3), (equalize, 0.4, None)],
        [(solarize, 0.4, 2), (solarize, 0.6, 2)],
        [(color, 0.2, 0), (equalize, 0.8, None)],
        [(equalize, 0.4, None), (solarize_add, 0.8, 3)],
        [(shear_x, 0.2, 9), (rotate, 0.6, 8)],
        [(color, 0.6, 1), (equalize, 1.0, None)],
        [(invert, 0.4, None), (rotate, 0.6, 0)],
        [(equalize, 1.0, None), (shear_y, 0.6, 3)],
        [(color, 0.4, 7), (equalize, 0.6, None)],
        [(posterize, 0.4, 6), (auto_contrast, 0.4, None)],
        [(solarize, 0.6, 8), (color, 0.6, 9)],
        [(solarize, 0.2, 4), (rotate, 0.8, 9)],
        [(rotate, 1.0, 7), (translate_y, 0.8, 9)],
        [(solarize, 0.8, 4)],
        [(shear_y, 0.8, 0), (color, 0.6, 4)],
        [(color, 1.0, 0), (rotate, 0.6, 2)],
        [(equalize, 0.8, None)],
        [(equalize, 1.0, None), (auto_contrast, 0.6, None)],
        [(shear_y, 0.4, 7), (solarize_add, 0.6, 7)],
        [(posterize, 0.8, 2), (solarize, 0.6, 10)],
        [(solarize, 0.6, 8), (equalize, 0.6, None)],
        [(color, 0.8, 6), (rotate, 0.4, 5)],
    ])


def get_reduced_cifar10_policy(use_shape=False, max_translate_abs=None, max_translate_rel=None):
    """AutoAugment's policy for reduced CIFAR-10 (translations as in `get_image_net_policy`)."""
    translate_x, translate_y, _, shear_y, rotate = _translate_and_warps(use_shape, max_translate_abs,
                                                                        max_translate_rel)
    brightness, color, contrast = _enhance(a.brightness), _enhance(a.color), _enhance(a.contrast)
    sharpness = _enhance(a.sharpness, a.sharpness_kernel_shifted)
    posterize, solarize = _posterize(), _solarize()
    invert, equalize, auto_contrast = a.invert, a.equalize, a.auto_contrast
    return Policy(name="ReducedCifar10Policy", num_magnitude_bins=11, sub_policies=[
        [(invert, 0.1, None), (contrast, 0.2, 6)],
        [(rotate, 0.7, 2), (translate_x, 0.3, 9)],
        [(sharpness, 0.8, 1), (sharpness, 0.9, 3)],
        [(shear_y, 0.5, 8), (translate_y, 0.7, 9)],
        [(auto_contrast, 0.5, None), (equalize, 0.9, None)],
        [(shear_y, 0.2, 7), (posterize, 0.3, 7)],
        [(color, 0.4, 3), (brightness, 0.6, 7)],
        [(sharpness, 0.3, 9), (brightness, 0.7, 9)],
        [(equalize, 0.6, None), (equalize, 0.5, None)],
        [(contrast, 0.6, 7), (sharpness, 0.6, 5)],
        [(color, 0.7, 7), (translate_x, 0.5, 8)],
        [(equalize, 0.3, None), (auto_contrast, 0.4, None)],
        [(translate_y, 0.4, 3), (sharpness, 0.2, 6)],
        [(brightness, 0.9, 6), (color, 0.2, 8)],
        [(solarize, 0.5, 2)],
        [(equalize, 0.2, None), (auto_contrast, 0.6, None)],
        [(equalize, 0.2, None), (equalize, 0.6, None)],
        [(color, 0.9, 9), (equalize, 0.6, None)],
        [(auto_contrast, 0.8, None), (solarize, 0.2, 8)],
        [(brightness, 0.1, 3), (color, 0.7, 0)],
        [(solarize, 0.4, 5), (auto_contrast, 0.9, None)],
        [(translate_y, 0.9, 9), (translate_y, 0.7, 9)],
        [(auto_contrast, 0.9, None), (solarize, 0.8, 3)],
        [(equalize, 0.8, None), (invert, 0.1, None)],
        [(translate_y, 0.7, 9), (auto_contrast, 0.9, None)],
    ])


def get_svhn_policy(use_shape=False, max_translate_abs=None, max_translate_rel=None):
    """AutoAugment's policy for SVHN (translations as in `get_image_net_policy`)."""
    translate_x, translate_y, shear_x, shear_y, rotate = _translate_and_warps(use_shape, max_translate_abs,
                                                                              max_translate_rel)
    contrast, solarize = _enhance(a.contrast), _solarize()
    invert, equalize, auto_contrast = a.invert, a.equalize, a.auto_contrast
    return Policy(name="SvhnPolicy", num_magnitude_bins=11, sub_policies=[
        [(shear_x, 0.9, 4), (invert, 0.2, None)],
        [(shear_y, 0.9, 8), (invert, 0.7, None)],
        [(equalize, 0.6, None), (solarize, 0.6, 6)],
        [(invert, 0.9, None), (equalize, 0.6, None)],
        [(equalize, 0.6, None), (rotate, 0.9, 3)],
        [(shear_x, 0.9, 4), (auto_contrast, 0.8, None)],
        [(shear_y, 0.9, 8), (invert, 0.4, None)],
        [(shear_y, 0.9, 5), (solarize, 0.2, 6)],
        [(invert, 0.9, None), (auto_contrast, 0.8, None)],
        [(equalize, 0.6, None), (rotate, 0.9, 3)],
        [(shear_x, 0.9, 4), (solarize, 0.3, 3)],
        [(shear_y, 0.8, 8), (invert, 0.7, None)],
        [(equalize, 0.9, None), (translate_y, 0.6, 6)],
        [(invert, 0.9, None), (equalize, 0.6, None)],
        [(contrast, 0.3, 3), (rotate, 0.8, 4)],
        [(invert, 0.8, None)],
        [(shear_y, 0.7, 6), (solarize, 0.4, 8)],
        [(invert, 0.6, None), (rotate, 0.8, 4)],
        [(shear_y, 0.3, 7), (translate_x, 0.9, 3)],
        [(shear_x, 0.1, 6), (invert, 0.6, None)],
        [(solarize, 0.7, 2), (translate_y, 0.6, 7)],
        [(shear_y, 0.8, 4), (invert, 0.8, None)],
        [(shear_x, 0.7, 9), (translate_y, 0.8, 3)],
        [(shear_y, 0.8, 5), (auto_contrast, 0.7, None)],
        [(shear_x, 0.7, 2), (invert, 0.1, None)],
    ])


def get_reduced_image_net_policy():
    """AutoAugment's policy for reduced ImageNet (no translations)."""
    shear_x, rotate = a.shear_x.augmentation((0, 0.3), True), a.rotate.augmentation((0, 30), True)
    color, contrast = _enhance(a.color), _enhance(a.contrast)
    sharpness = _enhance(a.sharpness, a.sharpness_kernel_shifted)
    posterize, solarize = _posterize(), _solarize()
    invert, equalize, auto_contrast = a.invert, a.equalize, a.auto_contrast
    return Policy(name="ReducedImageNetPolicy", num_magnitude_bins=11, sub_policies=[
        [(posterize, 0.4, 8), (rotate, 0.6, 9)],
        [(solarize, 0.6, 5), (auto_contrast, 0.6, None)],
        [(equalize, 0.8, None), (equalize, 0.6, None)],
        [(posterize, 0.6, 7), (posterize, 0.6, 6)],
        [(equalize, 0.4, None), (solarize, 0.2, 4)],
        [(equalize, 0.4, None), (rotate, 0.8, 8)],
        [(solarize, 0.6, 3), (equalize, 0.6, None)],
        [(posterize, 0.8, 5), (equalize, 1.0, None)],
        [(rotate, 0.2, 3), (solarize, 0.6, 8)],
        [(equalize, 0.6, None), (posterize, 0.4, 6)],
        [(rotate, 0.8, 8), (color, 0.4, 0)],
        [(rotate, 0.4, 9), (equalize, 0.6, None)],
        [(equalize, 0.8, None)],
        [(invert, 0.6, None), (equalize, 1.0, None)],
        [(color, 0.6, 4), (contrast, 1.0, 8)],
        [(rotate, 0.8, 8), (color, 1.0, 2)],
        [(color, 0.8, 8), (solarize, 0.8, 7)],
        [(sharpness, 0.4, 7), (invert, 0.6, None)],
        [(shear_x, 0.6, 5), (equalize, 1.0, None)],
        [(color, 0.4, 0), (equalize, 0.6, None)],
        [(equalize, 0.4, None), (solarize, 0.2, 4)],
        [(solarize, 0.6, 5), (auto_contrast, 0.6, None)],
        [(invert, 0.6, None), (equalize, 1.0, None)],
        [(color, 0.6, 4), (contrast, 1.0, 8)],
        [(equalize, 0.8, None), (equalize, 0.6, None)],
    ])
