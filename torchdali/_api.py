"""Builds the `fn` functions and the `ops` classes from the operator registry, so
each operator is declared once and appears under both APIs."""
import types as _pytypes
import warnings

from . import schema as _schema
from .graph import call_operator


def _call(op_schema, inputs, kwargs):
    """The operator's outputs: a DataNode, a list of them, or a dict by name where the
    operator names its outputs."""
    outs = call_operator(op_schema.name, inputs, kwargs)
    if op_schema.output_names is None:
        return outs
    return dict(zip(op_schema.output_names(kwargs), outs if isinstance(outs, (list, tuple)) else [outs]))


def make_fn(op_schema):
    def op(*inputs, **kwargs):
        return _call(op_schema, inputs, kwargs)
    op.__name__ = op.__qualname__ = op_schema.fn_name
    op.__doc__ = op_schema.docstring()
    return op


def make_deprecated_fn(op_schema, path):
    """fn.<path>: the operator under a name DALI keeps for compatibility (or the name of an
    operator DALI deprecates), with DALI's warning."""
    def op(*inputs, **kwargs):
        warnings.warn(f"WARNING: `torchdali.fn.{path}` is now deprecated. Use `{op_schema.replacement}` instead.",
                      DeprecationWarning, stacklevel=2)
        return _call(op_schema, inputs, kwargs)
    op.__name__ = op.__qualname__ = path.rsplit(".", 1)[-1]
    op.__doc__ = f"Deprecated: use `{op_schema.replacement}`.\n\n" + op_schema.docstring()
    return op


def make_ops_class(op_schema, class_name):
    """A DALI-style operator class: arguments at construction, inputs at call."""
    def __init__(self, *args, **kwargs):
        if len(args) > len(op_schema.positional_args):
            raise TypeError(f"ops.{class_name}: takes inputs when called, not when constructed")
        for name, value in zip(op_schema.positional_args, args):
            kwargs[name] = value
        constants = {k: v for k, v in kwargs.items() if not hasattr(v, "source")}
        # Required arguments may come at call time (as constants or argument inputs).
        op_schema.check_args(constants, arg_inputs=[k for k in kwargs if k not in constants], partial=True)
        self._kwargs = kwargs

    def __call__(self, *inputs, **kwargs):
        return _call(op_schema, inputs, {**self._kwargs, **kwargs})

    cls = type(class_name, (), {"__init__": __init__, "__call__": __call__,
                                "__doc__": op_schema.docstring(), "schema": op_schema})
    cls.__qualname__ = class_name
    return cls


def _submodule(root, path):
    mod = root
    for part in path:
        child = getattr(mod, part, None)
        if child is None:
            child = _pytypes.ModuleType(f"{mod.__name__}.{part}")
            setattr(mod, part, child)
        mod = child
    return mod


def populate(fn_module, ops_module):
    """Fill `fn_module` and `ops_module` with every public registered operator."""
    for op_schema in _schema.all_schemas().values():
        for path in op_schema.deprecated_names:
            *modules, name = path.split(".")
            setattr(_submodule(fn_module, modules), name, make_deprecated_fn(op_schema, path))
        if op_schema.internal:
            continue
        target = _submodule(fn_module, op_schema.module_path)
        deprecated = op_schema.deprecated_use is not None  # the operator itself, as in DALI
        setattr(target, op_schema.fn_name,
                make_deprecated_fn(op_schema, op_schema.name) if deprecated else make_fn(op_schema))
        for path in op_schema.other_names:
            *modules, name = path.split(".")
            setattr(_submodule(fn_module, modules), name, make_fn(op_schema))
        for class_path in op_schema.class_names:
            *path, cls_name = class_path.split(".")
            setattr(_submodule(ops_module, path), cls_name,
                    make_ops_class(op_schema, cls_name))
