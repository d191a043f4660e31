"""The building blocks of automatic augmentations: the `@augmentation` decorator and its
`Augmentation` (exported as `_Augmentation`, as in DALI), `signed_bin`, `select` and `Policy`."""
from ._augmentation import Augmentation as _Augmentation, signed_bin
from .decorator import augmentation
from ._select import select
from .policy import Policy

__all__ = ("signed_bin", "augmentation", "select", "Policy", "_Augmentation")
