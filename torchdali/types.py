"""DALI's type names (data types, image types, interpolation types, layouts) and
their mapping to torch dtypes."""
import enum

import numpy as np
import torch


class DALIDataType(enum.IntEnum):
    """Element types, with DALI's numeric values so serialized ids match."""

    NO_TYPE = -1
    UINT8 = 0
    UINT16 = 1
    UINT32 = 2
    UINT64 = 3
    INT8 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    FLOAT16 = 8
    FLOAT = 9
    FLOAT64 = 10
    BOOL = 11
    STRING = 12
    FEATURE = 17
    IMAGE_TYPE = 20
    DATA_TYPE = 21
    INTERP_TYPE = 22
    TENSOR_LAYOUT = 23
    PYTHON_OBJECT = 24

    def __str__(self):
        return f"DALIDataType.{self.name}"


class DALIImageType(enum.IntEnum):
    """Colour spaces of decoded images."""

    RGB = 0
    BGR = 1
    GRAY = 2
    YCbCr = 3
    ANY_DATA = 4


class DALIInterpType(enum.IntEnum):
    """Interpolation methods of the resampling operators."""

    INTERP_NN = 0
    INTERP_LINEAR = 1
    INTERP_CUBIC = 2
    INTERP_LANCZOS3 = 3
    INTERP_TRIANGULAR = 4
    INTERP_GAUSSIAN = 5


class TensorLayout(str):
    """A layout string such as "HWC"; a plain ``str`` for every other purpose."""


class PipelineAPIType(enum.Enum):
    """The ways of running a pipeline, as DALI names them: run() (BASIC), an iterator
    (ITERATOR), schedule_run() with outputs() (SCHEDULED)."""

    BASIC = 0
    ITERATOR = 1
    SCHEDULED = 2


globals().update({m.name: m for m in DALIDataType})
globals().update({m.name: m for m in DALIImageType})
globals().update({m.name: m for m in DALIInterpType})

# DALI spells the batch layouts with an N but their value is the sample layout.
NCHW = TensorLayout("CHW")
NHWC = TensorLayout("HWC")
NFHWC = TensorLayout("FHWC")
NFCHW = TensorLayout("FCHW")
SAME = TensorLayout("")
CPU_ONLY_DEVICE_ID = None

_TO_TORCH = {
    DALIDataType.UINT8: torch.uint8,
    DALIDataType.UINT16: torch.uint16,
    DALIDataType.UINT32: torch.uint32,
    DALIDataType.UINT64: torch.uint64,
    DALIDataType.INT8: torch.int8,
    DALIDataType.INT16: torch.int16,
    DALIDataType.INT32: torch.int32,
    DALIDataType.INT64: torch.int64,
    DALIDataType.FLOAT16: torch.float16,
    DALIDataType.FLOAT: torch.float32,
    DALIDataType.FLOAT64: torch.float64,
    DALIDataType.BOOL: torch.bool,
}
_FROM_TORCH = {v: k for k, v in _TO_TORCH.items()}
_NUMPY_NAMES = {
    "uint8": UINT8, "uint16": UINT16, "uint32": UINT32, "uint64": UINT64,  # noqa: F821
    "int8": INT8, "int16": INT16, "int32": INT32, "int64": INT64,  # noqa: F821
    "float16": FLOAT16, "float32": FLOAT, "float64": FLOAT64, "bool": BOOL,  # noqa: F821
}


def to_torch_type(dtype):
    """The torch dtype of a DALIDataType (or of anything `to_dali_type` accepts)."""
    dali = to_dali_type(dtype)
    if dali not in _TO_TORCH:
        raise TypeError(f"{dali} has no torch equivalent")
    return _TO_TORCH[dali]


def to_dali_type(dtype):
    """A DALIDataType from a DALIDataType, torch dtype, NumPy dtype or DALI's int id."""
    if isinstance(dtype, DALIDataType):
        return dtype
    if isinstance(dtype, torch.dtype):
        if dtype not in _FROM_TORCH:
            raise TypeError(f"torch dtype {dtype} is not supported")
        return _FROM_TORCH[dtype]
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return DALIDataType(dtype)
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name in _NUMPY_NAMES:
        return _NUMPY_NAMES[name]
    raise TypeError(f"{dtype!r} is not a data type")


