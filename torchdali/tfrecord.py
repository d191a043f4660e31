"""DALI's `tfrecord` namespace: the feature descriptions `readers.tfrecord` extracts from
tf.train.Example records (`import torchdali.tfrecord as tfrec`).

`FixedLenFeature` and `VarLenFeature` stand for TensorFlow's types of the same names; the
dtypes are DALI's codes. A `Feature` is a named tuple, so that pipelines holding one can be
serialized.
"""
import numbers
from typing import NamedTuple, Tuple

int64 = 0
string = 1
float32 = 2

_DTYPE_NAMES = {int64: "int64", string: "string", float32: "float32"}


class Feature(NamedTuple):
    """TFRecord feature. Use the FixedLenFeature and VarLenFeature helper functions to
    obtain the instances."""

    fixed: bool  # FixedLenFeature; else VarLenFeature
    shape: Tuple[int, ...]  # fixed: the shape; var: the partial shape (the dims after the first)
    dtype: int  # int64, string or float32
    default_value: object

    def __repr__(self):
        dtype = _DTYPE_NAMES[self.dtype]
        if self.fixed:
            return f"FixedLenFeature({list(self.shape)}, {dtype}, {self.default_value!r})"
        return f"VarLenFeature({list(self.shape)}, {dtype}, {self.default_value!r})"


def _check_dtype(dtype):
    if isinstance(dtype, bool) or not isinstance(dtype, numbers.Integral) or int(dtype) not in _DTYPE_NAMES:
        raise TypeError(f"invalid feature dtype {dtype!r}; expected tfrecord.int64, tfrecord.float32 or "
                        "tfrecord.string")
    return int(dtype)


def _check_default(dtype, value):
    """The default value, of the Python type DALI requires for the dtype (it is not used to
    fill missing values, as in DALI)."""
    expected = {int64: (numbers.Integral, "an int"), float32: (float, "a float"), string: (str, "a str")}[dtype]
    real_float = dtype == float32 and isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral)
    if not (isinstance(value, expected[0]) or real_float):
        raise TypeError(f"invalid default value {value!r} for a {_DTYPE_NAMES[dtype]} feature; expected {expected[1]}")
    return {int64: int, float32: float, string: str}[dtype](value)


def _check_shape(shape, what):
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError(f"{what} must be a list of ints, got {shape!r}")
    dims = tuple(shape)
    if any(isinstance(d, bool) or not isinstance(d, numbers.Integral) for d in dims):
        raise TypeError(f"{what} must be a list of ints, got {shape!r}")
    return tuple(int(d) for d in dims)


def FixedLenFeature(shape, dtype, default_value, /):
    """Equivalent of TensorFlow's FixedLenFeature: values of this `shape` (a scalar for
    []); a string feature gives its first value's bytes."""
    dtype = _check_dtype(dtype)
    return Feature(True, _check_shape(shape, "shape"), dtype, _check_default(dtype, default_value))


def VarLenFeature(*args):
    """Equivalent of TensorFlow's VarLenFeature: `VarLenFeature(dtype, default_value)` gives
    the values as a 1D array; `VarLenFeature(partial_shape, dtype, default_value)` reshapes
    them to (n, *partial_shape), n inferred from their number."""
    if len(args) == 2:
        partial_shape, (dtype, default_value) = (), args
    elif len(args) == 3:
        partial_shape, dtype, default_value = args
    else:
        raise TypeError(f"VarLenFeature takes (dtype, default_value) or (partial_shape, dtype, default_value), "
                        f"got {len(args)} arguments")
    dtype = _check_dtype(dtype)
    return Feature(False, _check_shape(partial_shape, "partial_shape"), dtype, _check_default(dtype, default_value))
