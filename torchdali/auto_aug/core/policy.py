"""`Policy`: AutoAugment's sub-policies, sequences of (augmentation, probability, magnitude bin)."""
import warnings

from ._augmentation import Augmentation


class Policy:
    """An augmentation policy as in AutoAugment (https://arxiv.org/abs/1805.09501): each
    sample takes one of `sub_policies` uniformly at random, then each (augmentation,
    probability, magnitude bin) of it in order, applied with that probability.

    name: for presentation; num_magnitude_bins: the bins the augmentations' magnitude ranges
    are divided into; a bin is None for augmentations without magnitudes."""

    def __init__(self, name, num_magnitude_bins, sub_policies):
        self.name = name
        self.num_magnitude_bins = num_magnitude_bins
        if not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 1:
            raise ValueError(f"The `num_magnitude_bins` must be a positive integer, got {num_magnitude_bins}.")
        if not isinstance(sub_policies, (list, tuple)):
            raise TypeError(f"The `sub_policies` must be a list or tuple of sub policies, got {type(sub_policies)}.")
        for sub_policy in sub_policies:
            if not isinstance(sub_policy, (list, tuple)):
                raise TypeError(f"Each sub policy must be a list or tuple, got {sub_policy}.")
            for op_desc in sub_policy:
                self._check(op_desc)
        self.sub_policies = _with_unique_names(sub_policies)

    def _check(self, op_desc):
        if not isinstance(op_desc, (list, tuple)) or len(op_desc) != 3:
            raise TypeError(f"Each operation in sub policy must be specified as a triple: "
                            f"(augmentation, probability, magnitude). Got {op_desc}.")
        aug, p, mag = op_desc
        if not isinstance(aug, Augmentation):
            raise TypeError(f"Each augmentation in sub policies must be an instance of Augmentation. Got `{aug}`. "
                            f"Did you forget to use `@augmentation` decorator?")
        if not isinstance(p, (float, int)) or not 0 <= p <= 1:
            raise ValueError(f"Probability of applying the augmentation must be a number from `[0, 1]` range. "
                             f"Got `{p}` for augmentation `{aug.name}`.")
        if p == 0:
            warnings.warn(f"The augmentation `{aug.name}` in policy `{self.name}` is used with probability 0 in "
                          f"one of the sub-policies.")
        if mag is None:
            if aug.mag_range is not None:
                raise ValueError(f"The augmentation `{aug.name}` has `mag_range` specified, so the magnitude bin "
                                 f"is required. However, got `None` in the policy `{self.name}`.")
            return
        if aug.mag_range is None:
            warnings.warn(f"The magnitude bin `{mag}` for augmentation `{aug.name}` in policy `{self.name}` will be "
                          f"ignored. The augmentation does not accept magnitudes (as it has no `mag_range` "
                          f"specified). You can specify `None` instead of `{mag}` to silence this warning.")
        if not isinstance(mag, int) or not 0 <= mag < self.num_magnitude_bins:
            raise ValueError(f"Magnitude of the augmentation must be an integer from "
                             f"`[0, {self.num_magnitude_bins - 1}]` range. Got `{mag}` for augmentation "
                             f"`{aug.name}`.")

    @property
    def augmentations(self):
        """The policy's augmentations by name (sorted by name)."""
        augments = sorted({aug for sub_policy in self.sub_policies for aug, _, _ in sub_policy}, key=lambda a: a.name)
        return {aug.name: aug for aug in augments}

    def __repr__(self):
        def block(items):
            return "".join("\n\t" + item + ("," if i < len(items) - 1 else "") for i, item in enumerate(items))

        subs = block([repr([(aug.name, p, mag) for aug, p, mag in sub]) for sub in self.sub_policies])
        augs = block([f"'{name}': {aug!r}" for name, aug in self.augmentations.items()])
        return (f"Policy(name={self.name!r}, num_magnitude_bins={self.num_magnitude_bins!r}, "
                f"sub_policies=[{subs}], augmentations={{{augs}}})")


def _with_unique_names(sub_policies):
    """The sub-policies as tuples; different augmentations sharing a name are renamed
    `0__name`, `1__name`, ... (numbered in order of first use) so that names are unambiguous."""
    used = [aug for sub_policy in sub_policies for aug, _, _ in sub_policy]
    distinct = list(dict.fromkeys(used))
    if len({aug.name for aug in distinct}) == len(distinct):
        return tuple(tuple(sub_policy) for sub_policy in sub_policies)
    digits = len(str(len(distinct) - 1))
    renamed = {aug: aug.augmentation(name=f"{str(i).zfill(digits)}__{aug.name}") for i, aug in enumerate(distinct)}
    return tuple(tuple((renamed[aug], p, mag) for aug, p, mag in sub_policy) for sub_policy in sub_policies)
