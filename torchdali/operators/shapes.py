"""Operators on the shape of samples and on the order of a batch.

reshape, reinterpret, squeeze and expand_dims copy nothing: the new sample shapes are computed
for the whole batch as one [N, ndim] array, and the output views the input's memory (a dense
batch, or one held as a flat buffer, as one buffer). stack and cat join dense batches in one torch
call (sample by sample otherwise); element_extract, sequence_rearrange and permute_batch pick
frames or samples; batch_permutation draws the indices that permute_batch takes."""
import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, FLOATS, INT, INTS, LAYOUT, REQUIRED, STR, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator, RandomOperator


def _out_device(op):
    return "cpu" if op.spec.device == "cpu" else "gpu"


def _on_device(op, batch, ctx):
    """The batch where the operator computes: CPU data given to a GPU operator is copied there."""
    if op.spec.device != "gpu" or batch.device == "gpu":
        return batch
    dense = batch.dense_tensor()
    data = dense.to(ctx.cuda_device) if dense is not None else [s.to(ctx.cuda_device) for s in batch.as_torch_list()]
    return TensorList.make(data, batch.layout(), device="gpu", source_info=batch.source_info)


def _shapes_of(op, batch, what="the input"):
    """[N, ndim] sample shapes (a copy); an error where the samples differ in ndim."""
    try:
        return np.array(batch.sample_shapes(), np.int64)
    except ValueError as e:
        raise op.error(f"{what}: {e}", ValueError) from None


def _first(mask):
    return int(np.argmax(mask))


def _retyped(flat, dtype):
    """A 1D tensor's bytes as elements of `dtype` (the tensor itself for None or its own type)."""
    if dtype is None or dtype == flat.dtype:
        return flat
    if flat.storage_offset() * flat.element_size() % dtype.itemsize:
        flat = flat.clone()  # torch views bytes as a wider type only at an aligned offset
    return flat.view(dtype)


def _viewed(batch, shapes, layout, dtype=None):
    """The batch's data seen with the sample shapes [N, k] (and element type `dtype`): views of its
    memory, one buffer for a dense batch or one held flat."""
    dense, held = batch.dense_tensor(), batch.held_flat()
    if dense is not None or held is not None:
        flat = held[0] if held is not None else dense.reshape(-1)
        return TensorList.from_flat(_retyped(flat, dtype), shapes, layout, device=batch.device)
    samples = [_retyped(s.reshape(-1), dtype).view(shape) for s, shape in zip(batch.as_torch_list(), shapes.tolist())]
    return TensorList.make(samples, layout, device=batch.device)


_TOO_LARGE = 2.0 ** 62  # extents and volumes beyond what int64 arithmetic holds


def _finite(values):
    return None if np.isfinite(values).all() else "extents must be finite"


def _numeric_type(dtype):
    try:
        types.to_torch_type(dtype)
    except (TypeError, ValueError, KeyError):
        return "is not a numeric type"
    return None


_RESHAPE_ARGS = [
    Arg("shape", INTS, None, "The output shape; one extent may be negative: it takes what the volume leaves.",
        per_sample=True),
    Arg("rel_shape", FLOATS, None, "The output shape relative to the input's: out[i] = in[i] * rel_shape[i] "
        "(in[src_dims[i]] with `src_dims`), rounded; one extent may be negative (the rest of the volume), "
        "a negative last one may add a dim.", per_sample=True, check=_finite),
    Arg("src_dims", INTS, None, "The input dims the output's are made of (-1: a new dim of extent 1), to reorder, "
        "drop or add dims of extent 1; with `rel_shape`, which input extent each relative extent scales."),
    Arg("layout", LAYOUT, None, "The output layout; not given: the input's where the number of dims is kept, "
        "else none ('' clears it)."),
]


@register("reshape", devices=("cpu", "gpu"), inputs=(1, 2), input_names=("data", "shape_input"),
          args=_RESHAPE_ARGS)
