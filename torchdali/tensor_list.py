"""Batches of samples: `TensorListCPU` and `TensorListGPU`.

A batch is a list of torch tensors that may differ in shape, one batched tensor (a
kernel's dense output) that is kept as it is (`as_torch()` hands it over without a copy),
or samples laid back to back in one flat buffer (a kernel's ragged output, or the files
read for a batch), kept as the buffer and the shapes (`flat()`); per-sample views are made
only when something asks for samples. Kernels that take a batch whole get it without a
tensor per sample, which also spares the GIL: a call that drops C++ references to many
Python-visible tensors retakes the GIL once for each.
"""
import ctypes

import numpy as np
import torch

from . import types


class TensorList:
    """A batch of samples; use the device-specific subclasses."""

    def __init__(self, samples, layout="", source_info=None):
        self.source_info = source_info  # per-sample origin (file name), if known
        if isinstance(samples, torch.Tensor):
            if samples.dim() == 0:
                raise ValueError("a dense batch needs a leading batch dimension")
            self._dense = samples
            self._samples = None  # views of _dense, made on first use
        else:
            self._dense = None
            self._samples = list(samples)
        self._flat = None  # (flat buffer, shapes [N, ndim]) of a batch made by from_flat
        self._layout = layout or ""

    def _views(self):
        if self._samples is None:
            if self._dense is not None:
                self._samples = list(self._dense.unbind(0))
            else:
                from .kernels.pack import unpack  # loads the extension on first use

                self._samples = unpack(*self._flat)
        return self._samples

    @staticmethod
    def make(samples, layout="", device=None, source_info=None):
        """A TensorListCPU or TensorListGPU, by where the samples live."""
        if device is None:
            first = samples if isinstance(samples, torch.Tensor) else (samples[0] if len(samples) else None)
            device = "gpu" if first is not None and first.is_cuda else "cpu"
        cls = TensorListGPU if device == "gpu" else TensorListCPU
        return cls(samples, layout, source_info)

    # --- DALI's TensorList API ---
    def __len__(self):
        if self._dense is not None:
            return self._dense.shape[0]
        return len(self._samples) if self._samples is not None else len(self._flat[1])

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __getitem__(self, i):
        """Sample i as a Tensor (DALI's TensorCPU/TensorGPU), with its source_info."""
        info = self.source_info[i] if self.source_info else ""
        cls = TensorGPU if self.device == "gpu" else TensorCPU
        return cls(self.sample(i), self._layout, info)

    def layout(self):
        """The samples' layout, e.g. "HWC" ("" for none)."""
        return self._layout

    def ndim(self):
        """Number of dimensions of the samples (0 for an empty batch)."""
        return self.sample_shapes().shape[1] if len(self) else 0

    def set_layout(self, layout):
        """Set the layout (None or "" for none); it must name every dimension."""
        self._layout = _checked_layout(layout, self.ndim(), "TensorList")

    def reinterpret(self, new_type):
        """View the data as `new_type` (a DALIDataType of the same element size), in place."""
        dtype = _reinterpreted(self.dtype, new_type)
        if self._dense is not None:
            self._dense = self._dense.view(dtype)
        if self._flat is not None:
            self._flat = (self._flat[0].view(dtype), self._flat[1])
        if self._samples is not None:
            self._samples = [s.view(dtype) for s in self._samples]

    def reset(self):
        """Make this an empty batch (no samples, no layout, no type)."""
        self._dense, self._samples, self._flat = None, [], None
        self._layout, self.source_info = "", None

    def data_ptr(self):
        """Address of the first element; the samples must lie back to back in one buffer
        (0 for an empty batch)."""
        return _contiguous(self).data_ptr() if len(self) else 0

    def copy_to_external(self, ptr, cuda_stream=None, non_blocking=False, use_copy_kernel=False):
        """Copy the samples, back to back, to `ptr`: a torch tensor or NumPy array with the
        same number of bytes, or a raw address (`ctypes.c_void_p` or int) in this batch's
        memory (host or GPU). GPU copies run on `cuda_stream` (default: the current stream) and
        wait for it unless `non_blocking`; `use_copy_kernel` is accepted for compatibility."""
        _copy_out(self.flat()[0], ptr, cuda_stream, non_blocking, "TensorList")

    @classmethod
    def broadcast(cls, tensor, num_samples):
        """A batch of `num_samples` samples that are all `tensor` (one shared buffer)."""
        if int(num_samples) < 0:
            raise ValueError(f"broadcast: the number of samples must be >= 0, got {num_samples}")
        layout = tensor.layout() if isinstance(tensor, Tensor) else ""
        data = to_torch_array(tensor, "broadcast", "tensor")
        _check_device(cls, data, "broadcast")
        return cls(data.unsqueeze(0).expand((int(num_samples),) + tuple(data.shape)), layout)

    @classmethod
    def from_dlpack_list(cls, list_of_objects, layout=None, stream=None, contiguous=False):
        """A batch of DLPack objects (e.g. torch tensors) of one type and ndim, shared without
        copies (copied into one buffer with `contiguous=True`)."""
        samples = []
        for i, x in enumerate(list_of_objects):
            if not hasattr(x, "__dlpack__") and type(x).__name__ != "PyCapsule":
                raise TypeError(f"from_dlpack_list: object at position {i} does not support the DLPack protocol")
            t = torch.from_dlpack(x) if hasattr(x, "__dlpack__") else torch.utils.dlpack.from_dlpack(x)
            _check_device(cls, t, "from_dlpack_list")
            if samples and t.dtype != samples[0].dtype:
                raise TypeError(f"from_dlpack_list: tensors cannot have different data types; tensor at position {i} "
                                f"has type {t.dtype}, expected {samples[0].dtype}")
            if samples and t.dim() != samples[0].dim():
                raise ValueError(f"from_dlpack_list: tensors must have the same number of dimensions; tensor at "
                                 f"position {i} has {t.dim()}, expected {samples[0].dim()}")
            samples.append(t)
        batch = cls(samples, "")
        if contiguous and samples:
            batch = TensorList.from_flat(torch.cat([s.reshape(-1) for s in samples]), batch.sample_shapes(),
                                         device=cls.device)
        batch.set_layout(layout)
        if stream is not None:
            batch._stream = stream
        return batch

    def shape(self):
        """Per-sample shapes, as lists of ints."""
        if self._samples is not None and self._dense is None:  # may differ in ndim
            return [list(s.shape) for s in self._samples]
        return self.sample_shapes().tolist()

    def sample_shapes(self):
        """Per-sample shapes as one int64 array [N, ndim] (no loop for a dense batch); a
        ValueError if the samples differ in ndim."""
        if self._dense is not None:
            return np.broadcast_to(np.array(self._dense.shape[1:], np.int64), (len(self), self._dense.dim() - 1))
        if self._flat is not None:
            return self._flat[1]
        if not self._samples:
            return np.zeros((0, 0), np.int64)
        try:
            return np.array([s.shape for s in self._samples], np.int64).reshape(len(self._samples), -1)
        except ValueError:  # ragged: the samples differ in ndim
            ndims = sorted({s.dim() for s in self._samples})
            raise ValueError(f"the samples differ in their number of dims ({ndims})") from None

    def dense_tensor(self):
        """The batch as one [N, ...] tensor when it is held as one (no stacking), else None."""
        return self._dense

    @property
    def dtype(self):
        """The samples' element type, as a DALIDataType (NO_TYPE for an empty batch)."""
        if self._dense is not None:
            return types.to_dali_type(self._dense.dtype)
        if self._flat is not None:
            return types.to_dali_type(self._flat[0].dtype) if len(self) else types.NO_TYPE
        if not self._samples:
            return types.NO_TYPE
        return types.to_dali_type(self._samples[0].dtype)

    def is_dense_tensor(self):
        """True when all samples have one shape, so the batch is one tensor."""
        if self._dense is not None:
            return True
        if self._flat is not None:
            shapes = self._flat[1]
            return bool((shapes == shapes[:1]).all())
        shapes = {tuple(s.shape) for s in self._samples}
        return len(shapes) <= 1

    def as_torch(self):
        """The batch as one torch tensor [N, ...]; no copy when it was produced dense."""
        if self._dense is None:
            if not self.is_dense_tensor():
                raise RuntimeError(
                    f"the batch is not dense (sample shapes {self._shape_summary()}); "
                    "use at(i) or as_torch_list()")
            if self._flat is not None and len(self):
                self._dense = self._flat[0].view((len(self),) + tuple(self._flat[1][0].tolist()))
            elif self._samples:
                self._dense = torch.stack(self._samples)
            else:
                self._dense = torch.empty((0,))
        return self._dense

    def as_torch_list(self):
        """The samples as a list of torch tensors (views, no copies)."""
        return list(self._views())

    def sample(self, i):
        """Sample i as a torch tensor (a view; a dense batch is not split into all its samples)."""
        return self._dense[i] if self._dense is not None else self._views()[i]

    def flat(self):
        """The samples laid back to back in one 1D tensor and their shapes [N, ndim] (no copy
        for a contiguous dense batch or one made by from_flat); a ValueError if the samples
        differ in ndim."""
        if self._flat is not None:
            return self._flat
        shapes = self.sample_shapes()
        if self._dense is not None:
            return self._dense.reshape(-1), shapes
        if not self._samples:
            return torch.empty(0), shapes
        return torch.cat([s.reshape(-1) for s in self._samples]), shapes

    def held_flat(self):
        """(flat buffer, shapes [N, ndim]) of a batch held that way (from_flat, samples of
        different shapes), else None: a kernel takes it whole, without a tensor per sample."""
        return self._flat if self._dense is None else None

    def buffers(self):
        """A tensor of each memory block the samples live in (one for a dense batch or one
        made by from_flat), without making views per sample."""
        if self._dense is not None:
            return [self._dense]
        if self._flat is not None:
            return [self._flat[0]]
        return list({s.untyped_storage().data_ptr(): s for s in self._samples}.values())

    @staticmethod
    def from_flat(flat, shapes, layout="", device=None, source_info=None):
        """A batch of the samples laid back to back in `flat` with shapes [N, ndim]: one dense
        view when the shapes agree, else the buffer and the shapes as they are, views per
        sample made when asked for (the inverse of `flat`)."""
        shapes = np.asarray(shapes, np.int64).reshape(len(shapes), -1)
        if len(shapes) and (shapes == shapes[0]).all():
            return TensorList.make(flat.view((len(shapes),) + tuple(shapes[0].tolist())), layout, device=device,
                                   source_info=source_info)
        batch = TensorList.make([], layout, device=device or ("gpu" if flat.is_cuda else "cpu"),
                                source_info=source_info)
        batch._samples, batch._flat = None, (flat, shapes)
        return batch

    def _shape_summary(self):
        shapes = sorted({tuple(s.shape) for s in self._views()})
        return ", ".join(str(s) for s in shapes[:4]) + (" ..." if len(shapes) > 4 else "")

    def __repr__(self):
        return f"{type(self).__name__}(len={len(self)}, dtype={self.dtype}, layout={self._layout!r})"


