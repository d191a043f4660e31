"""Files and .npy bytes: reads through torchdali.storage (the local files in one call of the
C++ kernel), the .npy format (versions 1, 2 and 3; DALI 2.4 reads version 1 only; big-endian
arrays come out in the machine's order), `io.file.read`, which reads the files whose paths
come as byte strings, and `decoders.numpy`, which turns .npy bytes into arrays (C order),
cast to `dtype` where given as DALI's ConvertSat does."""
import ast
import dataclasses
import math
import os
import re

import numpy as np
import torch

from .. import storage, types
from ..kernels.io import EncodedFiles, read_files
from ..schema import BOOL, DTYPE, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator
from .conversions import convert_saturate
from .crop import cast_fill

_MAGIC = b"\x93NUMPY"
# The element types DALI reads (kind and size, byte order aside), as torch types.
_TYPES = {"b1": torch.bool, "i1": torch.int8, "u1": torch.uint8, "i2": torch.int16, "u2": torch.uint16,
          "i4": torch.int32, "u4": torch.uint32, "i8": torch.int64, "u8": torch.uint64,
          "f2": torch.float16, "f4": torch.float32, "f8": torch.float64}
# numpy.save's own header text: parsed with one regex (a dict literal otherwise, 10x slower).
_CANONICAL = re.compile(rb"\{'descr': '([^']*)', 'fortran_order': (True|False), 'shape': \(([0-9, ]*)\), \} *\n?")


@dataclasses.dataclass(frozen=True)
class NpyHeader:
    """An .npy file's header: the stored element type (byte order included), the shape, the
    order, and where the data starts."""

    dtype: np.dtype
    shape: tuple
    fortran: bool
    offset: int

    @property
    def nbytes(self):
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def torch_dtype(self):
        return _TYPES[f"{self.dtype.kind}{self.dtype.itemsize}"]


def header_length(prefix):
    """The length of the header (magic to data) of an .npy file that starts with `prefix`;
    a ValueError saying what is wrong."""
    if not len(prefix):
        raise ValueError("it is empty (0 bytes)")
    if bytes(prefix[:6]) != _MAGIC:
        raise ValueError("not a NumPy .npy file (it does not start with '\\x93NUMPY')")
    if len(prefix) < 10:
        raise ValueError("the .npy header is truncated")
    major = prefix[6]
    if major == 1:
        return 10 + int.from_bytes(bytes(prefix[8:10]), "little")
    if major in (2, 3) and len(prefix) >= 12:
        return 12 + int.from_bytes(bytes(prefix[8:12]), "little")
    if major in (2, 3):
        raise ValueError("the .npy header is truncated")
    raise ValueError(f".npy format version {major}.{prefix[7]} is not supported (1, 2 and 3 are)")


def parse_header(data):
    """The NpyHeader of an .npy file whose first bytes (the header at least) are `data`; a
    ValueError saying what is wrong."""
    length = header_length(data)
    if len(data) < length:
        raise ValueError(f"the .npy header is truncated ({len(data)} of its {length} bytes)")
    text = bytes(data[10 if data[6] == 1 else 12:length])
    found = _CANONICAL.fullmatch(text)
    if found:
        descr, fortran = found.group(1).decode("latin1"), found.group(2) == b"True"
        shape = tuple(int(x) for x in found.group(3).split(b",") if x.strip())
    else:
        descr, fortran, shape = _header_dict(text, "utf8" if data[6] == 3 else "latin1")
    return NpyHeader(_element_type(descr), shape, fortran, length)


def _header_dict(text, encoding):
    """(descr, fortran_order, shape) of a header in any dict-literal form."""
    try:
        d = ast.literal_eval(text.decode(encoding))
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError):
        d = None
    if not isinstance(d, dict) or not {"descr", "fortran_order", "shape"} <= set(d):
        raise ValueError(f"the .npy header is not a dict of descr, fortran_order and shape: {text[:100]!r}")
    descr, fortran, shape = d["descr"], d["fortran_order"], d["shape"]
    if not isinstance(descr, str):
        raise ValueError(f"structured arrays are not supported (descr {descr!r})")
    if not isinstance(fortran, bool) or not isinstance(shape, tuple) or \
            not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape):
        raise ValueError(f"the .npy header has fortran_order {fortran!r} and shape {shape!r}")
    return descr, fortran, shape


def _element_type(descr):
    try:
        dtype = np.dtype(descr)
    except TypeError:
        dtype = None
    if dtype is None or dtype.fields is not None or f"{dtype.kind}{dtype.itemsize}" not in _TYPES:
        raise ValueError(f"data type '{descr}' is not supported (bool, integers and float16/32/64 are)")
    return dtype


def _stored(header, lo, hi):
    """The stored shape and the window lo:hi in storage order (axes reversed for Fortran), as
    lists of ints (a few dims: Python's ints beat NumPy's calls here)."""
    shape, lo, hi = list(header.shape), [int(x) for x in lo], [int(x) for x in hi]
    return (shape[::-1], lo[::-1], hi[::-1]) if header.fortran else (shape, lo, hi)


