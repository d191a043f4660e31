"""The one registry of operators.

Each operator declares its name, devices, inputs, outputs and arguments once, here,
through `@register`. `fn`, `ops`, argument checking, error messages and the generated
docs are all derived from these declarations.
"""
import dataclasses
import difflib
import warnings
import inspect
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from . import types

REQUIRED = object()
"""Default of an argument the user must give."""


class ArgType:
    """Converts and checks one kind of argument value; the name appears in docs."""

    def __init__(self, name, convert):
        self.name = name
        self.convert = convert

    def __repr__(self):
        return self.name


def _bool(v):
    if isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, np.integer)) and v in (0, 1)):
        return bool(v)
    raise TypeError("expected a bool")


def _int(v):
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return int(v)
    raise TypeError("expected an int")


def _float(v):
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
        f = float(v)
        return f
    raise TypeError("expected a number")


def _str(v):
    if isinstance(v, str):
        return v
    raise TypeError("expected a string")


def _list_of(elem, name):
    def convert(v):
        if isinstance(v, np.ndarray):
            v = v.tolist()
        if not isinstance(v, (list, tuple)):
            v = [v]
        return [elem(x) for x in v]
    return ArgType(name, convert)


def _enum(enum_cls):
    def convert(v):
        try:
            return enum_cls(int(v)) if not isinstance(v, enum_cls) else v
        except (ValueError, TypeError):
            raise TypeError(f"expected a {enum_cls.__name__}") from None
    return convert


def _dtype(v):
    try:
        return types.to_dali_type(v)
    except (TypeError, ValueError):
        raise TypeError("expected a DALIDataType (e.g. types.FLOAT)") from None


def _any(v):
    return v


def _callable(v):
    if not callable(v):
        raise TypeError("expected a callable")
    return v


BOOL = ArgType("bool", _bool)
INT = ArgType("int", _int)
FLOAT = ArgType("float", _float)
STR = ArgType("str", _str)
INTS = _list_of(_int, "list of int")
FLOATS = _list_of(_float, "list of float")
STRS = _list_of(_str, "list of str")
DTYPE = ArgType("DALIDataType", _dtype)
IMAGE_TYPE = ArgType("DALIImageType", _enum(types.DALIImageType))
INTERP_TYPE = ArgType("DALIInterpType", _enum(types.DALIInterpType))
LAYOUT = ArgType("layout str", lambda v: types.TensorLayout(_str(v)))
CALLABLE = ArgType("callable", _callable)
ANY = ArgType("any", _any)


@dataclasses.dataclass(frozen=True)
class Arg:
    """One keyword argument of an operator."""

    name: str
    type: ArgType
    default: Any = None
    doc: str = ""
    per_sample: bool = False  # may be an argument input (a CPU DataNode), read per sample
    per_frame: bool = False  # that input may hold a row per frame of a sequence (fn.per_frame)
    choices: Optional[Sequence[Any]] = None
    check: Optional[Callable[[Any], Optional[str]]] = None  # returns an error text or None

    @property
    def required(self):
        return self.default is REQUIRED


# Accepted by every operator (DALI's common arguments).
COMMON_ARGS = (
    Arg("device", STR, None, "'cpu', 'gpu' or 'mixed'; chosen from the inputs if not given."),
    Arg("name", STR, None, "Name of the operator instance (for readers: for epoch_size/reader_meta)."),
    Arg("seed", INT, -1, "Random seed; derived from the pipeline's seed when -1."),
    Arg("preserve", BOOL, False, "Keep the operator even if its outputs are unused."),
    Arg("bytes_per_sample_hint", INTS, [0], "Output memory hint; accepted for compatibility."),
)


