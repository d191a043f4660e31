"""Graph plumbing behind DataNode's methods: constants, `.gpu()`, `.cpu()`, `shape()`,
`property()` (the public `get_property`) and Python indexing."""
import numpy as np
import torch

from .. import schema
from ..schema import ANY, BOOL, DTYPE, STR, Arg, register
from ..tensor_list import TensorList, to_torch_array
from .base import BatchSpec, Operator


@register("_constant", devices=("cpu",), args=[Arg("value", ANY, schema.REQUIRED, "The constant.")],
          internal=True)
class Constant(Operator):
    """A constant repeated for every sample."""

    def __init__(self, spec):
        super().__init__(spec)
        value = spec.args["value"]
        if isinstance(value, (list, tuple)):
            value = np.asarray(value)
        if isinstance(value, float):
            value = np.float32(value)
        elif isinstance(value, bool):
            value = np.bool_(value)
        elif isinstance(value, int):
            value = np.int32(value)
        elif isinstance(value, np.ndarray) and value.dtype == np.float64:
            value = value.astype(np.float32)
        elif isinstance(value, np.ndarray) and value.dtype == np.int64:
            value = value.astype(np.int32)
        self.value = to_torch_array(value, "constant")

    def run(self, inputs, args, ctx):
        return [TensorList.make([self.value] * ctx.batch_size, device="cpu")]


@register("_to_gpu", devices=("mixed",), inputs=(1, 1), internal=True)
class ToGpu(Operator):
    """Copy a CPU batch to the GPU (`DataNode.gpu()`) in one transfer: the samples are
    gathered into one pinned buffer (a dense batch when they share a shape, else views of
    one flat buffer)."""

    def plan(self, inputs):
        spec = inputs[0]
        return [BatchSpec("gpu", spec.dtype, spec.ndim, spec.layout)], self.step

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        if not len(batch):
            return [TensorList.make([], batch.layout(), device="gpu")]
        return [_upload(batch, ctx.cuda_device)]


def _upload(batch, device):
    """The batch on `device`: one dense tensor, or views of one flat buffer."""
    from ..kernels.pack import pack  # loads the extension on first use

    same = dict(layout=batch.layout(), device="gpu", source_info=batch.source_info)
    dense = batch.dense_tensor()
    if dense is not None:
        return TensorList.make((dense if dense.is_pinned() else dense.pin_memory()).to(device, non_blocking=True),
                               **same)
    samples = batch.as_torch_list()
    try:
        staged, shapes = pack(samples, pin_memory=True)
    except (ValueError, TypeError):  # samples of different ndim or dtype: one copy each
        return TensorList.make([s.pin_memory().to(device, non_blocking=True) for s in samples], **same)
    return TensorList.from_flat(staged.to(device, non_blocking=True), shapes.numpy(), **same)


@register("_to_cpu", devices=("gpu",), inputs=(1, 1), internal=True)
class ToCpu(Operator):
    """Copy a GPU batch to the host (`DataNode.cpu()`) in one transfer on the current stream
    (the pipeline's), into pinned memory, and wait for it: CPU operators read the batch next.
    The node runs in the GPU stage; its output is CPU data (graph.OpNode)."""

    def plan(self, inputs):
        spec = inputs[0]
        return [BatchSpec("cpu", spec.dtype, spec.ndim, spec.layout)], self.step

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        if not len(batch):
            return [TensorList.make([], batch.layout(), device="cpu", source_info=batch.source_info)]
        return [_download(batch)]


def _download(batch):
    """The GPU batch in host memory: its samples gathered back to back on the GPU (no copy
    for a dense batch or one held flat), copied at once, then waited for."""
    same = dict(layout=batch.layout(), device="cpu", source_info=batch.source_info)
    stream = torch.cuda.current_stream(batch.buffers()[0].device)
    try:
        flat, shapes = batch.flat()
    except ValueError:  # samples of different ndim: one copy each
        samples = [_to_pinned(s) for s in batch.as_torch_list()]
        stream.synchronize()
        return TensorList.make(samples, **same)
    host = _to_pinned(flat)
    stream.synchronize()
    return TensorList.from_flat(host, shapes, **same)


def _to_pinned(t):
    """A pinned host tensor that `t` (on the GPU) is being copied into, asynchronously."""
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    return host.copy_(t, non_blocking=True)


@register("_shapes", devices=("cpu", "gpu"), inputs=(1, 1), internal=True, deprecated_names=("shapes",),
          deprecated_use="pipeline.DataNode.shape",
          args=[Arg("dtype", DTYPE, None, "Type of the shape values (default INT64)."),
                Arg("on_host", BOOL, False, "Shapes of GPU data as CPU data: read from the batch's metadata, "
                    "no copy or wait (graph.OpNode.gives_host_data).")])
class Shapes(Operator):
    """The shape of each sample as a 1D tensor: one [N, ndim] batch (the samples' ndim
    may differ only in a batch given as a list, which gets one tensor each)."""

    def plan(self, inputs):
        self.dtype = torch.int64 if self.spec.args["dtype"] is None else _torch_type(self.spec.args["dtype"])
        self.out_device = "cpu" if self.spec.args["on_host"] else self.spec.device
        return [BatchSpec(self.out_device, self.dtype, 1, "")], self.step

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        device = ctx.cuda_device if self.out_device == "gpu" else None
        try:
            shapes = torch.from_numpy(np.ascontiguousarray(batch.sample_shapes())).to(self.dtype)
            if device is not None:
                shapes = shapes.to(device)
        except ValueError:  # samples of different ndim
            shapes = [torch.tensor(list(s.shape), dtype=self.dtype, device=device) for s in batch.as_torch_list()]
        return [TensorList.make(shapes, device=self.out_device)]


@register("get_property", devices=("cpu", "gpu"), inputs=(1, 1),
          args=[Arg("key", STR, schema.REQUIRED, "Specifies which property is requested: \"source_info\" (a "
                    "string-like byte array telling where the sample came from, e.g. the file name, relative to "
                    "file_root, of a sample read by readers.file; empty where unknown) or \"layout\" (the data "
                    "layout of the tensor, as a byte array).", choices=("source_info", "layout"))])
class GetProperty(Operator):
    """Returns a property of the tensor passed as an input: per-sample metadata as 1D uint8 byte
    arrays (the type of the output depends on the `key` of the requested property)."""

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        if args["key"] == "layout":
            texts = [batch.layout()] * len(batch)
        else:
            texts = batch.source_info or [""] * len(batch)
        # A file name that is not UTF-8 (os.listdir's surrogate escapes) gives its own bytes.
        out = [torch.frombuffer(bytearray(t.encode("utf-8", "surrogateescape")), dtype=torch.uint8) if t else
               torch.empty(0, dtype=torch.uint8) for t in texts]
        if self.spec.device == "gpu":
            out = [s.to(ctx.cuda_device) for s in out]
        return [TensorList.make(out, device=self.spec.device)]


def _torch_type(dtype):
    from .. import types
    return types.to_torch_type(dtype)
