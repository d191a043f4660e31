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
