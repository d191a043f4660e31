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
        return [a % ndim for a in axes]

    def _per_axis(self, name, value, count, i, allow_one):
        if not value:
            return None
        if len(value) == count or (allow_one and len(value) == 1):
            return list(value) * (count if len(value) == 1 else 1)
        raise self.error(f"sample {i}: {name}={list(value)} must have {count} value(s) (one per "
                         "padded axis)" + (" or 1" if allow_one else ""), ValueError)

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        images = batch.as_torch_list()
        n = len(images)
        if n == 0:
            return [batch]
        ndim = self.check_rank(images)
        axes = self._axes(batch.layout(), ndim)
        largest = [max(im.shape[a] for im in images) for a in axes]
        shapes, fills = [], []
        for i, im in enumerate(images):
            shape = self._per_axis("shape", args.sample("shape", i), len(axes), i, False)
            align = self._per_axis("align", args.sample("align", i), len(axes), i, True)
            out = list(im.shape)
            for k, a in enumerate(axes):
                target = shape[k] if shape is not None and shape[k] >= 0 else largest[k]
                extent = max(im.shape[a], target)
                if align is not None:
                    extent = -(-extent // align[k]) * align[k]
                out[a] = extent
            shapes.append(out)
            fills.append(cast_fill(args.sample("fill_value", i), im.dtype))

        dense = all(s == shapes[0] for s in shapes)
        if dense and all(f == fills[0] for f in fills):
            outs = images[0].new_full([n] + shapes[0], fills[0])
        elif dense:
            outs = images[0].new_empty([n] + shapes[0])
            for o, f in zip(outs, fills):
                o.fill_(f)
        else:
            outs = [im.new_full(s, f) for im, s, f in zip(images, shapes, fills)]
        for o, im in zip(outs, images):
            o[tuple(slice(0, e) for e in im.shape)].copy_(im)
        return [TensorList.make(outs, batch.layout(), device=batch.device)]