class Reshape(Operator):
    """Treat the samples as having another shape and/or layout, without copying them. The shape
    comes from `shape`, `rel_shape`, `src_dims` or a second input (a 1D integer shape per
    sample, on the CPU)."""

    noop = "arguments specify neither a new shape nor a layout"

    def plan(self, inputs):
        a = self.spec.args
        self.new_type = self.output_type()
        sources = [n for n in ("shape", "rel_shape") if a.get(n) is not None or n in self.spec.arg_input_names]
        sources += ["input"] if len(inputs) == 2 else []
        if len(sources) > 1:
            raise self.error("the shape input, `shape` and `rel_shape` are mutually exclusive; give one", ValueError)
        self.source = sources[0] if sources else None
        if self.source is None and a["src_dims"] is None and a["layout"] is None and self.new_type is None:
            raise self.error(f"is a no-op: {self.noop}", ValueError)
        if self.source == "input" and inputs[1].device != "cpu":
            raise self.error("the shape input must be CPU data", ValueError)
        self.src_dims = None if a["src_dims"] is None else np.array(a["src_dims"], np.int64)
        self.constant = self._constant_shape()
        spec = inputs[0]
        if self.src_dims is not None and spec.ndim is not None:
            self._check_src_dims(spec.ndim)
        ndim = self._planned_ndim(spec.ndim)
        layout = None if ndim is None or spec.layout is None else self._layout(spec.layout, spec.ndim, ndim)
        return [BatchSpec(_out_device(self), self.new_type or spec.dtype, ndim, layout)], self.step

    def output_type(self):
        """The torch type the samples are viewed as (None: theirs)."""
        return None

    def _constant_shape(self):
        """`shape` or `rel_shape` given as a constant, checked (one negative extent, no zero), or None."""
        if self.source not in ("shape", "rel_shape") or self.source in self.spec.arg_input_names:
            return None
        values = self.spec.args[self.source]
        if self.source == "rel_shape" and not values:
            raise self.error("argument 'rel_shape' is an empty list", ValueError)
        if sum(v < 0 for v in values) > 1:
            raise self.error(f"argument '{self.source}' = {values}: only one extent may be negative", ValueError)
        if any(v == 0 for v in values):
            raise self.error(f"argument '{self.source}' = {values}: an extent of 0 is not allowed", ValueError)
        if self.source == "rel_shape" and self.src_dims is not None and len(self.src_dims) != len(values):
            raise self.error(f"`src_dims` and `rel_shape` have different lengths: {len(self.src_dims)} vs "
                             f"{len(values)}", ValueError)
        return np.array(values, np.float64 if self.source == "rel_shape" else np.int64)

    def _planned_ndim(self, in_ndim):
        if self.constant is not None:
            return len(self.constant)
        if self.source is None:
            return in_ndim if self.src_dims is None else len(self.src_dims)
        if self.source == "rel_shape" and self.src_dims is not None:
            return len(self.src_dims)
        return None

    def _check_src_dims(self, ndim):
        bad = (self.src_dims < -1) | (self.src_dims >= ndim)
        if bad.any():
            d = _first(bad)
            raise self.error(f"src_dims[{d}] = {self.src_dims[d]} is out of range: give -1 (a new dim) or a dim of the "
                             f"input, 0..{ndim - 1}", ValueError)

    def _layout(self, in_layout, in_ndim, out_ndim):
        layout = self.spec.args["layout"]
        if layout is None:
            return in_layout if in_ndim == out_ndim else ""
        if layout and len(layout) != out_ndim:
            raise self.error(f"layout '{layout}' does not match the output's {out_ndim} dims", ValueError)
        return str(layout)

    def step(self, inputs, args, ctx):
        batch = _on_device(self, inputs[0], ctx)
        in_shapes = _shapes_of(self, batch)
        if self.src_dims is not None:
            self._check_src_dims(in_shapes.shape[1])
        in_type = types.to_torch_type(batch.dtype)
        out_type = self.new_type or in_type
        if self.source is None:
            shapes = self._kept_shapes(in_shapes, in_type.itemsize, out_type.itemsize)
        else:
            requested = self._requested(inputs, args, in_shapes)
            shapes = self._resolved(requested, in_shapes, in_type.itemsize, out_type.itemsize)
        layout = self._layout(batch.layout(), in_shapes.shape[1], shapes.shape[1])
        return [_viewed(batch, shapes, layout, self.new_type)]

    def _picked(self, in_shapes):
        """The input extents `src_dims` names (1 for -1), [N, len(src_dims)]."""
        padded = np.concatenate([in_shapes, np.ones((len(in_shapes), 1), np.int64)], axis=1)
        return padded[:, self.src_dims]

    def _kept_shapes(self, in_shapes, in_size, out_size):
        """No shape given: the input's (or its dims picked by `src_dims`), the innermost extent scaled to
        a new element size."""
        shapes = in_shapes if self.src_dims is None else self._picked(in_shapes)
        volumes, in_volumes = shapes.prod(axis=1), in_shapes.prod(axis=1)
        if (volumes != in_volumes).any():
            i = _first(volumes != in_volumes)
            raise self.error(f"sample {i}: src_dims {self.src_dims.tolist()} give a shape of {volumes[i]} elements, "
                             f"the input's {tuple(in_shapes[i].tolist())} has {in_volumes[i]}", ValueError, sample=i)
        if in_size == out_size:
            return shapes
        if shapes.shape[1] == 0:
            raise self.error("scalar samples have no innermost dim to reinterpret; give a `shape`", ValueError)
        inner = shapes[:, -1] * in_size
        if (inner % out_size).any():
            i = _first(inner % out_size)
            raise self.error(f"sample {i}: the innermost dim ({shapes[i, -1]} elements, {inner[i]} bytes) is not a "
                             f"multiple of the output type's {out_size} bytes", ValueError, sample=i)
        shapes[:, -1] = inner // out_size
        return shapes

    def _requested(self, inputs, args, in_shapes):
        """The shapes asked for, [N, k], -1 where an extent takes the rest of the volume."""
        n = len(in_shapes)
        if self.source == "rel_shape":
            rel = self.constant if self.constant is not None else args.rows("rel_shape", n)
            return self._relative(np.broadcast_to(rel, (n, rel.shape[-1])), in_shapes)
        if self.constant is not None:
            return np.broadcast_to(np.where(self.constant < 0, -1, self.constant), (n, len(self.constant)))
        rows = self._shape_input(inputs[1], n) if self.source == "input" else self._shape_argument(args)
        doubled = (rows < 0).sum(axis=1) > 1
        if doubled.any():
            i = _first(doubled)
            raise self.error(f"sample {i}: the shape {rows[i].tolist()} has more than one negative extent", ValueError,
                             sample=i)
        return np.where(rows < 0, -1, rows)

    def _shape_argument(self, args):
        """The `shape` argument input as [N, k]: integers, as many per sample."""
        dtype = args.given("shape").dtype
        if types.to_torch_type(dtype).is_floating_point:
            raise self.error(f"argument input 'shape' must have an integer type; got {dtype}", TypeError)
        values = args.batch("shape")
        if isinstance(values, list):
            raise self.error("argument input 'shape': the samples give different numbers of dims; all outputs must "
                             "have the same number of dims", ValueError)
        return values

    def _shape_input(self, batch, n):
        """The second input's shapes as [n, k] int64: 1D integer samples of one length (or, for a batch of
        one, a single [1, k] sample)."""
        dtype = types.to_torch_type(batch.dtype)
        if dtype.is_floating_point or dtype == torch.bool:
            raise self.error(f"the shape input must have an integer type; got {batch.dtype}", TypeError)
        samples = [s.cpu() for s in batch.as_torch_list()]
        if n == 1 and samples[0].dim() == 2 and len(samples[0]) == 1:
            samples = [samples[0][0]]
        for i, s in enumerate(samples):
            if s.dim() != 1:
                raise self.error(f"the shape input's sample {i} has shape {tuple(s.shape)}; give a 1D list of extents",
                                 ValueError, sample=i)
        lengths = {len(s) for s in samples}
        if len(lengths) > 1:
            raise self.error(f"the shape input's samples differ in length ({sorted(lengths)}); all outputs must have "
                             "the same number of dims", ValueError)
        return torch.stack(samples).to(torch.int64).numpy() if samples else np.zeros((0, 0), np.int64)

    def _relative(self, rel, in_shapes):
        """Relative extents (negative: the rest of the volume) times the input's, rounded half away from 0
        in float32, as DALI."""
        n, k = rel.shape
        nd = in_shapes.shape[1]
        if self.src_dims is not None:
            if len(self.src_dims) != k:
                raise self.error(f"`src_dims` and `rel_shape` have different lengths: {len(self.src_dims)} vs {k}",
                                 ValueError)
            base = self._picked(in_shapes)
        else:
            if k > nd and not (k == nd + 1 and (rel[:, -1] < 0).all()):
                raise self.error(f"`rel_shape` has more elements ({k}) than the input has dims ({nd}); add dims with "
                                 "`src_dims` (or a negative last extent)", ValueError)
            base = np.ones((n, k), np.int64)
            base[:, :min(k, nd)] = in_shapes[:, :k]
        doubled = (rel < 0).sum(axis=1) > 1
        if doubled.any():
            i = _first(doubled)
            raise self.error(f"sample {i}: `rel_shape` {rel[i].tolist()} has more than one negative extent",
                             ValueError, sample=i)
        scaled = (rel.astype(np.float32) * base.astype(np.float32)).astype(np.float64)
        if (scaled >= _TOO_LARGE).any():
            i = _first((scaled >= _TOO_LARGE).any(axis=1))
            raise self.error(f"sample {i}: `rel_shape` {rel[i].tolist()} gives extents too large", ValueError, sample=i)
        return np.where(rel < 0, -1, np.floor(scaled + 0.5)).astype(np.int64)

    def _resolved(self, requested, in_shapes, in_size, out_size):
        """The requested shapes with the negative extent filled in, checked to hold the input's bytes."""
        shapes = np.array(requested, np.int64)
        wild = shapes < 0
        huge = np.where(wild, 1, shapes).astype(np.float64).prod(axis=1) * out_size >= _TOO_LARGE
        if huge.any():
            i = _first(huge)
            raise self.error(f"sample {i}: {self._source_name} {requested[i].tolist()} is too large", ValueError,
                             sample=i)
        in_bytes = in_shapes.prod(axis=1) * in_size
        others = np.where(wild, 1, shapes).prod(axis=1)
        stuck = wild.any(axis=1) & (others == 0)
        if stuck.any():
            i = _first(stuck)
            raise self.error(f"sample {i}: cannot infer the extent of dim {_first(wild[i])} of {self._source_name} "
                             f"{requested[i].tolist()}: the other extents' volume is 0", ValueError, sample=i)
        fill = in_bytes // np.maximum(others * out_size, 1)
        shapes = np.where(wild, fill[:, None], shapes)
        out_bytes = shapes.prod(axis=1) * out_size
        if (out_bytes != in_bytes).any():
            i = _first(out_bytes != in_bytes)
            raise self.error(f"sample {i}: the input and output must occupy the same bytes; input shape "
                             f"{tuple(in_shapes[i].tolist())} ({in_bytes[i]} bytes), {self._source_name} "
                             f"{requested[i].tolist()} ({out_bytes[i]} bytes)", ValueError, sample=i)
        return shapes

    @property
    def _source_name(self):
        return "the shape input" if self.source == "input" else f"`{self.source}`"