def to_numpy_type(dtype):
    """The NumPy dtype of a DALIDataType."""
    return np.dtype(str(to_torch_type(dtype)).replace("torch.", ""))


class SampleInfo:
    """Where a sample requested by a per-sample ``external_source`` callback sits."""

    def __init__(self, idx_in_epoch, idx_in_batch, iteration, epoch_idx):
        self.idx_in_epoch = idx_in_epoch
        self.idx_in_batch = idx_in_batch
        self.iteration = iteration
        self.epoch_idx = epoch_idx

    @property
    def iter_idx(self):
        """Alias of ``iteration``, as one of DALI's own examples spells it."""
        return self.iteration

    def __repr__(self):
        return (f"SampleInfo(idx_in_epoch={self.idx_in_epoch}, idx_in_batch={self.idx_in_batch}, "
                f"iteration={self.iteration}, epoch_idx={self.epoch_idx})")


class BatchInfo:
    """Which batch a batch-mode ``external_source`` callback with ``batch_info=True`` makes."""

    def __init__(self, iteration, epoch_idx):
        self.iteration = iteration
        self.epoch_idx = epoch_idx

    def __repr__(self):
        return f"BatchInfo(iteration={self.iteration}, epoch_idx={self.epoch_idx})"


_D = DALIDataType
_INT_TYPES = (_D.INT8, _D.INT16, _D.INT32, _D.INT64, _D.UINT8, _D.UINT16, _D.UINT32, _D.UINT64)
_FLOAT_TYPES = (_D.FLOAT16, _D.FLOAT, _D.FLOAT64)
_INT_LIKE_TYPES = (_D.BOOL,) + _INT_TYPES


class ScalarConstant:
    """A scalar for arithmetic with DataNodes, with the type it takes part in type
    promotion as (`Constant(1, dtype=types.UINT8)`): Python bools, ints and floats are
    BOOL, INT32 and FLOAT; NumPy and torch scalars keep their type. Use `Constant`."""

    def __init__(self, value, dtype=None):
        if hasattr(value, "dtype"):  # NumPy / torch scalars and 0-d arrays
            value_type = to_dali_type(value.dtype)
            value = value.item()
            dtype = value_type if dtype is None else dtype
        if not isinstance(value, (bool, int, float)):
            raise TypeError(f"ScalarConstant: expected a scalar value of type 'bool', 'int' or 'float', "
                            f"got {type(value).__name__}")
        if dtype is None:
            dtype = _D.BOOL if isinstance(value, bool) else _D.INT32 if isinstance(value, int) else _D.FLOAT
        dtype = to_dali_type(dtype)
        if dtype == _D.BOOL:
            value = bool(value)
        elif dtype in _INT_TYPES:
            value = int(value)
        elif dtype in _FLOAT_TYPES:
            value = float(value)
        else:
            raise TypeError(f"ScalarConstant: {dtype} is not a numeric type (bool, integers or floats)")
        self.value, self.dtype = value, dtype

    def as_numpy(self):
        """The value as a NumPy scalar of `dtype`; an OverflowError for an integer out of its range."""
        np_type = to_numpy_type(self.dtype)
        if self.dtype in _INT_TYPES:
            info = np.iinfo(np_type)
            if not info.min <= self.value <= info.max:
                raise OverflowError(f"integer constant {self.value} out of range for {np_type}")
        return np_type.type(self.value)

    def __eq__(self, other):
        if isinstance(other, ScalarConstant):
            return self.value == other.value and self.dtype == other.dtype
        return other.__eq__(self)  # a DataNode compares elementwise

    def __ne__(self, other):
        if isinstance(other, ScalarConstant):
            return self.value != other.value or self.dtype != other.dtype
        return other.__ne__(self)

    __hash__ = None

    def __bool__(self):
        if self.dtype not in _INT_LIKE_TYPES:
            raise TypeError(f"ScalarConstant of type {self.dtype}: convert it to a bool or integer type explicitly "
                            "before casting to builtin `bool`")
        return bool(self.value)

    def __int__(self):
        if self.dtype not in _INT_LIKE_TYPES:
            raise TypeError(f"ScalarConstant of type {self.dtype}: convert it to a bool or integer type explicitly "
                            "before casting to builtin `int`")
        return int(self.value)

    def __float__(self):
        if self.dtype not in _FLOAT_TYPES:
            raise TypeError(f"ScalarConstant of type {self.dtype}: convert it to a float type explicitly "
                            "before casting to builtin `float`")
        return self.value

    def __str__(self):
        return f"{self.value}:{self.dtype}"

    def __repr__(self):
        return repr(self.value)


