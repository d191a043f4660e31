"""Serializing parallel `external_source` callbacks for workers started with 'spawn'
(DALI's `nvidia.dali.pickling`).

Plain pickle stores a function as a reference (module and name), which a fresh worker
process cannot resolve for lambdas, local functions or functions of `__main__` run as a
notebook. This module's `dumps` stores those by value (code, needed globals, closure,
defaults), and so does it for functions or modules marked with `pickle_by_value`.
`loads` is pickle's."""
import builtins
import importlib
import inspect
import io
import marshal
import pickle
import types

_BY_VALUE_MODULES = set()
_EMPTY = object()

loads = pickle.loads


def pickle_by_value(obj):
    """Mark a function (as a decorator) or a whole module (as a registry) to be pickled by
    value rather than by reference when sent to 'spawn' workers."""
    if isinstance(obj, types.ModuleType):
        _BY_VALUE_MODULES.add(obj.__name__)
        return obj
    if inspect.isfunction(obj):
        obj._torchdali_pickle_by_value = True
        return obj
    raise TypeError(f"pickle_by_value: only functions and modules can be pickled by value, "
                    f"got {type(obj).__name__}")


def _by_value(fn):
    return (fn.__module__ == "__main__" or fn.__module__ in _BY_VALUE_MODULES
            or "<locals>" in fn.__qualname__ or fn.__name__ == "<lambda>"
            or getattr(fn, "_torchdali_pickle_by_value", False))


def _global_names(code):
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _make_function(code_bytes, name, num_cells):
    code = marshal.loads(code_bytes)
    cells = tuple(types.CellType() for _ in range(num_cells)) or None
    return types.FunctionType(code, {"__builtins__": builtins}, name, None, cells)


def _set_function_state(fn, state):
    # Filled in after the function exists, so that recursion and self-references resolve.
    globs, defaults, kwdefaults, cells, qualname, module, attrs = state
    fn.__globals__.update(globs)
    fn.__defaults__, fn.__kwdefaults__ = defaults, kwdefaults
    fn.__qualname__, fn.__module__ = qualname, module
    fn.__dict__.update(attrs)
    for cell, value in zip(fn.__closure__ or (), cells):
        if value is not _EMPTY:
            cell.cell_contents = value


def _empty_marker():
    return _EMPTY


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj):
        if obj is _EMPTY:
            return _empty_marker, ()
        if isinstance(obj, types.ModuleType):
            return importlib.import_module, (obj.__name__,)
        if isinstance(obj, types.FunctionType) and _by_value(obj):
            code = obj.__code__
            globs = {n: obj.__globals__[n] for n in _global_names(code) if n in obj.__globals__}
            cells = tuple(_cell_value(c) for c in obj.__closure__ or ())
            state = (globs, obj.__defaults__, obj.__kwdefaults__, cells, obj.__qualname__,
                     obj.__module__, dict(obj.__dict__))
            return (_make_function, (marshal.dumps(code), obj.__name__, len(cells)), state, None, None,
                    _set_function_state)
        return NotImplemented


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:
        return _EMPTY


def dumps(obj, protocol=None, **kwargs):
    """Pickle `obj`, storing lambdas, local functions, `__main__` functions and those marked
    with `pickle_by_value` by value."""
    f = io.BytesIO()
    _Pickler(f, protocol, **kwargs).dump(obj)
    return f.getvalue()


def callback_pickler(spec):
    """`py_callback_pickler` as (module-like, dumps_kwargs, loads_kwargs); None: this module."""
    if spec is None:
        return (importlib.import_module(__name__), {}, {})
    if hasattr(spec, "dumps") and hasattr(spec, "loads"):
        return (spec, {}, {})
    if isinstance(spec, (tuple, list)) and 1 <= len(spec) <= 3 and hasattr(spec[0], "dumps") \
            and hasattr(spec[0], "loads"):
        padded = list(spec) + [None] * (3 - len(spec))
        return (padded[0], dict(padded[1] or {}), dict(padded[2] or {}))
    raise ValueError(f"Pipeline: py_callback_pickler must be a module (or object) with dumps/loads, or a "
                     f"tuple (module, dumps_kwargs, loads_kwargs); got {spec!r}")