@register("reinterpret", devices=("cpu", "gpu"), inputs=(1, 2), input_names=("data", "shape_input"),
          args=_RESHAPE_ARGS + [Arg("dtype", DTYPE, None, "The element type the bytes are read as; without a "
                                    "shape, the innermost extent is scaled to the new element size.",
                                    check=_numeric_type)])
class Reinterpret(Reshape):
    """Treat the samples as having another element type, shape and/or layout, without copying them
    (the bytes are read as `dtype`)."""

    noop = "arguments specify neither a new shape, a layout nor a type"

    def output_type(self):
        dtype = self.spec.args["dtype"]
        return None if dtype is None else types.to_torch_type(dtype)


@register("squeeze", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("axes", INTS, None, "Indices of the dims to remove (0..ndim-1)."),
    Arg("axis_names", LAYOUT, None, "Layout letters of the dims to remove (not with `axes`)."),
])
class Squeeze(Operator):
    """Remove dims of extent 1 (or of any extent where the sample is empty before and after),
    without copying; their letters leave the layout."""

    def plan(self, inputs):
        axes, names = self.spec.args["axes"], self.spec.args["axis_names"]
        if (axes is None) == (names is None):
            raise self.error("give either `axes` or `axis_names`" if axes is None else
                             "`axes` and `axis_names` are mutually exclusive; give one", ValueError)
        if axes is not None and len(set(axes)) != len(axes):
            raise self.error(f"argument 'axes' = {axes} names a dim more than once", ValueError)
        if axes is not None and min(axes, default=0) < 0:
            raise self.error(f"argument 'axes' = {axes}: negative axes are not allowed", ValueError)
        spec = inputs[0]
        ndim = layout = None
        if spec.ndim is not None and spec.layout is not None:
            kept, layout = self._kept(spec.layout, spec.ndim)
            ndim = len(kept)
        return [BatchSpec(_out_device(self), spec.dtype, ndim, layout)], self.step

    def _kept(self, layout, ndim):
        """(the dims kept, the output layout)."""
        axes, names = self.spec.args["axes"], self.spec.args["axis_names"]
        if axes is None:
            missing = [c for c in names if c not in layout]
            if missing:
                raise self.error(f"axis '{missing[0]}' of `axis_names` is not in the input layout '{layout}'",
                                 ValueError)
            kept = [d for d, c in enumerate(layout) if c not in names]
        else:
            if max(axes, default=-1) >= ndim:
                raise self.error(f"argument 'axes' = {axes} is out of range for inputs of {ndim} dims", ValueError)
            kept = [d for d in range(ndim) if d not in axes]
        return kept, "".join(layout[d] for d in kept) if layout else ""

    def step(self, inputs, args, ctx):
        batch = _on_device(self, inputs[0], ctx)
        in_shapes = _shapes_of(self, batch)
        kept, layout = self._kept(batch.layout(), in_shapes.shape[1])
        shapes = in_shapes[:, kept]
        changed = shapes.prod(axis=1) != in_shapes.prod(axis=1)
        if changed.any():
            i = _first(changed)
            removed = [d for d in range(in_shapes.shape[1]) if d not in kept]
            given = "axes" if self.spec.args["axes"] is not None else "axis_names"
            raise self.error(f"sample {i} of shape {tuple(in_shapes[i].tolist())}: the dims {removed} that `{given}` "
                             "names are not all of extent 1", ValueError, sample=i)
        return [_viewed(batch, shapes, layout)]


