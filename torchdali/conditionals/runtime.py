"""What rewritten code calls (as `__tdc_`). A condition that is a DataNode makes a
per-sample conditional: both branches are traced, each on its samples, and the values
they assign are merged. Any other condition behaves exactly as in plain Python."""
import numpy as np

from .. import _current
from ..graph import DataNode, call_operator
from .transform import call  # noqa: F401  (used by rewritten code as __tdc_.call)

_CONSTANT_TYPES = (bool, int, float, np.generic, np.ndarray)


class Undefined:
    """The value of a variable that a code path did not assign."""

    def __init__(self, name):
        self.name = name


def _stack(cond):
    """The condition stack when `cond` is a DataNode in a conditional pipeline, else None."""
    if not isinstance(cond, DataNode):
        return None
    pipe = _current.pipeline()
    stack = pipe.definition.conditions if pipe is not None else None
    if stack is None:
        bool(cond)  # raises the error explaining enable_conditionals
    return stack


def _read(getter, name):
    try:
        return getter()
    except NameError:  # UnboundLocalError too
        return Undefined(name)


class _Conditional:
    """One per-sample conditional being traced: the open `if` and each branch's values."""

    def __init__(self, stack, cond, text):
        self.stack = stack
        self.text = text
        self.entry = stack.push(cond, text)

    def enter(self, branch):
        self.entry.branch = branch

    def merge(self, name, true, false):
        """The merged value of a variable (nested tuples, lists and dicts are merged leaf by leaf)."""
        what = f"variable '{name}'" if name != "__tdc_ret" else "the return value"
        if name == "__tdc_ret" and (true is None) != (false is None):
            missing = "if" if true is None else "else"
            raise ValueError(f"per-sample `if {self.text}`: the `{missing}` branch must return a value too")
        if isinstance(true, Undefined) or isinstance(false, Undefined):
            missing = "else" if isinstance(false, Undefined) else "if"
            raise ValueError(f"per-sample `if {self.text}`: variable '{name}' is assigned in one branch only "
                             f"(not in the `{missing}` branch) but used after the `if`; assign it in every branch")
        if true is false and not isinstance(true, DataNode):
            return true
        if isinstance(true, (tuple, list)) and isinstance(false, (tuple, list)) and \
                type(true) is type(false) and len(true) == len(false):
            return type(true)(self.merge(f"{name}[{i}]", t, f) for i, (t, f) in enumerate(zip(true, false)))
        if isinstance(true, dict) and isinstance(false, dict) and true.keys() == false.keys():
            return {k: self.merge(f"{name}[{k!r}]", true[k], false[k]) for k in true}
        t, f = self._leaf(what, true, True), self._leaf(what, false, False)
        if t.device != f.device:
            raise TypeError(f"per-sample `if {self.text}`: {what} is {t.device.upper()} data in the `if` "
                            f"branch but {f.device.upper()} data in the `else` branch; move both to the "
                            "GPU with .gpu()")
        return self.stack.merge(self.entry, t, f, what)

    def _leaf(self, what, value, branch):
        """A branch's value as a DataNode of that branch (constants become batches)."""
        if not isinstance(value, DataNode):
            if not isinstance(value, _CONSTANT_TYPES):
                raise TypeError(f"per-sample `if {self.text}`: {what} is {type(value).__name__} "
                                f"{value!r} in one branch; merged values must be DataNodes or numeric "
                                "constants (the same object in both branches is kept as it is)")
        self.enter(branch)
        try:
            if not isinstance(value, DataNode):
                value = call_operator("_constant", [], {"value": value, "device": "cpu"})
            return self.stack.route(value)
        finally:
            self.entry.branch = None

    def close(self):
        self.stack.pop(self.entry)