class TensorListCPU(TensorList):
    """A batch in host memory; `at(i)` gives NumPy arrays."""

    device = "cpu"

    def at(self, i):
        """Sample i as a NumPy array viewing the batch's memory."""
        return self._views()[i].numpy()

    def as_array(self):
        """The dense batch as one NumPy array [N, ...], without a copy."""
        return self.as_torch().numpy()

    def as_tensor(self):
        """The dense batch (`TensorCPU`); raises if the samples differ in shape."""
        return TensorCPU(self.as_torch(), self._layout)

    def as_cpu(self):
        """The batch itself: it is already in host memory."""
        return self

    def as_reshaped_tensor(self, shape):
        """The dense batch reshaped to `shape` (same number of elements), as one TensorCPU."""
        return TensorCPU(self.as_torch().reshape(shape), self._layout)

    def __array__(self, dtype=None, copy=None):
        arr = self.as_array()
        return arr if dtype is None else arr.astype(dtype)


class TensorListGPU(TensorList):
    """A batch in GPU memory; `at(i)` gives torch CUDA tensors."""

    device = "gpu"
    _stream = None

    def device_id(self):
        """The CUDA device the samples live on."""
        return _device_id(self.buffers())

    @property
    def stream(self):
        """The CUDA stream the data is ready on (given to from_dlpack_list), or None: the
        pipeline's outputs are ready for the consumer's stream when handed over."""
        return self._stream

    def at(self, i):
        """Sample i as a torch CUDA tensor viewing the batch's memory."""
        return self._views()[i]

    def as_cpu(self):
        """A copy of the batch in host memory (TensorListCPU), with the same layout."""
        if self._dense is not None:
            return TensorListCPU(self._dense.cpu(), self._layout)
        if self._flat is not None:
            return TensorList.from_flat(self._flat[0].cpu(), self._flat[1], self._layout, device="cpu")
        return TensorListCPU([s.cpu() for s in self._samples], self._layout)

    def as_tensor(self):
        """The dense batch (`TensorGPU`); raises if the samples differ in shape."""
        return TensorGPU(self.as_torch(), self._layout)

    def as_reshaped_tensor(self, shape):
        """The dense batch reshaped to `shape` (same number of elements), as one TensorGPU."""
        return TensorGPU(self.as_torch().reshape(shape), self._layout)

    @property
    def __cuda_array_interface__(self):
        return self.as_torch().__cuda_array_interface__


