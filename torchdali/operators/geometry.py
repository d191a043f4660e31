"""Geometry operators that move pixels without resampling: flip, transpose, pad (crop is
in crop.py).

flip and transpose run the `torchdali::flip` / `torchdali::transpose` kernels (csrc/) over
the whole batch in one call. pad is torch's fill and strided copy per
sample: both are memory-bound copies that torch already does at full bandwidth, so a
batched kernel would only save a few launches."""
import numpy as np
import torch

from ..schema import BOOL, FLOAT, INT, INTS, LAYOUT, Arg, register
from ..tensor_list import TensorList
from .base import Operator
from .crop import cast_fill
from .images import refuse_huge_outputs


def _default_layout(op, batch, ndim):
    """The batch's layout, or DALI's default for images without one."""
    layout = batch.layout()
    if layout:
        if len(layout) != ndim:
            raise op.error(f"layout '{layout}' does not match samples of {ndim} dims", ValueError)
        return layout
    if ndim in (2, 3):
        return "HWC"[:ndim]
    raise op.error(f"samples of {ndim} dims need a layout (e.g. 'FHWC' or 'DHWC')", ValueError)


def _flags(args, name, n):
    """Argument `name` as one uint8 0/1 flag per sample."""
    return torch.from_numpy((np.broadcast_to(np.asarray(args.batch(name)), (n,)) != 0).astype(np.uint8))


@register("flip", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("Flip",), args=[
    Arg("horizontal", INT, 1, "Flip left-right (the W axis) where nonzero.", per_sample=True),
    Arg("vertical", INT, 0, "Flip upside down (the H axis) where nonzero.", per_sample=True),
    Arg("depthwise", INT, 0, "Flip the D axis where nonzero; ignored for layouts without D.",
        per_sample=True),
])
class Flip(Operator):
    """Flip images (HWC, CHW, FHWC, DHWC, ...) horizontally, vertically and, for volumes,
    depthwise, per sample."""

    def run(self, inputs, args, ctx):
        from ..kernels.geometry import flip

        batch = inputs[0]
        images = batch.as_torch_list()
        n = len(images)
        if n == 0:
            return [batch]
        ndim = self.check_rank(images)
        layout = _default_layout(self, batch, ndim)
        h, w = layout.find("H"), layout.find("W")
        if h < 0 or w != h + 1:
            raise self.error(f"layout '{layout}' must have the H axis right before the W axis",
                             ValueError)
        # A dense batch stays one tensor (flip.dense); a list stays a list.
        src = batch.as_torch() if batch.is_dense_tensor() else images
        out = flip(src, _flags(args, "horizontal", n), _flags(args, "vertical", n), h)
        d = layout.find("D")
        if d >= 0:
            depth = _flags(args, "depthwise", n)
            if d + 1 != h:
                raise self.error(f"layout '{layout}' must have the D axis right before H",
                                 ValueError)
            if bool(depth.any()):  # the kernel's "vertical" flips dim d, its "horizontal" d+1
                out = flip(out, torch.zeros_like(depth), depth, d)
        return [TensorList.make(out, layout, device=batch.device)]


@register("transpose", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("Transpose",), args=[
    Arg("perm", INTS, None, "Output dim k is input dim perm[k]; the dims reversed if not set."),
    Arg("transpose_layout", BOOL, True, "Permute the layout's axis names with `perm` (else the "
        "input layout is kept)."),
    Arg("output_layout", LAYOUT, None, "The output layout; overrides transpose_layout."),
])
class Transpose(Operator):
    """Reorder the dimensions of each sample (e.g. HWC to CHW with perm=[2, 0, 1])."""

    def run(self, inputs, args, ctx):
        from ..kernels.geometry import transpose

        batch = inputs[0]
        images = batch.as_torch_list()
        if not images:
            return [batch]
        ndim = self.check_rank(images)
        perm = args["perm"]
        perm = list(range(ndim))[::-1] if perm is None else list(perm)
        if sorted(perm) != list(range(ndim)):
            raise self.error(f"perm={perm} is not a permutation of the {ndim} dims of the "
                             f"samples", ValueError)
        layout = batch.layout()
        if args["output_layout"] is not None:
            layout = args["output_layout"]
            if layout and len(layout) != ndim:
                raise self.error(f"output_layout '{layout}' does not have {ndim} axes", ValueError)
        elif args["transpose_layout"] and layout:
            layout = "".join(layout[p] for p in perm)
        if ndim == 0:
            out = [im.clone() for im in images]
        elif batch.is_dense_tensor():  # the whole batch as one sample, its dim 0 kept in place
            out = transpose([batch.as_torch()], [0] + [p + 1 for p in perm])[0]
        else:
            out = transpose(images, perm)
        return [TensorList.make(out, layout, device=batch.device)]


