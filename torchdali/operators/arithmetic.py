"""Elementwise arithmetic on DataNodes: Python operators and `torchdali.math`.

Types follow DALI: Python ints are int32 and Python floats float32 constants,
two operands promote as C++ does (uint8 + int16 -> int16), `/` always gives a
float, `//` and `%` truncate toward zero as in C++ (and `//` of floats is plain
division), comparisons give bool; `~`, `<<` and `>>` take integers (`~` of bool is
logical not).

Also the per-sample indexing behind `DataNode[...]` (`_tensor_subscript`): ints, slices
and per-sample DataNode indices and bounds, and new axes."""
import numpy as np
import torch

from .. import schema
from ..schema import ANY, INT, STR, Arg, register
from ..tensor_list import TensorList
from .base import Operator

_BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "fdiv": torch.true_divide,
    "div": lambda a, b: torch.div(a, b, rounding_mode=None if a.is_floating_point() else "trunc"),
    "mod": torch.fmod, "pow": torch.pow, "fpow": torch.pow,
    "min": torch.minimum, "max": torch.maximum, "atan2": torch.atan2,
    "eq": torch.eq, "neq": torch.ne, "lt": torch.lt, "leq": torch.le, "gt": torch.gt, "geq": torch.ge,
    "bitand": torch.bitwise_and, "bitor": torch.bitwise_or, "bitxor": torch.bitwise_xor,
    "lshift": torch.bitwise_left_shift, "rshift": torch.bitwise_right_shift,
}
_UNARY = {
    "minus": torch.neg, "abs": torch.abs, "fabs": torch.abs, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "cbrt": lambda x: torch.sign(x) * torch.abs(x).pow(1.0 / 3.0), "exp": torch.exp, "log": torch.log,
    "log2": torch.log2, "log10": torch.log10, "floor": torch.floor, "ceil": torch.ceil,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "asin": torch.asin, "acos": torch.acos,
    "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh,
    "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh,
    "bitnot": lambda x: torch.logical_not(x) if x.dtype == torch.bool else torch.bitwise_not(x),
}
_COMPARE = {"eq", "neq", "lt", "leq", "gt", "geq"}
_BITWISE = {"bitand", "bitor", "bitxor"}
_INTEGRAL_ONLY = {"bitnot": "~", "lshift": "<<", "rshift": ">>"}
_NO_BOOL = {"minus": "-", "abs": "abs"}
# torch lacks most kernels for these: computed in int64 and cast back (uint64 bits kept as int64)
_WIDE_UNSIGNED = {torch.uint16: torch.int64, torch.uint32: torch.int64, torch.uint64: torch.int64}
_FLOAT_RESULT = {"fdiv", "fpow", "atan2", "sqrt", "rsqrt", "cbrt", "exp", "log", "log2", "log10",
                 "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
                 "atanh", "floor", "ceil"}
OPS = sorted(set(_BINARY) | set(_UNARY) | {"clamp"})


def constant_tensor(value):
    """A Python/NumPy scalar as a 0-d tensor of DALI's constant type (NumPy scalars keep theirs)."""
    if isinstance(value, np.generic):
        return torch.from_numpy(np.asarray(value))
    if isinstance(value, bool):
        return torch.tensor(bool(value))
    if isinstance(value, int):
        return torch.tensor(value, dtype=torch.int32)
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.float32)
    raise TypeError(f"arithmetic: {type(value).__name__} constants are not supported "
                    "(use Python scalars or DataNodes)")


def _promote(a, b):
    """torch's promotion, or NumPy's where torch has none (uint16/32/64 with other types)."""
    try:
        return torch.promote_types(a, b)
    except RuntimeError:
        names = [str(t).removeprefix("torch.") for t in (a, b)]
        return getattr(torch, np.promote_types(*names).name)


def result_type(op, dtypes):
    """The output dtype of `op` over operands of these dtypes."""
    t = dtypes[0]
    for d in dtypes[1:]:
        t = _promote(t, d)
    if op in _COMPARE:
        return torch.bool
    if op in _BITWISE and t.is_floating_point:
        raise TypeError(f"arithmetic: bitwise '{op}' needs integer or bool operands, got {t}")
    if op in _INTEGRAL_ONLY and t.is_floating_point:
        raise TypeError(f"arithmetic: inputs to bitwise operator `{_INTEGRAL_ONLY[op]}` must be of integral type, "
                        f"got {t}")
    if op in _NO_BOOL and t == torch.bool:
        raise TypeError(f"arithmetic: input to arithmetic operator `{_NO_BOOL[op]}` cannot be a boolean; "
                        "use the bitwise operator `~` or a numeric type")
    if op in ("lshift", "rshift") and t == torch.bool:
        return torch.int32
    if op in _FLOAT_RESULT and not t.is_floating_point:
        return torch.float32
    if op in ("add", "sub", "mul", "pow", "mod", "div") and t == torch.bool:
        return torch.int32
    return t