class Tensor:
    """One dense tensor (a sample or a whole dense batch)."""

    def __init__(self, data, layout="", source_info=""):
        self._data = data
        self._layout = layout
        self._source_info = source_info

    def source_info(self):
        """Where the sample came from (e.g. its file name), or ""."""
        return self._source_info

    def shape(self):
        """The tensor's shape, as a list."""
        return list(self._data.shape)

    def layout(self):
        """The tensor's layout, e.g. "HWC" ("" for none)."""
        return self._layout

    def ndim(self):
        """Number of dimensions of the tensor."""
        return self._data.dim()

    def set_layout(self, layout):
        """Set the layout (None or "" for none); it must name every dimension."""
        self._layout = _checked_layout(layout, self.ndim(), "Tensor")

    def reinterpret(self, new_type):
        """View the data as `new_type` (a DALIDataType of the same element size), in place."""
        self._data = self._data.view(_reinterpreted(self.dtype, new_type))

    def data_ptr(self):
        """Address of the first element."""
        return self._data.data_ptr()

    def copy_to_external(self, ptr, cuda_stream=None, non_blocking=False, use_copy_kernel=False):
        """Copy the data to `ptr` (see TensorList.copy_to_external)."""
        _copy_out(self._data, ptr, cuda_stream, non_blocking, "Tensor")

    @property
    def dtype(self):
        """The element type, as a DALIDataType."""
        return types.to_dali_type(self._data.dtype)

    def as_torch(self):
        """The data as a torch tensor, without a copy."""
        return self._data

    def __dlpack__(self, *args, **kwargs):
        return self._data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()