@register("expand_dims", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("axes", INTS, REQUIRED, "Indices, in the output, of the new dims of extent 1."),
    Arg("new_axis_names", LAYOUT, "", "Layout letters of the new dims, one per axis; none: the output has no "
        "layout (unless `axes` is empty)."),
])
class ExpandDims(Operator):
    """Insert dims of extent 1, without copying."""

    def plan(self, inputs):
        axes, names = self.spec.args["axes"], self.spec.args["new_axis_names"]
        if min(axes, default=0) < 0:
            raise self.error(f"argument 'axes' = {axes}: negative axes are not allowed", ValueError)
        if len(set(axes)) != len(axes):
            raise self.error(f"argument 'axes' = {axes} names a dim more than once", ValueError)
        if names and len(names) != len(axes):
            raise self.error(f"`new_axis_names` '{names}' has {len(names)} names for {len(axes)} axes", ValueError)
        spec = inputs[0]
        ndim = None if spec.ndim is None else self._out_ndim(spec.ndim)
        layout = None if ndim is None or spec.layout is None else self._layout(spec.layout, spec.ndim)
        return [BatchSpec(_out_device(self), spec.dtype, ndim, layout)], self.step

    def _out_ndim(self, ndim):
        axes = self.spec.args["axes"]
        out = ndim + len(axes)
        if max(axes, default=-1) >= out:
            raise self.error(f"argument 'axes' = {axes}: inputs of {ndim} dims become {out} dims, too few for these "
                             "axes", ValueError)
        return out

    def _layout(self, in_layout, ndim):
        axes, names = self.spec.args["axes"], self.spec.args["new_axis_names"]
        if not names:
            return in_layout if not axes else ""
        if not in_layout and ndim > 0:
            raise self.error("`new_axis_names` needs an input with a layout", ValueError)
        out = list(in_layout)
        for axis, name in sorted(zip(axes, names)):
            out.insert(axis, name)
        return "".join(out)

    def step(self, inputs, args, ctx):
        batch = _on_device(self, inputs[0], ctx)
        in_shapes = _shapes_of(self, batch)
        ndim = in_shapes.shape[1]
        out_ndim = self._out_ndim(ndim)
        old = np.setdiff1d(np.arange(out_ndim), self.spec.args["axes"])
        shapes = np.ones((len(in_shapes), out_ndim), np.int64)
        shapes[:, old] = in_shapes
        return [_viewed(batch, shapes, self._layout(batch.layout(), ndim))]