@register("pad", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("Pad",), args=[
    Arg("axes", INTS, [], "Axes to pad (negative counts from the back); all axes if neither "
        "axes nor axis_names is given."),
    Arg("axis_names", LAYOUT, None, "Names of the axes to pad (instead of axes)."),
    Arg("shape", INTS, [], "Minimum output extent per padded axis; -1: the batch's largest "
        "extent (the default).", per_sample=True),
    Arg("align", INTS, [], "Round each padded extent up to a multiple of this (one value for "
        "all padded axes, or one per axis).", per_sample=True,
        check=lambda v: None if all(a > 0 for a in v) else "must be positive"),
    Arg("fill_value", FLOAT, 0.0, "Value of the padded elements.", per_sample=True),
])
class Pad(Operator):
    """Pad samples at the end of the chosen axes to the batch's largest extent (or to
    `shape`), rounded up to a multiple of `align`."""

    def _axes(self, layout, ndim):
        axes, names = self.spec.args["axes"], self.spec.args["axis_names"]
        if axes and names:
            raise self.error("give axes or axis_names, not both", ValueError)
        if names:
            missing = [c for c in names if c not in layout]
            if missing:
                raise self.error(f"axis_names '{names}': {missing} not in the input layout "
                                 f"'{layout}'", ValueError)
            return [layout.index(c) for c in names]
        if not axes:
            return list(range(ndim))
        bad = [a for a in axes if not -ndim <= a < ndim]
        if bad:
            raise self.error(f"axes {bad} out of range for samples of {ndim} dims", ValueError)
        if len({a % ndim for a in axes}) != len(axes):
            raise self.error(f"axes {list(axes)} name an axis more than once", ValueError)
        return [a % ndim for a in axes]

    def _per_axis(self, args, name, axes, allow_one, empty):
        """`shape` or `align` as int64 rows of `count` values: [N, count] when per-sample, else
        [1, count]; a sample without values gets `empty`; None when no sample has values."""
        count = len(axes)
        v, per_sample = args.batch(name), args.is_per_sample(name)
        if per_sample and isinstance(v, np.ndarray):  # [N, k]: every sample has k values
            a = v.reshape(len(v), -1)
            rows = a[:1]
        else:
            rows = v if per_sample else [v]  # ragged rows come as a list
        for i, row in enumerate(rows):
            if len(row) and not (len(row) == count or (allow_one and len(row) == 1)):
                raise self.error(f"sample {i}: {name}={list(row)} must have {count} value(s) (one per "
                                 f"padded axis, axes={list(axes)})" + (" or 1" if allow_one else ""), ValueError)
        if not any(len(row) for row in rows):
            return None
        if per_sample and isinstance(v, np.ndarray):
            return np.broadcast_to(a.astype(np.int64), (len(a), count))
        return np.stack([np.broadcast_to(np.asarray(r if len(r) else [empty], np.int64), (count,)) for r in rows])

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        n = len(batch)
        if n == 0:
            return [batch]
        try:
            in_shapes = batch.sample_shapes()
        except ValueError:  # samples of different ndim: named by check_rank
            self.check_rank(batch.as_torch_list())
        ndim = in_shapes.shape[1]
        axes = self._axes(batch.layout(), ndim)
        extents = in_shapes[:, axes]
        target = np.broadcast_to(extents.max(axis=0), extents.shape)  # the batch's largest, per axis
        shape = self._per_axis(args, "shape", axes, False, -1)
        if shape is not None:
            target = np.where(shape >= 0, shape, target)
        extents = np.maximum(extents, target)
        align = self._per_axis(args, "align", axes, True, 1)
        if align is not None:
            extents = -(-extents // align) * align
        out_shapes = in_shapes.copy()
        out_shapes[:, axes] = extents
        refuse_huge_outputs(self, out_shapes[:, :-1] if batch.layout().endswith("C") else out_shapes,
                            ["shape", "align"])
        first = batch.sample(0)
        fill_values = np.broadcast_to(np.asarray(args.batch("fill_value"), np.float64), (n,))
        distinct, index = np.unique(fill_values, return_inverse=True)
        fills = np.array([cast_fill(v, first.dtype) for v in distinct.tolist()])[index.reshape(-1)].tolist()
        dense = bool((out_shapes == out_shapes[0]).all())
        held = batch.dense_tensor()
        if dense and held is not None and len(distinct) == 1:  # one copy for the batch
            outs = held.new_full([n] + out_shapes[0].tolist(), fills[0])
            outs[(slice(None),) + tuple(slice(0, e) for e in in_shapes[0].tolist())].copy_(held)
            return [TensorList.make(outs, batch.layout(), device=batch.device)]
        images = batch.as_torch_list()
        if dense and len(distinct) == 1:
            outs = first.new_full([n] + out_shapes[0].tolist(), fills[0])
        elif dense:
            outs = first.new_empty([n] + out_shapes[0].tolist())
            for o, f in zip(outs, fills):
                o.fill_(f)
        else:
            outs = [im.new_full(s, f) for im, s, f in zip(images, out_shapes.tolist(), fills)]
        for o, im in zip(outs, images):
            o[tuple(slice(0, e) for e in im.shape)].copy_(im)
        return [TensorList.make(outs, batch.layout(), device=batch.device)]