class TensorCPU(Tensor):
    """A tensor in host memory (DALI's TensorCPU): NumPy reads it through `np.array(t)`."""

    def __array__(self, dtype=None, copy=None):
        arr = self._data.numpy()
        return arr if dtype is None else arr.astype(dtype)

    def as_cpu(self):
        """The tensor itself: it is already in host memory."""
        return self


class TensorGPU(Tensor):
    """A tensor in GPU memory (DALI's TensorGPU): CUDA libraries read it through
    `__cuda_array_interface__` or DLPack."""

    _stream = None

    def device_id(self):
        """The CUDA device the data lives on."""
        return _device_id([self._data])

    @property
    def stream(self):
        """The CUDA stream the data is ready on, or None (see TensorListGPU.stream)."""
        return self._stream

    def as_cpu(self):
        """A copy in host memory (TensorCPU), with the same layout and source info."""
        return TensorCPU(self._data.cpu(), self._layout, self._source_info)

    @property
    def __cuda_array_interface__(self):
        return self._data.__cuda_array_interface__


def _checked_layout(layout, ndim, what):
    layout = layout or ""
    if not isinstance(layout, str):
        raise TypeError(f"set_layout: the layout must be a string or None, got {type(layout).__name__}")
    if layout and len(layout) != ndim:
        raise ValueError(f"set_layout: a non-empty layout must have as many dimensions as the {what}: "
                         f"got {len(layout)} ({layout}), expected {ndim}")
    return layout