class _Join(Operator):
    """stack and cat: inputs of one type and number of dims joined sample by sample. The layouts
    come from input 0's, as in DALI (the other inputs' layouts are not looked at). A subclass gives
    `new_axis`, `join(tensors, dim)`, `_resolve(layout, ndim)` (the join axis and the output
    layout) and `_check_shapes(shapes, axis)`."""

    new_axis = True

    def plan(self, inputs):
        name = self.spec.args["axis_name"]
        if name is not None and len(name) != 1:
            raise self.error(f"`axis_name` must be a single character; got '{name}'", ValueError)
        first = inputs[0]
        for k, spec in enumerate(inputs[1:], 1):
            if None not in (spec.dtype, first.dtype) and spec.dtype != first.dtype or \
                    None not in (spec.ndim, first.ndim) and spec.ndim != first.ndim:
                raise self._mismatch(k, first.dtype, first.ndim, spec.dtype, spec.ndim)
        ndim = layout = None
        if first.ndim is not None:
            ndim = first.ndim + self.new_axis
            layout = None if first.layout is None else self._resolve(first.layout, first.ndim)[1]
        return [BatchSpec(_out_device(self), first.dtype, ndim, layout)], self.step

    def _mismatch(self, k, dtype, ndim, other_dtype, other_ndim):
        return self.error(f"all inputs must have the same type and number of dims; input 0: {dtype}, {ndim} dims, "
                          f"input {k}: {other_dtype}, {other_ndim} dims", ValueError)

    def step(self, inputs, args, ctx):
        batches = [_on_device(self, b, ctx) for b in inputs]
        shapes = [_shapes_of(self, b, f"input {k}") for k, b in enumerate(batches)]
        dtype, ndim = batches[0].dtype, shapes[0].shape[1]
        for k, (b, s) in enumerate(zip(batches[1:], shapes[1:]), 1):
            if b.dtype != dtype or s.shape[1] != ndim:
                raise self._mismatch(k, dtype, ndim, b.dtype, s.shape[1])
        axis, layout = self._resolve(batches[0].layout(), ndim)
        batches, shapes = self._joined_inputs(batches, shapes)
        self._check_shapes(shapes, axis)
        dense = [b.dense_tensor() for b in batches]
        if all(d is not None for d in dense):
            data = self.join(dense, axis + 1)
        else:
            data = [self.join(list(samples), axis) for samples in zip(*(b.as_torch_list() for b in batches))]
        return [TensorList.make(data, layout, device=batches[0].device)]

    def _joined_inputs(self, batches, shapes):
        return batches, shapes