def _retyped(dtype):
    def convert(self):
        return ScalarConstant(self.value, dtype)
    convert.__doc__ = f"This constant as {dtype}."
    return convert


for _name, _dtype in (("bool", _D.BOOL), ("int8", _D.INT8), ("int16", _D.INT16), ("int32", _D.INT32),
                      ("int64", _D.INT64), ("uint8", _D.UINT8), ("uint16", _D.UINT16), ("uint32", _D.UINT32),
                      ("uint64", _D.UINT64), ("float16", _D.FLOAT16), ("float32", _D.FLOAT), ("float64", _D.FLOAT64)):
    setattr(ScalarConstant, _name, _retyped(_dtype))
del _name, _dtype


def Constant(value, dtype=None, shape=None, layout=None, device=None, **kwargs):
    """A constant for the pipeline: a scalar with no `shape`, `layout`, `device` or other
    argument is a `ScalarConstant` for arithmetic; anything else (lists, arrays, a shape to
    fill, a device) becomes a `fn.constant` node giving the same tensor for every sample
    (float64 data as float32 and, without `dtype`, int64 as int32, as in DALI)."""
    is_array = isinstance(value, (np.ndarray, torch.Tensor))
    is_enum = isinstance(value, (DALIDataType, DALIImageType, DALIInterpType))
    scalar_shape = shape is None or shape in ((), [], 1, [1], (1,))
    if (device is None and not (is_array and value.ndim) and not isinstance(value, (list, tuple)) and not is_enum
            and scalar_shape and not kwargs and layout is None):
        return ScalarConstant(value, dtype)
    return _constant_node(value, dtype, shape, layout, device, **kwargs)


def _constant_node(value, dtype, shape, layout, device, **kwargs):
    from . import fn  # fn imports the operators, which import this module

    if isinstance(value, (np.ndarray, torch.Tensor)):
        value = np.asarray(value.cpu() if isinstance(value, torch.Tensor) else value)
        if value.dtype == np.float64:
            value = value.astype(np.float32)
        elif dtype is None and value.dtype in (np.int64, np.uint64):
            narrow = np.int32 if value.dtype == np.int64 else np.uint32
            if value.size and (value.min() < np.iinfo(narrow).min or value.max() > np.iinfo(narrow).max):
                raise OverflowError(f"Constant: an integer of the array is out of range for {np.dtype(narrow)}")
            value = value.astype(narrow)
        actual = to_dali_type(value.dtype)
        shape = list(value.shape) if shape is None else shape
        data = value.reshape(-1).tolist()
    else:
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        actual = _list_type(values)
        shape = ((len(value),) if isinstance(value, (list, tuple)) else ()) if shape is None else shape
        data = value
    is_int = actual in _INT_LIKE_TYPES or actual in (_D.DATA_TYPE, _D.IMAGE_TYPE, _D.INTERP_TYPE)
    ints = (lambda v: [int(x) for x in v] if isinstance(v, (list, tuple)) else int(v))(data) if is_int else None
    return fn.constant(device=device or "cpu", fdata=None if is_int else data, idata=ints, shape=shape,
                       dtype=dtype if dtype is not None else actual, layout=layout, **kwargs)


def _list_type(values):
    """DALI's type of a list of Python scalars (or of enums of one kind)."""
    enums = [type(v) for v in values if isinstance(v, (DALIDataType, DALIImageType, DALIInterpType))]
    if enums:
        if any(not isinstance(v, enums[0]) for v in values):
            raise TypeError(f"Constant: expected all elements to be the same enum type: `{enums[0].__name__}`")
        return {DALIDataType: _D.DATA_TYPE, DALIImageType: _D.IMAGE_TYPE,
                DALIInterpType: _D.INTERP_TYPE}[enums[0]]
    for v in values:
        if not isinstance(v, (bool, int, float)):
            raise TypeError(f"Constant: unexpected type {type(v).__name__}")
    if any(isinstance(v, float) for v in values) or not values:
        return _D.FLOAT
    return _D.INT32 if any(not isinstance(v, bool) for v in values) else _D.BOOL