@dataclasses.dataclass
class OpSchema:
    """Everything torchdali knows about one operator."""

    name: str  # DALI's fn path, e.g. "readers.file"
    impl: type
    devices: Tuple[str, ...]
    args: Dict[str, Arg]
    min_inputs: int = 0
    max_inputs: int = 0
    num_outputs: Any = 1  # int, or a function of the argument dict and the number of inputs
    doc: str = ""
    class_names: Tuple[str, ...] = ()  # ops.* names: the generated one and legacy aliases
    side_effects: bool = False
    input_names: Tuple[str, ...] = ()
    internal: bool = False  # not exposed in fn/ops (graph plumbing)
    # old name -> new name, or None for an argument that is ignored now
    deprecated_args: Dict[str, Optional[str]] = dataclasses.field(default_factory=dict)
    # Further fn paths of the operator (DALI's deprecated names, e.g. "coin_flip" for
    # "random.coin_flip"): a call through one warns that it is deprecated.
    deprecated_names: Tuple[str, ...] = ()
    # What the deprecation warning says to use instead, under torchdali (the operator's fn path
    # when None; e.g. "pipeline.DataNode.shape" for fn.shapes, whose operator is internal). Set
    # on a public operator, the operator itself is deprecated: its own fn name warns too.
    deprecated_use: Optional[str] = None
    other_names: Tuple[str, ...] = ()  # further fn paths DALI gives the same operator (no warning)
    positional_args: Tuple[str, ...] = ()  # arguments that may be given positionally after the inputs
    # Names of the outputs from the call's keyword arguments: fn and ops then return a dict of
    # the outputs by name (readers.tfrecord, as in DALI).
    output_names: Optional[Callable[[Dict[str, Any]], Sequence[str]]] = None

    @property
    def replacement(self):
        """What to use instead of a deprecated name of this operator, as a torchdali path."""
        return f"torchdali.{self.deprecated_use}" if self.deprecated_use else f"torchdali.fn.{self.name}"

    @property
    def fn_name(self):
        return self.name.split(".")[-1]

    @property
    def module_path(self):
        return self.name.split(".")[:-1]

    def outputs_for(self, args, num_inputs):
        n = self.num_outputs
        return n(args, num_inputs) if callable(n) else n

    def error(self, msg, cls=ValueError):
        return cls(f"{self.name}: {msg}")

    def check_args(self, kwargs, arg_inputs=(), partial=False):
        """Convert and validate constant keyword arguments; returns the full argument
        dict with defaults. `arg_inputs` names arguments given as DataNodes. `partial`:
        some arguments may still come (an ops.* object's call), so a missing required one
        is not an error yet."""
        out = {}
        for key in kwargs:
            if key in self.deprecated_args:
                continue
            if key not in self.args:
                close = difflib.get_close_matches(key, list(self.args), n=3)
                hint = f" (did you mean {', '.join(close[:3])}?)" if close else ""
                raise TypeError(f"{self.name}: unknown argument '{key}'{hint}")
        for old, new in self.deprecated_args.items():
            if old not in kwargs:
                continue
            kwargs = dict(kwargs)
            value = kwargs.pop(old)
            if new is None:
                warnings.warn(f"{self.name}: the argument '{old}' is no longer used and is ignored",
                              DeprecationWarning, stacklevel=4)
                continue
            if new in kwargs:
                raise TypeError(f"{self.name}: '{old}' is a deprecated alias of '{new}'; give only one")
            warnings.warn(f"{self.name}: the argument '{old}' is a deprecated alias of '{new}'",
                          DeprecationWarning, stacklevel=4)
            kwargs[new] = value
        for name, arg in self.args.items():
            if name in arg_inputs:
                if not arg.per_sample:
                    raise TypeError(f"{self.name}: argument '{name}' cannot be an argument input "
                                    "(a DataNode); give a constant")
                out[name] = None
                continue
            if name not in kwargs or kwargs[name] is None and arg.default is not REQUIRED:
                if arg.required and name not in kwargs and not partial:
                    raise TypeError(f"{self.name}: argument '{name}' is required")
                out[name] = arg.default
                continue
            value = kwargs[name]
            try:
                value = arg.type.convert(value)
            except (TypeError, ValueError) as e:
                raise TypeError(f"{self.name}: argument '{name}' = {value!r}: {e}") from None
            if arg.choices is not None and value not in arg.choices:
                raise ValueError(f"{self.name}: argument '{name}' = {value!r} is not one of "
                                 f"{list(arg.choices)}")
            if arg.check is not None:
                problem = arg.check(value)
                if problem:
                    raise ValueError(f"{self.name}: argument '{name}' = {value!r}: {problem}")
            out[name] = value
        return out

    def docstring(self):
        lines = [self.doc.strip(), "", f"Devices: {', '.join(self.devices)}."]
        if self.max_inputs:
            lines.append(f"Inputs: {self.min_inputs} to {self.max_inputs}.")
        lines += ["", "Keyword arguments:"]
        for arg in self.args.values():
            default = "required" if arg.required else f"default = {arg.default!r}"
            ps = ", per-sample (argument input allowed)" if arg.per_sample else ""
            lines.append(f"  {arg.name} ({arg.type}, {default}{ps}): {arg.doc}")
        return "\n".join(lines)


_REGISTRY: Dict[str, OpSchema] = {}


def register(name, *, devices=("cpu",), args=(), inputs=(0, 0), outputs=1, aliases=(),
             side_effects=False, input_names=(), internal=False, deprecated_args=None,
             common_args=True, positional_args=(), deprecated_names=(), other_names=(), deprecated_use=None,
             output_names=None):
    """Class decorator declaring an operator implementation under DALI's `name`."""
    def wrap(impl):
        all_args = {a.name: a for a in (COMMON_ARGS if common_args else ()) + tuple(args)}
        parts = name.split(".")
        generated = "".join(p[:1].upper() + p[1:] for p in parts[-1].split("_"))
        class_names = (".".join(parts[:-1] + [generated]),) + tuple(aliases)
        schema = OpSchema(
            name=name, impl=impl, devices=tuple(devices), args=all_args,
            min_inputs=inputs[0], max_inputs=inputs[1], num_outputs=outputs,
            doc=inspect.getdoc(impl) or "", class_names=class_names,
            side_effects=side_effects, input_names=tuple(input_names), internal=internal,
            deprecated_args=dict(deprecated_args or {}), positional_args=tuple(positional_args),
            deprecated_names=tuple(deprecated_names), other_names=tuple(other_names),
            deprecated_use=deprecated_use, output_names=output_names)
        if name in _REGISTRY:
            raise RuntimeError(f"operator {name} registered twice")
        _REGISTRY[name] = schema
        impl.schema = schema
        return impl
    return wrap


def get(name) -> OpSchema:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"no operator named '{name}'") from None


def all_schemas():
    return dict(_REGISTRY)
