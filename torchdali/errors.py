"""The one error type of operator failures, raised while a pipeline is built or runs."""


class OperatorError(Exception):
    """An operator's failure, with where it happened as fields: `operator` (DALI's name),
    `instance` (the node's name), `sample` (index in the batch), `file` and `iteration`.
    Raised as a subclass that is also the built-in category (ValueError, TypeError ...),
    so `except ValueError` keeps working."""

    operator = instance = sample = file = iteration = None
    _kinds = {}

    @classmethod
    def of_kind(cls, kind):
        """The OperatorError class that is also a `kind` (a built-in exception class)."""
        if issubclass(kind, OperatorError):
            return kind
        if kind not in cls._kinds:
            cls._kinds[kind] = type(f"Operator{kind.__name__}", (cls, kind), {"__module__": __name__})
        return cls._kinds[kind]


def operator_error(operator, instance, message, kind=RuntimeError, *, sample=None, file=None, iteration=None):
    """An OperatorError (also a `kind`) reading "operator ('instance'): message"."""
    e = OperatorError.of_kind(kind)(f"{operator} ('{instance}'): {message}")
    e.operator, e.instance, e.sample, e.file, e.iteration = operator, instance, sample, file, iteration
    return e
