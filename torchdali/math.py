"""Elementwise math on DataNodes (DALI's `math` module)."""
from .graph import arithmetic as _arith


def _unary(op):
    def f(x):
        return _arith(op, x)
    f.__name__ = op
    f.__doc__ = f"Elementwise {op} of a DataNode."
    return f


def _binary(op):
    def f(a, b):
        return _arith(op, a, b)
    f.__name__ = op
    f.__doc__ = f"Elementwise {op} of two operands (DataNodes or scalars)."
    return f


for _name in ("abs", "fabs", "sqrt", "rsqrt", "cbrt", "exp", "log", "log2", "log10", "floor", "ceil",
              "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh"):
    globals()[_name] = _unary(_name)
for _name in ("min", "max", "pow", "fpow", "atan2"):
    globals()[_name] = _binary(_name)


def clamp(x, lo, hi):
    """`x` limited to [lo, hi], keeping x's type."""
    return _arith("clamp", x, lo, hi)


del _name
