"""Elementwise arithmetic on DataNodes: Python operators and `torchdali.math`.

Types follow DALI: Python ints are int32 and Python floats float32 constants,
two operands promote as C++ does (uint8 + int16 -> int16), `/` always gives a
float, `//` and `%` truncate toward zero as in C++ (and `//` of floats is plain
division), comparisons give bool."""
import numpy as np
import torch

from .. import schema
from ..schema import ANY, STR, Arg, register
from ..tensor_list import TensorList
from .base import Operator

_BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "fdiv": torch.true_divide,
    "div": lambda a, b: torch.div(a, b, rounding_mode=None if a.is_floating_point() else "trunc"),
    "mod": torch.fmod, "pow": torch.pow, "fpow": torch.pow,
    "min": torch.minimum, "max": torch.maximum, "atan2": torch.atan2,
    "eq": torch.eq, "neq": torch.ne, "lt": torch.lt, "leq": torch.le, "gt": torch.gt, "geq": torch.ge,
    "bitand": torch.bitwise_and, "bitor": torch.bitwise_or, "bitxor": torch.bitwise_xor,
}
_UNARY = {
    "minus": torch.neg, "abs": torch.abs, "fabs": torch.abs, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "cbrt": lambda x: torch.sign(x) * torch.abs(x).pow(1.0 / 3.0), "exp": torch.exp, "log": torch.log,
    "log2": torch.log2, "log10": torch.log10, "floor": torch.floor, "ceil": torch.ceil,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "asin": torch.asin, "acos": torch.acos,
    "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh,
    "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh,
}
_COMPARE = {"eq", "neq", "lt", "leq", "gt", "geq"}
_BITWISE = {"bitand", "bitor", "bitxor"}
_FLOAT_RESULT = {"fdiv", "fpow", "atan2", "sqrt", "rsqrt", "cbrt", "exp", "log", "log2", "log10",
                 "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
                 "atanh", "floor", "ceil"}
OPS = sorted(set(_BINARY) | set(_UNARY) | {"clamp"})


def constant_tensor(value):
    """A Python/NumPy scalar as a 0-d tensor of DALI's constant type."""
    if isinstance(value, (bool, np.bool_)):
        return torch.tensor(bool(value))
    if isinstance(value, int):
        return torch.tensor(value, dtype=torch.int32)
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.float32)
    if isinstance(value, np.generic):
        return torch.from_numpy(np.asarray(value))
    raise TypeError(f"arithmetic: {type(value).__name__} constants are not supported "
                    "(use Python scalars or DataNodes)")


def result_type(op, dtypes):
    """The output dtype of `op` over operands of these dtypes."""
    t = dtypes[0]
    for d in dtypes[1:]:
        t = torch.promote_types(t, d)
    if op in _COMPARE:
        return torch.bool
    if op in _BITWISE and t.is_floating_point:
        raise TypeError(f"arithmetic: bitwise '{op}' needs integer or bool operands, got {t}")
    if op in _FLOAT_RESULT and not t.is_floating_point:
        return torch.float32
    if op in ("add", "sub", "mul", "minus", "pow", "mod", "div") and t == torch.bool:
        return torch.int32 if op != "minus" else torch.bool
    return t


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
        dtype = result_type(self.op, [x.dtype for x in operands])
        compute = dtype if self.op not in _COMPARE else None
        if compute is not None:
            operands = [x.to(compute) for x in operands]
        if self.op == "clamp":
            x, lo, hi = operands
            return torch.minimum(torch.maximum(x, lo.to(x.dtype)), hi.to(x.dtype))
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