@register("stack", devices=("cpu", "gpu"), inputs=(1, 999), args=[
    Arg("axis", INT, 0, "Where the new axis goes in the output, -ndim..ndim (negative: from the back); ndim "
        "interleaves the inputs' values."),
    Arg("axis_name", STR, None, "The new axis's layout letter (the output has no layout without it)."),
])
class Stack(_Join):
    """Join the inputs along a new axis: sample i of the output holds sample i of every input (of one
    shape)."""

    join = staticmethod(torch.stack)

    def _resolve(self, layout, ndim):
        axis, name = self.spec.args["axis"], self.spec.args["axis_name"]
        if not -ndim <= axis <= ndim:
            raise self.error(f"axis {axis} is out of range for {ndim}-D inputs: give {-ndim}..{ndim}", ValueError)
        axis += ndim + 1 if axis < 0 else 0
        if name is None:
            return axis, ""
        if not layout and ndim > 0:
            raise self.error("`axis_name` with non-scalar inputs needs input 0 to have a layout", ValueError)
        return axis, layout[:axis] + name + layout[axis:]

    def _check_shapes(self, shapes, axis):
        for k, s in enumerate(shapes[1:], 1):
            differ = (s != shapes[0]).any(axis=1)
            if differ.any():
                i = _first(differ)
                raise self.error(f"sample {i}: stacked tensors must have one shape; input 0 has "
                                 f"{tuple(shapes[0][i].tolist())}, input {k} {tuple(s[i].tolist())}", ValueError,
                                 sample=i)