def _compare_type(dtypes):
    """The type comparisons compute in: the operands' common type (torch alone would cast a
    0-d operand, a per-sample scalar, to the other's type: 256 as uint8 is 0); int64 for
    uint16 and uint32, which torch has no comparison kernels for."""
    t = dtypes[0]
    for d in dtypes[1:]:
        t = _promote(t, d)
    return torch.int64 if t in (torch.uint16, torch.uint32) else t


def _unsigned_op(op, operands, dtype):
    """`op` over wide unsigned operands, in int64 (same bits for ~, <<, -; a logical >>)."""
    wide = [x.view(torch.int64) if x.dtype == torch.uint64 else x.to(torch.int64) for x in operands]
    if op == "rshift" and dtype == torch.uint64:
        x, s = wide
        high_cleared = torch.bitwise_and(torch.bitwise_right_shift(x, 1), torch.iinfo(torch.int64).max)
        out = torch.where(s > 0, torch.bitwise_right_shift(high_cleared, (s - 1).clamp(min=0)), x)
    elif op in _UNARY:
        out = _UNARY[op](wide[0]) if op != "abs" else wide[0]
    else:
        out = _BINARY[op](*wide)
    return out.view(torch.uint64) if dtype == torch.uint64 else out.to(dtype)


@register("_arithmetic", devices=("cpu", "gpu"), inputs=(1, 3), internal=True,
          args=[Arg("op", STR, schema.REQUIRED, "The operation.", choices=OPS),
                Arg("scalars", ANY, (), "(position, value) pairs of constant operands.")])
class Arithmetic(Operator):
    """One elementwise operation over 1 to 3 operands, per sample with broadcasting."""

    def __init__(self, spec):
        super().__init__(spec)
        self.op = spec.args["op"]
        self.scalars = {pos: constant_tensor(v) for pos, v in spec.args["scalars"]}
        self.arity = len(spec.input_devices) + len(self.scalars)

    def _operands(self, inputs):
        it = iter(inputs)
        return [self.scalars[p] if p in self.scalars else next(it) for p in range(self.arity)]

    def _apply(self, operands):
        try:
            dtype = result_type(self.op, [x.dtype for x in operands])
        except TypeError as e:
            raise self.error(str(e).removeprefix("arithmetic: "), TypeError) from None
        compute = dtype if self.op not in _COMPARE else _compare_type([x.dtype for x in operands])
        operands = [x.to(compute) for x in operands]
        if self.op == "clamp":
            x, lo, hi = operands
            return torch.minimum(torch.maximum(x, lo.to(x.dtype)), hi.to(x.dtype))
        if dtype in _WIDE_UNSIGNED and self.op not in _COMPARE and self.op != "clamp":
            return _unsigned_op(self.op, operands, dtype)
        if self.op in _UNARY:
            return _UNARY[self.op](operands[0])
        return _BINARY[self.op](operands[0], operands[1])

    def run(self, inputs, args, ctx):
        device = ctx.cuda_device if self.spec.device == "gpu" else torch.device("cpu")
        if device is not None:
            self.scalars = {p: v.to(device) for p, v in self.scalars.items()}
        layout = next((b.layout() for b in inputs if b.layout()), "")
        if _one_sample_shape(inputs):
            # All samples share one shape: one operation over the whole batch.
            dense = [b.as_torch() for b in inputs]
            return [TensorList.make(self._apply(self._operands(dense)), layout, device=self.spec.device)]
        columns = [b.as_torch_list() for b in inputs]
        out = []
        for i in range(ctx.batch_size):
            operands = self._operands([c[i] for c in columns])
            try:
                out.append(self._apply(operands))
            except RuntimeError as e:
                shapes = [tuple(x.shape) for x in operands]
                raise self.error(f"sample {i}: operand shapes {shapes} don't broadcast ({e})", ValueError) from None
        return [TensorList.make(out, layout, device=self.spec.device)]


def _one_sample_shape(batches):
    """True when all samples of all `batches` have one shape (shapes as arrays: no loop over
    a dense batch's samples)."""
    first = None
    for b in batches:
        try:
            shapes = b.sample_shapes()
        except ValueError:  # samples of different ndim
            return False
        if not len(shapes) or not (shapes == shapes[0]).all():
            return False
        if first is None:
            first = shapes[0]
        elif len(first) != len(shapes[0]) or (first != shapes[0]).any():
            return False
    return first is not None


