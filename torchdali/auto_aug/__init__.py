"""Automatic augmentations, as DALI's `nvidia.dali.auto_aug`: AutoAugment
(`auto_augment`), RandAugment (`rand_augment`) and TrivialAugment (`trivial_augment`)
over the standard suite of `augmentations`, and the `core` to write new ones. They pick
an augmentation per sample with per-sample `if`s, so the pipeline needs
`@pipeline_def(enable_conditionals=True)`; see docs/auto_aug.md."""
from . import augmentations, auto_augment, core, rand_augment, trivial_augment

__all__ = ["augmentations", "auto_augment", "core", "rand_augment", "trivial_augment"]
