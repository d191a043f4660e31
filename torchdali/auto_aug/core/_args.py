"""Which keyword arguments an augmentation takes: its signature decides, past the two
positional ones (the samples and the parameter), as in DALI."""
import inspect

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_POSITIONAL = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY)


class MissingArgException(TypeError):
    """An augmentation was called without a named argument it requires (e.g. `shape`)."""

    def __init__(self, message, augmentation, missing_args):
        super().__init__(message)
        self.augmentation = augmentation
        self.missing_args = missing_args


class UnusedArgException(TypeError):
    """Extra keyword arguments that no augmentation of a suite or policy takes."""

    def __init__(self, message, unused_args):
        super().__init__(message)
        self.unused_args = unused_args


def _named_params(fun, skip_positional):
    """The parameters of `fun` that may be passed by name, less its first `skip_positional`
    positional ones."""
    params = inspect.signature(fun).parameters.values()
    return [p for i, p in enumerate(params) if (i >= skip_positional or p.kind not in _POSITIONAL)
            and p.kind in _NAMED]


def accepted_kwargs(fun, kwargs, skip_positional=0):
    """The items of `kwargs` that `fun` takes by name."""
    names = {p.name for p in _named_params(fun, skip_positional)}
    return {name: value for name, value in kwargs.items() if name in names}


def missing_kwargs(fun, kwargs, skip_positional=0):
    """The names `fun` requires (no default) that `kwargs` lacks."""
    return [p.name for p in _named_params(fun, skip_positional)
            if p.default is inspect.Parameter.empty and p.name not in kwargs]


def num_positional_args(fun):
    return sum(p.kind in _POSITIONAL for p in inspect.signature(fun).parameters.values())


def forbid_unused_kwargs(augmentations, kwargs, call_name):
    """Refuse keyword arguments that none of the `augmentations` takes."""
    used = {name for aug in augmentations for name in accepted_kwargs(aug.op, kwargs, 2)}
    unused = [name for name in kwargs if name not in used]
    if unused:
        subject, verb = ("kwarg", "is") if len(unused) == 1 else ("kwargs", "are")
        raise UnusedArgException(f"The {call_name} got unexpected {subject}. The {subject} "
                                 f"`{', '.join(unused)}` {verb} not used by any of the augmentations.",
                                 unused_args=unused)