MAX_SUBSCRIPTS = 32
_SUBSCRIPT_ARGS = [Arg(f"{kind}_{i}", INT, None, f"Per-sample {what} of subscript {i}.", per_sample=True)
                   for i in range(MAX_SUBSCRIPTS)
                   for kind, what in (("at", "index"), ("lo", "slice start"), ("hi", "slice stop"), ("step", "step"))]


@register("_tensor_subscript", devices=("cpu", "gpu"), inputs=(1, 1), internal=True,
          args=[Arg("spec", ANY, schema.REQUIRED, "Subscripts: ('index', at), ('slice', lo, hi, step), "
                    "('newaxis',) or ('ellipsis',); each value an int, None, or the name of the argument "
                    "input giving it per sample."),
                Arg("new_axis_names", ANY, None, "Layout names of the new axes, or None.")] + _SUBSCRIPT_ARGS)
class TensorSubscript(Operator):
    """Python indexing of every sample as DALI's: an index drops its dimension (negative
    counts from the end, out of range is an error), a slice keeps it (bounds clamped, any
    non-zero step), a new axis is inserted where it stands; `...` stands for the full slices
    of the dimensions the other subscripts leave out. The values may differ per sample."""

    def __init__(self, spec):
        super().__init__(spec)
        self.items = spec.args["spec"]
        self.per_sample = any(isinstance(v, str) for item in self.items for v in item[1:])

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        dense = batch.dense_tensor()
        if dense is not None and not self.per_sample and len(batch):
            items = self._expanded(dense.dim() - 1, 0)
            out = TensorList.make(self._index(dense, items, args, 0, 1), self._layout(batch.layout(), items),
                                  device=batch.device)
            return [out]
        samples = batch.as_torch_list()  # of one number of dims
        items = self._expanded(samples[0].dim() if samples else len(batch.layout()), 0)
        out = [self._index(s, items, args, i, 0) for i, s in enumerate(samples)]
        return [TensorList.make(out, self._layout(batch.layout(), items), device=batch.device)]

    def _expanded(self, ndim, i):
        """The subscripts for samples of `ndim` dims: `...` replaced by its full slices."""
        used = sum(item[0] in ("index", "slice") for item in self.items)
        if used > ndim:
            raise self.error(f"too many indices ({used}) for a {ndim}D tensor (sample {i})", IndexError, sample=i)
        full = [("slice", None, None, None)] * (ndim - used)
        out = []
        for item in self.items:
            out += full if item[0] == "ellipsis" else [item]
        return out

    def _value(self, v, args, i):
        return int(args.batch(v)[i]) if isinstance(v, str) else v

    def _index(self, t, items, args, i, lead):
        """Sample i's subscripts applied to `t` (samples from dimension `lead` on)."""
        d, axis = lead, 0
        for item in items:
            if item[0] == "newaxis":
                t = t.unsqueeze(d)
                d += 1
                continue
            size = t.shape[d]
            if item[0] == "index":
                at = self._value(item[1], args, i)
                if not -size <= at < size:
                    raise self.error(f"index {at} is out of range for axis {axis} of length {size} (sample {i})",
                                     IndexError, sample=i)
                t = t.select(d, at)
                axis += 1
                continue
            lo, hi, step = (self._value(v, args, i) for v in item[1:])
            if step == 0:
                raise self.error(f"step cannot be zero (axis {axis}, sample {i})", ValueError, sample=i)
            start, stop, step = slice(lo, hi, step).indices(size)
            if step > 0:
                t = t.narrow(d, start, max(stop - start, 0))[(slice(None),) * d + (slice(None, None, step),)]
            else:
                t = t.index_select(d, torch.arange(start, stop, step, device=t.device))
            d += 1
            axis += 1
        return t

    def _layout(self, layout, items):
        """The output's layout: the input's names of the kept axes, with the new axes' names (no
        layout where the new axes have none)."""
        if not layout:
            return ""
        names = iter(self.spec.args["new_axis_names"] or "")
        if self.spec.args["new_axis_names"] is None and ("newaxis",) in items:
            return ""
        out, axis = [], 0
        for item in items:
            if item[0] == "newaxis":
                out.append(next(names))
                continue
            if item[0] == "slice":
                out.append(layout[axis])
            axis += 1
        return "".join(out) + layout[axis:]
        if names is None:
            return ""
        for axis, name in zip(self.spec.args["new_axes"], names):
            kept.insert(axis, name)
        return "".join(kept)
