"""LZ4 decompression of byte tensors (decoders.inflate). The chunks of a batch, their places in
the input and in one output buffer are worked out with whole-array NumPy ops, checked as DALI
checks them, and decoded by one call of torchdali::lz4_decompress (CPU threads, or a GPU warp
per chunk). DALI has this operator on the GPU only; torchdali has it on both devices.

Where DALI differs: a malformed LZ4 stream, or one that expands to more than the output holds,
is an error naming the sample and chunk (DALI's GPU kernel leaves such output unchecked unless
`check_output_size`). On the GPU, reading the kernel's status waits for it."""
import numpy as np
import torch

from .. import types
from ..kernels.inflate import PROBLEMS, lz4_decompress
from ..schema import BOOL, DTYPE, INTS, LAYOUT, REQUIRED, STR, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator

_DTYPES = (types.BOOL, types.INT8, types.UINT8, types.INT16, types.UINT16, types.INT32, types.UINT32,
           types.INT64, types.UINT64, types.FLOAT, types.FLOAT16)
_OVERFLOW = 3  # lz4_decompress' status of a chunk whose data does not fit its output


def _non_negative(shape):
    return "extents of the output shape must be non-negative" if any(d < 0 for d in shape) else None


def _lz4(name):
    return None if name.lower() == "lz4" else "unknown inflate algorithm; only 'LZ4' is supported"


def _one_character(name):
    return None if len(name) == 1 else "must be a single character"