@register("cat", devices=("cpu", "gpu"), inputs=(1, 999), args=[
    Arg("axis", INT, None, "The axis to join along, -ndim..ndim-1 (negative: from the back); 0 when neither "
        "`axis` nor `axis_name` is given."),
    Arg("axis_name", STR, None, "The layout letter of the axis to join along (not with `axis`)."),
])
class Cat(_Join):
    """Join the inputs along an existing axis: their samples may differ in extent only along it.
    Inputs whose whole batch is empty are left out, as in DALI."""

    new_axis = False
    join = staticmethod(torch.cat)

    def _resolve(self, layout, ndim):
        axis, name = self.spec.args["axis"], self.spec.args["axis_name"]
        if axis is not None and name is not None:
            raise self.error("`axis` and `axis_name` are mutually exclusive; give one", ValueError)
        if name is not None:
            if name not in layout:
                raise self.error(f"`axis_name` '{name}' is not in the layout '{layout}' of input 0", ValueError)
            return layout.index(name), layout
        axis = axis or 0
        if ndim == 0:
            raise self.error("scalar samples have no axis to join along; stack them instead", ValueError)
        if not -ndim <= axis < ndim:
            raise self.error(f"axis {axis} is out of range for {ndim}-D inputs: give {-ndim}..{ndim - 1}", ValueError)
        return axis + ndim if axis < 0 else axis, layout

    def _joined_inputs(self, batches, shapes):
        """Those not empty as a whole batch (input 0 alone where all are)."""
        keep = [k for k, s in enumerate(shapes) if s.prod(axis=1).sum() > 0] or [0]
        return [batches[k] for k in keep], [shapes[k] for k in keep]

    def _check_shapes(self, shapes, axis):
        for k, s in enumerate(shapes[1:], 1):
            differ = (np.delete(s, axis, axis=1) != np.delete(shapes[0], axis, axis=1)).any(axis=1)
            if differ.any():
                i = _first(differ)
                raise self.error(f"sample {i}: joined tensors may differ in extent only along axis {axis}; "
                                 f"{tuple(shapes[0][i].tolist())} and {tuple(s[i].tolist())}", ValueError, sample=i)


def _sequence_shapes(op, batch, what):
    """The shapes of a batch of sequences (the frames first): at least 2 dims, a layout starting with 'F'
    or none."""
    shapes = _shapes_of(op, batch)
    layout = batch.layout()
    if layout and not layout.startswith("F"):
        raise op.error(f"the input layout '{layout}' is not a sequence's: it must start with 'F'", ValueError)
    if shapes.shape[1] < 2:
        raise op.error(f"the input needs at least 2 dims (the {what} and theirs); got {shapes.shape[1]}", ValueError)
    return shapes


def _check_sequence_spec(op, spec):
    if spec.layout and not spec.layout.startswith("F"):
        raise op.error(f"the input layout '{spec.layout}' is not a sequence's: it must start with 'F'", ValueError)
    if spec.ndim is not None and spec.ndim < 2:
        raise op.error(f"the input needs at least 2 dims (the frames and theirs); got {spec.ndim}", ValueError)


def _element_map_problem(indices):
    if not indices:
        return "give at least one element"
    return "negative indices are not allowed" if min(indices) < 0 else None


@register("element_extract", devices=("cpu", "gpu"), inputs=(1, 1),
          outputs=lambda args, num_inputs: len(args["element_map"]), args=[
              Arg("element_map", INTS, REQUIRED, "The frames to extract, one output each.",
                  check=_element_map_problem)])
class ElementExtract(Operator):
    """Frames of sequences (the first dim) as separate outputs: output k holds frame element_map[k]
    of every sample, with the layout less its 'F'."""

    def plan(self, inputs):
        spec = inputs[0]
        _check_sequence_spec(self, spec)
        ndim = None if spec.ndim is None else spec.ndim - 1
        layout = None if spec.layout is None else spec.layout[1:]
        out = BatchSpec(_out_device(self), spec.dtype, ndim, layout)
        return [out] * len(self.spec.args["element_map"]), self.step

    def step(self, inputs, args, ctx):
        batch = _on_device(self, inputs[0], ctx)
        lengths = _sequence_shapes(self, batch, "frames")[:, 0]
        for k in self.spec.args["element_map"]:
            if (lengths <= k).any():
                i = _first(lengths <= k)
                raise self.error(f"element {k} of `element_map` is out of range for sample {i}, a sequence of "
                                 f"{lengths[i]}", ValueError, sample=i)
        dense = batch.dense_tensor()
        samples = None if dense is not None else batch.as_torch_list()
        layout = batch.layout()[1:]
        return [TensorList.make(dense[:, k].contiguous() if dense is not None else [s[k] for s in samples], layout,
                                device=batch.device) for k in self.spec.args["element_map"]]