class if_stmt:
    """`with if_stmt(cond, text, names, getters, live, yields) as c:` around a rewritten `if`.

    names/getters: the variables the branches assign and functions reading them;
    live: those read after the `if`, which are merged; yields: a branch has a `yield`."""

    def __init__(self, cond, text, names, getters, live, yields):
        self.stack = _stack(cond)
        self.per_sample = self.stack is not None
        if self.per_sample and yields:
            raise ValueError(f"per-sample `if {text}`: `yield` inside a branch is not supported (both "
                             "branches are traced, so both would yield)")
        if self.per_sample:
            self.cond = _Conditional(self.stack, cond, text)
            self.names, self.getters, self.live = names, getters, live
            self.values = {}
        else:
            self.value = bool(cond)
        self.finished = False

    def __enter__(self):
        return self

    def _snapshot(self):
        return [_read(g, n) for g, n in zip(self.getters, self.names)]

    def true_branch(self):
        if not self.per_sample:
            return self.value
        self.initial = self._snapshot()
        self.cond.enter(True)
        return True

    def false_branch(self):
        if not self.per_sample:
            return not self.value
        self.cond.enter(False)
        return True

    def end_branch(self):
        if self.per_sample:
            self.values[self.cond.entry.branch] = self._snapshot()
            self.cond.entry.branch = None

    def defined(self, i):
        """Whether variable i had a value before the `if` (to restore it for the `else` branch)."""
        return not isinstance(self.initial[i], Undefined)

    def finish(self):
        """Merge the live variables (per-sample only): True when `merged` is to be assigned."""
        if not self.per_sample:
            return False
        self.finished = True
        index = {n: i for i, n in enumerate(self.names)}
        try:
            self.merged = tuple(self.cond.merge(n, self.values[True][index[n]], self.values[False][index[n]])
                                for n in self.live)
        finally:
            self.cond.close()
        return True

    def __exit__(self, exc_type, exc, tb):
        if not self.per_sample or self.finished:
            return False
        self.cond.close()
        if exc_type is None:
            raise ValueError(f"per-sample `if {self.cond.text}`: a branch left the `if` early (return, "
                              "break or continue); only a `return` at the end of both branches is supported "
                              "for conditions that are DataNodes")
        return False


def if_exp(cond, true_fn, false_fn, text):
    """`a if cond else b`."""
    stack = _stack(cond)
    if stack is None:
        return true_fn() if cond else false_fn()
    c = _Conditional(stack, cond, text)
    try:
        c.enter(True)
        true = true_fn()
        c.enter(False)
        false = false_fn()
        c.entry.branch = None
        return c.merge("value", true, false)
    finally:
        c.close()


def not_(value):
    """`not value`: per sample for a DataNode (a scalar of any type; non-zero is true)."""
    if not isinstance(value, DataNode):
        return not value
    if value.device != "cpu":
        raise TypeError(f"`not` of {value.name}: logical expressions need CPU data (a GPU DataNode has "
                        "no per-sample truth value here)")
    return call_operator("_conditional.not_", [value], {})


def _logical(value, expression, side, text):
    """A logical operand checked to be a CPU boolean scalar per sample."""
    if not isinstance(value, DataNode):
        value = call_operator("_constant", [], {"value": value, "device": "cpu"})
    if value.device != "cpu":
        raise TypeError(f"`{text}`: the {side} operand of `{expression}` is GPU data; logical "
                        "expressions need CPU boolean scalars")
    return call_operator("_conditional.validate_logical", [value],
                         {"expression": expression, "side": side, "text": text})


def _lazy(expression, a, b_fn, text):
    """`a and b` / `a or b` with a DataNode `a`: b is evaluated only for the samples
    that need it (where a is true for `and`, false for `or`)."""
    stack = _stack(a)
    a = _logical(a, expression, "left", text)
    c = _Conditional(stack, a, text)
    try:
        c.enter(expression == "and")
        b = _logical(b_fn(), expression, "right", text)
        c.entry.branch = None
        kept = a  # the other branch's value is the left operand itself
        return c.merge("value", b, kept) if expression == "and" else c.merge("value", kept, b)
    finally:
        c.close()


def and_(a, b_fn, text):
    if not isinstance(a, DataNode):
        return a and b_fn()
    return _lazy("and", a, b_fn, text)


def or_(a, b_fn, text):
    if not isinstance(a, DataNode):
        return a or b_fn()
    return _lazy("or", a, b_fn, text)