@register("decoders.inflate", devices=("cpu", "gpu"), inputs=(1, 1), deprecated_names=("experimental.inflate",), args=[
    Arg("shape", INTS, REQUIRED, "The shape of the output (inflated) chunk.", per_sample=True, check=_non_negative),
    Arg("dtype", DTYPE, types.UINT8, "The output (inflated) data type.", choices=_DTYPES),
    Arg("chunk_offsets", INTS, None, "Offsets within the input sample where the consecutive chunks begin. Without "
        "`chunk_sizes`, the chunks are densely packed and the last one ends with the sample.", per_sample=True),
    Arg("chunk_sizes", INTS, None, "Sizes of the input chunks. Without `chunk_offsets`, the chunks are densely "
        "packed and the first one starts at the beginning of the sample.", per_sample=True),
    Arg("algorithm", STR, "LZ4", "Algorithm to decode the data with; only 'LZ4' (the LZ4 block format, "
        "case-insensitive).", check=_lz4),
    Arg("layout", LAYOUT, "", "Layout of the output (inflated) chunk; with chunks, `sequence_axis_name` is put "
        "before it."),
    Arg("sequence_axis_name", LAYOUT, "F", "Name of the outer axis of a sample of several chunks (used only with "
        "`layout`).", check=_one_character),
    Arg("check_output_size", BOOL, False, "Accepted for compatibility: torchdali always checks that the data fits "
        "its output, an error otherwise."),
])
class Inflate(Operator):
    """Decompresses the input, a 1D uint8 tensor of compressed data per sample, to samples of `shape` and
    `dtype`. A sample may hold several independently compressed chunks (`chunk_offsets`, `chunk_sizes`):
    they decode into one output of shape [chunks, *shape]. Bytes past a chunk's decoded data are zero."""

    def plan(self, inputs):
        a = self.spec.args
        spec = inputs[0]
        if spec.dtype is not None and spec.dtype != torch.uint8:
            raise self._input_type_error(spec.dtype)
        if spec.ndim is not None and spec.ndim != 1:
            raise self._input_dims_error(spec.ndim)
        self.dtype = types.to_torch_type(a["dtype"])
        self.has_chunks = any(n in self.spec.arg_input_names or a.get(n) is not None
                              for n in ("chunk_offsets", "chunk_sizes"))
        self.layout = str(a["layout"])
        if self.layout and self.has_chunks:
            self.out_layout = str(a["sequence_axis_name"]) + self.layout
        else:
            self.out_layout = self.layout
        ndim = None
        if "shape" not in self.spec.arg_input_names:
            self._check_layout(len(a["shape"]))
            ndim = len(a["shape"]) + self.has_chunks
        device = "cpu" if self.spec.device == "cpu" else "gpu"
        return [BatchSpec(device, self.dtype, ndim, self.out_layout)], self.step

    def _input_type_error(self, dtype):
        return self.error("the input must be compressed data, a 1D tensor of bytes (uint8) per sample; got type "
                          f"{types.to_dali_type(dtype).name}", TypeError)

    def _input_dims_error(self, ndim):
        return self.error(f"the input must be compressed data, a 1D tensor of bytes per sample; got {ndim} dims",
                          ValueError)

    def _check_layout(self, chunk_dims):
        if self.layout and len(self.layout) != chunk_dims:
            raise self.error(f"the layout '{self.layout}' has {len(self.layout)} dims but the output shape (of a "
                             f"chunk) has {chunk_dims}", ValueError)

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        device = "cpu" if self.spec.device == "cpu" else "gpu"
        if len(batch) == 0:
            return [TensorList.make([], self.out_layout, device=device)]
        data, in_shapes = batch.flat()
        if data.dtype != torch.uint8:
            raise self._input_type_error(data.dtype)
        if in_shapes.shape[1] != 1:
            raise self._input_dims_error(in_shapes.shape[1])
        sizes = in_shapes[:, 0]
        if (sizes == 0).any():
            i = int(np.argmax(sizes == 0))
            raise self.error(f"input sample {i} is empty; each sample must hold compressed data", ValueError,
                             sample=i)
        shapes = self._shapes(args, len(sizes))
        self._check_layout(shapes.shape[1])
        counts, offsets, lengths = self._chunks(args, sizes)
        if (np.prod(shapes, axis=1, dtype=np.float64) * counts).sum() * self.dtype.itemsize >= 2.0 ** 62:
            raise self.error(f"outputs of shape {shapes[0].tolist()} (sample 0) and type "
                             f"{types.to_dali_type(self.dtype).name} would take more than 2^62 bytes", ValueError)
        sample = np.repeat(np.arange(len(sizes)), counts)
        volumes = np.prod(shapes, axis=1, dtype=np.int64)
        out_bytes = volumes[sample] * self.dtype.itemsize
        out_offsets = np.cumsum(out_bytes) - out_bytes
        starts = np.cumsum(sizes) - sizes
        table = torch.from_numpy(np.stack([starts[sample] + offsets, lengths, out_offsets, out_bytes], 1))
        out = torch.empty(int((volumes * counts).sum()), dtype=self.dtype, device=data.device)
        status = lz4_decompress(data, table, out.view(torch.uint8))
        self._check_status(status, sample, counts, out_bytes, shapes)
        out_shapes = np.concatenate([counts[:, None], shapes], 1) if self.has_chunks else shapes
        return [TensorList.from_flat(out, out_shapes, self.out_layout, device=device)]

    def _shapes(self, args, n):
        """Each sample's chunk shape, int64 [n, ndim]."""
        if not args.is_per_sample("shape"):
            row = np.asarray(args["shape"], np.int64).reshape(1, -1)
            return np.broadcast_to(row, (n, row.shape[1]))
        values = args.batch("shape")
        if isinstance(values, list):
            raise self.error("argument input 'shape' gives a different number of extents per sample; every "
                             "sample's shape must have the same number", ValueError)
        return np.asarray(values, np.int64).reshape(n, -1)

    def _chunks(self, args, sizes):
        """Chunks per sample [N], and each chunk's offset and size in its sample [K], checked and completed
        as DALI does (offsets alone: each chunk ends where the next begins, the last with the sample; sizes
        alone: the chunks follow each other from the sample's start)."""
        n = len(sizes)
        offsets, lengths = _values(args, "chunk_offsets", n), _values(args, "chunk_sizes", n)
        if offsets is None and lengths is None:
            return np.ones(n, np.int64), np.zeros(n, np.int64), sizes.astype(np.int64)
        if offsets is not None:
            counts, off = offsets
            sample = np.repeat(np.arange(n), counts)
            self._refuse(off < 0, sample, lambda k, i: f"chunk_offsets must be non-negative; got {off[k]} for "
                         f"sample {i}")
            self._refuse(off >= sizes[sample], sample, lambda k, i: f"chunk offset {off[k]} of sample {i} points "
                         f"past its last byte (the sample has {sizes[i]} bytes)")
        if lengths is not None:
            counts, length = lengths
            sample = np.repeat(np.arange(n), counts)
            self._refuse(length <= 0, sample, lambda k, i: f"chunk_sizes must be positive; got {length[k]} for "
                         f"sample {i}")
            self._refuse(length > sizes[sample], sample, lambda k, i: f"chunk size {length[k]} of sample {i} "
                         f"exceeds the sample's {sizes[i]} bytes")
        if offsets is not None and lengths is not None:
            differ = offsets[0] != lengths[0]
            if differ.any():
                i = int(np.argmax(differ))
                raise self.error(f"sample {i} has {offsets[0][i]} chunk_offsets but {lengths[0][i]} chunk_sizes; "
                                 "give as many of each", ValueError, sample=i)
            self._refuse(off + length > sizes[sample], sample, lambda k, i: f"the chunk of sample {i} at offset "
                         f"{off[k]} of size {length[k]} runs past the sample's end ({sizes[i]} bytes)")
            return counts, off, length
        first = np.cumsum(counts) - counts  # each sample's first chunk
        if offsets is not None:
            ends = np.append(off[1:], 0)
            last = first[counts > 0] + counts[counts > 0] - 1
            ends[last] = sizes[counts > 0]
            length = ends - off
            self._refuse(length <= 0, sample, lambda k, i: f"chunk_offsets of sample {i} must be strictly increasing "
                         "when chunk_sizes is not given (a chunk ends where the next begins)")
            return counts, off, length
        before = np.concatenate([[0], np.cumsum(length)])
        off = before[:-1] - np.repeat(before[first], counts)
        totals = before[first + counts] - before[first]
        over = totals > sizes
        if over.any():
            i = int(np.argmax(over))
            raise self.error(f"the chunk_sizes of sample {i} add up to {totals[i]} bytes, more than the sample's "
                             f"{sizes[i]}", ValueError, sample=i)
        return counts, off, length

    def _refuse(self, bad, sample, message):
        """A ValueError with message(k, sample) for the first chunk k where `bad`, naming its sample."""
        if bad.any():
            k = int(np.argmax(bad))
            raise self.error(message(k, int(sample[k])), ValueError, sample=int(sample[k]))

    def _check_status(self, status, sample, counts, out_bytes, shapes):
        """An error naming the first chunk the kernel could not decode (on the GPU: after waiting for it)."""
        bad = torch.nonzero(status).flatten().tolist()
        if not bad:
            return
        k = bad[0]
        code, i = int(status[k]), int(sample[k])
        where = f"sample {i}" + (f", chunk {k - int(np.sum(counts[:i]))}" if self.has_chunks else "")
        problem = PROBLEMS[code]
        if code == _OVERFLOW:
            problem += (f" ({out_bytes[k]} bytes: shape {shapes[i].tolist()} of "
                        f"{types.to_dali_type(self.dtype).name}); check the `shape` and `dtype` arguments")
        raise self.error(f"{where}: {problem}", RuntimeError, sample=i)


def _values(args, name, n):
    """A list argument given per sample, as (values per sample [n], all values back to back), or None."""
    values = args.batch(name)
    if values is None:
        return None
    if not args.is_per_sample(name):
        row = np.asarray(values, np.int64).reshape(-1)
        return np.full(n, len(row), np.int64), np.tile(row, n)
    if isinstance(values, list):  # a different number per sample
        rows = [np.asarray(v, np.int64).reshape(-1) for v in values]
        return np.array([len(r) for r in rows], np.int64), np.concatenate(rows)
    values = np.asarray(values, np.int64).reshape(n, -1)
    return np.full(n, values.shape[1], np.int64), values.reshape(-1)