def _reinterpreted(old, new_type):
    """The torch dtype to view data of DALI type `old` as `new_type`."""
    if not isinstance(new_type, types.DALIDataType):
        raise TypeError(f"reinterpret: new_type must be a DALIDataType, got {new_type!r}")
    dtype = types.to_torch_type(new_type)
    old_size = types.to_torch_type(old).itemsize if old != types.NO_TYPE else dtype.itemsize
    if dtype.itemsize != old_size:
        raise ValueError(f"reinterpret: cannot reinterpret {old} ({old_size} bytes) as {new_type} "
                         f"({dtype.itemsize} bytes): the element size must not change")
    return dtype


def _contiguous(batch):
    """The batch's samples as one 1D tensor over its own memory; an error if they are not
    laid back to back."""
    flat, _ = batch.held_flat() or (None, None)
    if flat is None:
        dense = batch.dense_tensor()
        if dense is not None and dense.is_contiguous():
            flat = dense.reshape(-1)
        elif batch._samples:
            flat = _back_to_back(batch.as_torch_list())
    if flat is None:
        raise RuntimeError("data_ptr: the samples are not contiguous in memory (one buffer, back to back)")
    return flat


def _back_to_back(samples):
    """One 1D view of samples that lie back to back in one storage, else None."""
    first = samples[0]
    offset = first.storage_offset()
    for s in samples:
        if not s.is_contiguous() or s.untyped_storage().data_ptr() != first.untyped_storage().data_ptr() \
                or s.storage_offset() != offset:
            return None
        offset += s.numel()
    return first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(), (offset - first.storage_offset(),))


def _copy_out(src, ptr, cuda_stream, non_blocking, what):
    """Copy `src`'s bytes to `ptr` (tensor, array or raw address)."""
    src = src.contiguous().reshape(-1)
    nbytes = src.numel() * src.element_size()
    if isinstance(ptr, np.ndarray):
        if not ptr.flags.writeable:
            raise ValueError("copy_to_external: the destination NumPy array is read-only")
        ptr = torch.from_numpy(ptr)
    if isinstance(ptr, ctypes.c_void_p):
        ptr = ptr.value or 0
    if isinstance(ptr, torch.Tensor):
        if not ptr.is_contiguous() or ptr.numel() * ptr.element_size() != nbytes:
            raise ValueError(f"copy_to_external: the destination must be contiguous and have {nbytes} bytes, "
                             f"got shape {tuple(ptr.shape)} of {ptr.dtype}")
        dst = ptr.view(-1).view(torch.uint8) if ptr.element_size() else ptr
    elif isinstance(ptr, int) and not isinstance(ptr, bool) and ptr:
        dst = _wrap_address(ptr, nbytes, src.is_cuda, src.device)
    else:
        raise TypeError(f"copy_to_external: the destination must be a torch tensor, a writeable NumPy array or a "
                        f"non-null pointer (ctypes.c_void_p or int), got {type(ptr).__name__}")
    if dst.is_cuda != src.is_cuda:
        raise ValueError(f"copy_to_external: a {what} in {'GPU' if src.is_cuda else 'host'} memory copies to "
                         f"{'GPU' if src.is_cuda else 'host'} memory only")
    if not nbytes:
        return
    source = src.view(torch.uint8)
    if not src.is_cuda:
        dst.copy_(source)
        return
    from .executor import as_torch_stream

    stream = as_torch_stream(cuda_stream, src.device) or torch.cuda.current_stream(src.device)
    stream.wait_stream(torch.cuda.current_stream(src.device))
    with torch.cuda.stream(stream):
        dst.copy_(source, non_blocking=True)
    if not non_blocking:
        stream.synchronize()