def _element_strides(shape):
    """C-order strides of `shape`, in elements."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return strides[::-1]


def byte_range(header, lo, hi):
    """(start, length): the bytes of the file from the first to the last element of the
    (non-empty) window lo:hi, in storage order."""
    shape, lo, hi = _stored(header, lo, hi)
    strides = _element_strides(shape)
    first = sum(a * s for a, s in zip(lo, strides))
    last = sum((b - 1) * s for b, s in zip(hi, strides))
    size = header.dtype.itemsize
    return header.offset + first * size, (last - first + 1) * size


def copy_window(header, src, lo, hi, dst):
    """Copy the window lo:hi of the array into `dst` (a NumPy array of shape hi - lo, in C
    order); `src` holds the bytes of `byte_range(header, lo, hi)`."""
    shape, lo, hi = _stored(header, lo, hi)
    size = header.dtype.itemsize
    window = np.ndarray(tuple(b - a for a, b in zip(lo, hi)), header.dtype, buffer=src,
                        strides=tuple(s * size for s in _element_strides(shape)))
    np.copyto(dst, window.T if header.fortran else window)


def convert_sat(values, dtype):
    """DALI's ConvertSat of a tensor: round half away from zero and saturate; NaN becomes x86's
    "integer indefinite" in integer types (INT_MIN in int32, 0 in 8-bit types), as DALI's CPU
    operators give it."""
    integers = [not t.is_floating_point and t != torch.bool for t in (values.dtype, dtype)]
    if all(integers):  # clamped in the source type to the range both types hold (exact for 64 bits)
        source, target = values.numpy(), torch.iinfo(dtype)
        lo, hi = (np.array(v, source.dtype) for v in (max(target.min, np.iinfo(source.dtype).min),
                                                       min(target.max, np.iinfo(source.dtype).max)))
        return torch.from_numpy(np.clip(source, lo, hi).astype(torch.empty(0, dtype=dtype).numpy().dtype))
    out = convert_saturate(values, dtype)
    if values.is_floating_point() and not dtype.is_floating_point and dtype != torch.bool:
        nan = torch.isnan(values)
        if nan.any():
            out.numpy()[nan.numpy()] = cast_fill(math.nan, dtype)
    return out


def read_whole_files(op, paths):
    """The files `paths` back to back (EncodedFiles): local ones in one call of the C++ kernel
    (parallel, without the GIL), URLs concurrently through torchdali.storage; errors name the
    file."""
    if not any(storage.is_url(p) for p in paths):
        try:
            return read_files(paths)
        except RuntimeError as e:  # the kernel's message names the file and the reason
            raise op.error(str(e).splitlines()[0]) from None
    contents = _storage_call(op, lambda: storage.read_many(paths))
    data = torch.from_numpy(np.frombuffer(bytearray(b"".join(contents)), np.uint8))
    return EncodedFiles.back_to_back(data, [len(c) for c in contents])


def read_path(op, path, start=0, length=None):
    """`length` bytes of `path` (a file or URL) from `start`; errors name the file."""
    return _storage_call(op, lambda: storage.read_bytes(path, start, length), path)


def read_into(op, path, start, buffer):
    """Fill `buffer` (writable, C-contiguous) with the bytes of `path` from `start`: a local
    file straight into it (os.preadv, without the GIL; storage.py has no read into a buffer
    yet), a URL through torchdali.storage; an error names a file that ends before."""
    view = memoryview(buffer).cast("B")
    if storage.is_url(path):
        data = read_path(op, path, start, len(view))
        got = len(data)
        view[:got] = data
    else:
        got = 0
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                while got < len(view):  # Linux reads at most ~2 GiB per call
                    n = os.preadv(fd, [view[got:]], start + got)
                    if not n:
                        break
                    got += n
            finally:
                os.close(fd)
        except OSError as e:
            raise op.error(f"cannot read '{path}': {e.strerror}", file=path) from None
    if got < len(view):
        raise op.error(f"'{path}' is truncated: {got} of the {len(view)} bytes at offset {start} that its header "
                       "announces", file=path)


def _storage_call(op, call, path=None):
    """call(), a read through torchdali.storage, with errors naming the operator and the file."""
    try:
        return call()
    except OSError as e:
        name = e.filename or path
        raise op.error(f"cannot read '{name}': {e.strerror or e}", file=name) from None
    except ImportError as e:  # a URL whose protocol needs a package that is not installed
        raise op.error(str(e), ImportError) from None


_BYTES = (torch.uint8, torch.int8)
_NUMERIC = (types.BOOL, types.INT8, types.UINT8, types.INT16, types.UINT16, types.INT32, types.UINT32,
            types.INT64, types.UINT64, types.FLOAT16, types.FLOAT, types.FLOAT64)


def _byte_samples(op, batch, what):
    """The samples of a CPU batch of bytes (uint8 or int8) as NumPy uint8 arrays."""
    samples = batch.as_torch_list()
    for i, s in enumerate(samples):
        if s.dtype not in _BYTES:
            raise op.error(f"sample {i}: {what} must be uint8 or int8 bytes, got {s.dtype}", TypeError, sample=i)
    return [s.reshape(-1).view(torch.uint8).numpy() for s in samples]


@register("io.file.read", inputs=(1, 1), input_names=("filepaths",), args=[
    Arg("dont_use_mmap", BOOL, False, "Read with plain I/O instead of mapping the files; torchdali always "
        "reads with plain I/O."),
    Arg("use_o_direct", BOOL, False, "Accepted for compatibility."),
])
class FileRead(Operator):
    """Reads the files named by the input's samples (paths as 1D uint8 or int8 byte strings, up
    to the first NUL, e.g. `np.frombuffer(path.encode(), np.uint8)`) into 1D uint8 arrays."""

    def plan(self, inputs):
        if inputs[0].device != "cpu":
            raise self.error("the file paths must be CPU data", TypeError)
        return [BatchSpec("cpu", torch.uint8, 1, "")], self.step

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        for i, s in enumerate(batch.as_torch_list()):
            if s.dim() != 1:
                raise self.error(f"sample {i}: a file path must be a 1D byte string, got shape {tuple(s.shape)}",
                                 ValueError, sample=i)
        paths = [os.fsdecode(bytes(s).split(b"\0", 1)[0]) for s in _byte_samples(self, batch, "a file path")]
        for i, path in enumerate(paths):
            if not path:
                raise self.error(f"sample {i}: the file path is empty", ValueError, sample=i)
        files = read_whole_files(self, paths)
        return [TensorList.from_flat(files.data, files.spans[:, 1:].numpy(), "", device="cpu")]


@register("decoders.numpy", inputs=(1, 1), input_names=("data",), args=[
    Arg("dtype", DTYPE, None, "Output type; the samples are converted to it (rounded and saturated). "
        "Without it the samples' own type, which must be the same for the batch.", choices=_NUMERIC),
])
class NumpyDecoder(Operator):
    """Decodes .npy files (1D uint8 bytes of format versions 1, 2 or 3) into arrays of their
    shape and type, or of `dtype`. The samples of a batch must have the same rank."""

    def plan(self, inputs):
        if inputs[0].device != "cpu":
            raise self.error("the .npy bytes must be CPU data", TypeError)
        dtype = self.spec.args["dtype"]
        self.dtype = None if dtype is None else types.to_torch_type(dtype)
        return [BatchSpec("cpu", self.dtype, None, "")], self.step

    def step(self, inputs, args, ctx):
        data = _byte_samples(self, inputs[0], "the .npy data")
        headers = [self._header(i, d) for i, d in enumerate(data)]
        if not headers:
            return [TensorList.make([], "", device="cpu")]
        ndim = len(headers[0].shape)
        for i, h in enumerate(headers):
            if len(h.shape) != ndim:
                raise self.error(f"all samples must have the same number of dimensions: sample 0 has {ndim}, "
                                 f"sample {i} has {len(h.shape)}", sample=i)
            if self.dtype is None and h.torch_dtype != headers[0].torch_dtype:
                raise self.error(f"all samples must have the same data type (or give dtype): sample 0 is "
                                 f"{headers[0].dtype.name}, sample {i} is {h.dtype.name}", sample=i)
        dtype = self.dtype or headers[0].torch_dtype
        shapes = np.array([h.shape for h in headers], np.int64).reshape(len(headers), ndim)
        ends = np.cumsum(shapes.prod(axis=1))
        out = torch.empty(int(ends[-1]), dtype=dtype)
        zeros = [0] * ndim
        for i, (h, d) in enumerate(zip(headers, data)):
            dst = out[ends[i] - shapes[i].prod():ends[i]].view(h.shape)
            if not dst.numel():
                continue
            start, length = byte_range(h, zeros, h.shape)
            if h.torch_dtype == dtype:  # a copy (from Fortran or big-endian order where stored so)
                copy_window(h, d[start:start + length], zeros, h.shape, dst.numpy())
            else:
                native = np.empty(h.shape, h.dtype.newbyteorder("="))
                copy_window(h, d[start:start + length], zeros, h.shape, native)
                dst.copy_(convert_sat(torch.from_numpy(native), dtype))
        return [TensorList.from_flat(out, shapes, "", device="cpu")]

    def _header(self, i, data):
        """Sample i's header; an error where the bytes are no .npy file or their size is not the
        header's and the data's."""
        try:
            h = parse_header(data)
        except ValueError as e:
            raise self.error(f"sample {i}: {e}", sample=i) from None
        if len(data) != h.offset + h.nbytes:
            raise self.error(f"sample {i}: the header announces {h.nbytes} bytes of data ({h.dtype.str} "
                             f"{h.shape}), the sample holds {len(data) - h.offset}", sample=i)
        return h