@register("sequence_rearrange", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("new_order", INTS, REQUIRED, "out[i] = in[new_order[i]] along the frames; frames may repeat or go, "
        "but not all.", per_sample=True, check=lambda v: None if len(v) else "empty sequences are not allowed"),
])
class SequenceRearrange(Operator):
    """Reorder, repeat or drop the frames (the first dim) of each sequence."""

    def plan(self, inputs):
        spec = inputs[0]
        _check_sequence_spec(self, spec)
        return [BatchSpec(_out_device(self), spec.dtype, spec.ndim, spec.layout)], self.step

    def step(self, inputs, args, ctx):
        batch = _on_device(self, inputs[0], ctx)
        lengths = _sequence_shapes(self, batch, "frames")[:, 0]
        orders = self._orders(args, len(lengths))
        for i, (order, length) in enumerate(zip(orders, lengths)):
            if len(order) and (order.min() < 0 or order.max() >= length):
                raise self.error(f"sample {i}: `new_order` {order.tolist()} must pick frames in [0, {length})",
                                 ValueError, sample=i)
        dense = batch.dense_tensor()
        if dense is not None and not args.is_per_sample("new_order"):
            data = dense.index_select(1, torch.from_numpy(orders[0]).to(dense.device))
        else:
            data = [s.index_select(0, torch.from_numpy(o).to(s.device)) for s, o in zip(batch.as_torch_list(), orders)]
        return [TensorList.make(data, batch.layout(), device=batch.device)]

    def _orders(self, args, n):
        """One int64 order per sample."""
        if not args.is_per_sample("new_order"):
            return [np.array(args["new_order"], np.int64)] * n
        given = args.given("new_order")
        ndims = {s.dim() for s in given.as_torch_list()}
        if ndims - {1}:
            raise self.error(f"argument input 'new_order' must have 1D samples; got {sorted(ndims)}-D", ValueError)
        return [np.asarray(o, np.int64).reshape(-1) for o in args.batch("new_order")]


@register("permute_batch", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("indices", INTS, REQUIRED, "out[i] = in[indices[i]]: a list as long as the batch, or an argument input "
        "of one scalar per sample; indices may repeat or be left out.", per_sample=True),
])
class PermuteBatch(Operator):
    """A batch made of the input's samples in another order (repeats and omissions allowed)."""

    def plan(self, inputs):
        spec = inputs[0]
        return [BatchSpec(_out_device(self), spec.dtype, spec.ndim, spec.layout)], self.step

    def step(self, inputs, args, ctx):
        batch = _on_device(self, inputs[0], ctx)
        n = len(batch)
        indices = self._indices(args, n)
        wrong = (indices < 0) | (indices >= n)
        if wrong.any():
            i = _first(wrong)
            raise self.error(f"indices[{i}] = {indices[i]} is out of range for a batch of {n}", ValueError, sample=i)
        info = [batch.source_info[i] for i in indices] if batch.source_info else None
        dense = batch.dense_tensor()
        if dense is not None:
            data = dense.index_select(0, torch.from_numpy(indices).to(dense.device))
        else:
            samples = batch.as_torch_list()
            data = [samples[i] for i in indices]
        return [TensorList.make(data, batch.layout(), device=batch.device, source_info=info)]

    def _indices(self, args, n):
        if not args.is_per_sample("indices"):
            indices = np.array(args["indices"], np.int64)
            if len(indices) != n:
                raise self.error(f"{len(indices)} indices for a batch of {n} samples; give one per sample", ValueError)
            return indices
        values = args.batch("indices")
        if isinstance(values, list) or values.shape[1] != 1:
            raise self.error("argument input 'indices' must give one index (a scalar) per sample", ValueError)
        return values[:, 0]


@register("batch_permutation", devices=("cpu",), args=[
    Arg("allow_repetitions", BOOL, False, "Draw each index independently (repeats and omissions possible)."),
    Arg("no_fixed_points", BOOL, False, "No index equal to its position (out[i] != i); ignored for a batch of "
        "one."),
])
class BatchPermutation(RandomOperator):
    """Random sample indices for permute_batch: a permutation of the batch (int32 scalars)."""

    def plan(self, inputs):
        return [BatchSpec("cpu", torch.int32, 0, "")], self.step

    def step(self, inputs, args, ctx):
        indices = self._draw(ctx.batch_size)
        return [TensorList.make(torch.from_numpy(indices.astype(np.int32)), "", device="cpu")]

    def _draw(self, n):
        a = self.spec.args
        moved = a["no_fixed_points"] and n > 1
        if a["allow_repetitions"]:
            if not moved:
                return self.rng.integers(0, n, n)
            picks = self.rng.integers(0, n - 1, n)
            return picks + (picks >= np.arange(n))  # each i drawn from the others
        while True:  # a uniform derangement by rejection: about e draws on average
            permutation = self.rng.permutation(n)
            if not moved or (permutation != np.arange(n)).all():
                return permutation