def _wrap_address(address, nbytes, cuda, device):
    """A uint8 tensor over `nbytes` of memory at `address` (host, or GPU `device`)."""
    if not cuda:
        return torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(address), dtype=torch.uint8)

    class _Memory:
        __cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (address, False), "version": 2}
    return torch.as_tensor(_Memory(), device=device)


def _check_device(cls, t, where):
    if t.is_cuda != (cls.device == "gpu"):
        raise TypeError(f"{where}: {cls.__name__} takes {'GPU' if cls.device == 'gpu' else 'host'} data, "
                        f"got a tensor on {t.device}")


def _device_id(tensors):
    return next((t.device.index for t in tensors if t.is_cuda), torch.cuda.current_device())


def to_torch_samples(data, operator="", arg="data", gather=False):
    """Normalise user data (NumPy, torch, CuPy, DLPack, `__cuda_array_interface__`,
    TensorLists, or a list of any of those) into a list of torch tensors, or a dense
    batched tensor when given one array. With `gather`, a list of NumPy arrays of one
    shape and dtype is copied into one dense batch (the other forms are not copied)."""
    if isinstance(data, TensorList):
        dense = data.dense_tensor()
        return dense if dense is not None else data.as_torch_list()
    if isinstance(data, (list, tuple)):
        if gather and data:
            from .kernels.pack import gather_arrays  # loads the extension on first use
            dense = gather_arrays(data)
            if dense is not None:
                return dense
        return _plain_arrays(data) or [to_torch_array(x, operator, arg) for x in data]
    if type(data).__name__ == "PyCapsule":  # a DLPack capsule holds a whole batch
        return torch.utils.dlpack.from_dlpack(data)
    return to_torch_array(data, operator, arg)


def _plain_arrays(data):
    """The common case of a list source, fast: writeable C-contiguous NumPy arrays of numbers
    (at least 1D), shared with torch; None for anything else."""
    out = []
    for x in data:
        if type(x) is not np.ndarray or not x.ndim or x.dtype.hasobject or \
                not (x.flags.c_contiguous and x.flags.writeable):
            return None
        out.append(torch.from_numpy(x))
    return out


def to_torch_array(x, operator="", arg="data"):
    """One array-like as a torch tensor, sharing memory where the source allows it."""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, Tensor):
        return x.as_torch()
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            raise TypeError(f"{operator}: {arg} holds Python objects, not numbers".lstrip(": "))
        if not x.flags.writeable:
            x = x.copy()
        return torch.from_numpy(np.ascontiguousarray(x) if x.ndim else x)  # keeps 0-d samples 0-d
    if hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack__"):
        return torch.from_dlpack(x) if hasattr(x, "__dlpack__") else torch.as_tensor(x, device="cuda")
    if type(x).__name__ == "PyCapsule":
        return torch.utils.dlpack.from_dlpack(x)
    if isinstance(x, (int, float, bool, np.generic)):
        return torch.from_numpy(np.asarray(x))
    raise TypeError(f"{operator}: {arg} of type {type(x).__name__} is not an array ".lstrip(": ") +
                    "(expected NumPy, torch, CuPy, DLPack or a list of them)")
