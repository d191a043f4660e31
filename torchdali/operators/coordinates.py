"""Operators on coordinates: points, vectors or boxes along a sample's last dimension. A
batch is computed as one [P, n] array of all its samples' vectors, each sample's
parameters repeated over its own vectors."""
import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, FLOAT, FLOATS, INT, LAYOUT, REQUIRED, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator, shapes_or_none
from .sequences import frame_by_frame


@register("coord_transform", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("M", FLOATS, None, "The matrix, m x n for inputs of n components (row-major); one value: that "
        "value on the diagonal of an n x n matrix; the identity by default.", per_sample=True, per_frame=True),
    Arg("T", FLOATS, None, "The translation, m values; one value: repeated m times; none by default.",
        per_sample=True, per_frame=True),
    Arg("MT", FLOATS, None, "[M T] as one m x (n + 1) matrix; one value: that value on M's diagonal. "
        "Not with `M` or `T`.", per_sample=True, per_frame=True),
    Arg("dtype", DTYPE, types.FLOAT, "The output type: FLOAT, or the input's type (rounded to the nearest "
        "integer and clamped to the type's range)."),
])
class CoordTransform(Operator):
    """out = M * in + T for every vector along the samples' last dimension (points, colors):
    each sample's [..., n] becomes [..., m]. With per-frame matrices (fn.per_frame, or
    transforms.* run per frame) or sequences of points, frame by frame: [F, ..., m]."""

    def plan(self, inputs):
        self.out_dtype = types.to_torch_type(self.spec.args["dtype"])
        device = "cpu" if self.spec.device == "cpu" else "gpu"
        per_frame = bool(self.spec.arg_input_names) or (inputs[0].layout or "").startswith("F")
        return [BatchSpec(device, self.out_dtype, None if per_frame else inputs[0].ndim,
                          inputs[0].layout)], self.run_frames

    def run_frames(self, inputs, args, ctx):
        """`step` frame by frame; the output keeps the input's layout, as DALI's does (where the
        matrices alone are per frame, no 'F')."""
        out = frame_by_frame(self, self.step)(inputs, args, ctx)[0]
        if out.layout() == inputs[0].layout():
            return [out]
        dense = out.dense_tensor()
        return [TensorList.make(dense if dense is not None else out.as_torch_list(), inputs[0].layout(),
                                device=out.device)]

    def step(self, inputs, args, ctx):
        samples, points, counts = vectors(self, inputs[0])
        if self.out_dtype != torch.float32 and samples and self.out_dtype != samples[0].dtype:
            raise self.error(f"argument 'dtype' is {self.spec.args['dtype']}: the output is FLOAT or the "
                             f"input's type ({samples[0].dtype})", ValueError)
        n = points.shape[1]
        mt = per_vector(self.matrices(args, len(samples), n), counts)  # [P, m, n + 1]
        out = torch.einsum("pj,pij->pi", points, mt[:, :, :n]) + mt[:, :, n]
        if self.out_dtype != torch.float32:
            info = torch.iinfo(self.out_dtype)
            out = out.double()  # in float64, where int32's range is exact; halves away from 0, as DALI
            out = (out.sign() * (out.abs() + 0.5).floor()).clamp(info.min, info.max)
        return [samples_like(out.to(self.out_dtype), counts, samples, inputs[0])]

    def matrices(self, args, count, n):
        """[count, m, n + 1]: [M T] of every sample."""
        given = {name: args.rows(name, count) for name in ("M", "T", "MT")}
        for name, v in given.items():
            if v is not None and v.shape[1] == 0:
                raise self.error(f"argument '{name}' is empty", ValueError)
        if given["MT"] is not None:
            if given["M"] is not None or given["T"] is not None:
                raise self.error("give `MT`, or `M` and `T`, not both", ValueError)
            mt = given["MT"]
            if mt.shape[1] == 1:
                return np.concatenate([mt[:, :, None] * np.eye(n), np.zeros((count, n, 1))], 2)
            if mt.shape[1] % (n + 1):
                raise self.error(f"argument 'MT' has {mt.shape[1]} values; expected m x {n + 1} for inputs of "
                                 f"{n} components", ValueError)
            return mt.reshape(count, -1, n + 1)
        m_values = given["M"] if given["M"] is not None else np.ones((count, 1))
        if m_values.shape[1] == 1:
            linear = m_values[:, :, None] * np.eye(n)
        elif m_values.shape[1] % n:
            raise self.error(f"argument 'M' has {m_values.shape[1]} values; expected m x {n} for inputs of {n} "
                             "components", ValueError)
        else:
            linear = m_values.reshape(count, -1, n)
        t = given["T"] if given["T"] is not None else np.zeros((count, 1))
        m = linear.shape[1]
        if t.shape[1] not in (1, m):
            raise self.error(f"argument 'T' has {t.shape[1]} values; M has {m} rows", ValueError)
        return np.concatenate([linear, np.broadcast_to(t, (count, m))[:, :, None]], 2)


def vectors(op, batch, n=None):
    """(samples, [P, n] float32 of all their vectors, counts per sample); an error naming
    the first sample whose last dimension is not `n` (sample 0's if None) or is empty."""
    samples = batch.as_torch_list()
    device = samples[0].device if samples else torch.device("cpu")
    shapes = shapes_or_none(batch)
    if not samples:
        counts = np.zeros(0, np.int64)
    elif shapes is not None and shapes.shape[1] and shapes[0, -1] and (shapes[:, -1] == (n or shapes[0, -1])).all():
        counts = shapes[:, :-1].prod(1)
    else:
        counts = explain_vectors(op, samples, n)  # samples of mixed ndim, or an error
    n = n or (samples[0].shape[-1] if samples else 1)
    points = torch.cat([s.reshape(-1, n).to(torch.float32) for s in samples]) if samples else torch.zeros(0, n)
    return samples, points, torch.from_numpy(np.asarray(counts, np.int64)).to(device)


def explain_vectors(op, samples, n):
    """Sample by sample, for vectors() where the batch's shapes did not settle it: the
    samples' vector counts, or an error naming the first wrong sample."""
    if any(s.dim() == 0 for s in samples):
        raise op.error("the samples must be vectors along their last dimension, not scalars", ValueError)
    n = n or samples[0].shape[-1]
    if n == 0:
        raise op.error("sample 0's vectors have no components (its last dimension is 0)", ValueError, sample=0)
    bad = [i for i, s in enumerate(samples) if s.shape[-1] != n]
    if bad:
        raise op.error(f"sample {bad[0]} has {samples[bad[0]].shape[-1]} components, expected {n}", ValueError,
                       sample=bad[0])
    return [s.numel() // n for s in samples]


def per_vector(values, counts):
    """Per-sample parameters ([N, ...], NumPy or broadcastable) repeated for every vector."""
    values = torch.as_tensor(np.ascontiguousarray(values, np.float32), device=counts.device)
    return values.repeat_interleave(counts, 0)


def per_sample(args, name, n):
    """Scalar argument `name` as an [n] float64 array."""
    return np.broadcast_to(np.asarray(args.batch(name), np.float64), (n,))


def samples_like(out, counts, samples, batch):
    """The flat result [P, m] split back into samples shaped as the input's, as a TensorList."""
    parts = out.split(counts.tolist())
    return TensorList.make([o.reshape(*s.shape[:-1], o.shape[-1]) for o, s in zip(parts, samples)],
                           batch.layout(), device=batch.device)


class _FloatVectors(Operator):
    """Float32 vectors out, shaped and laid out as the input's, on the operator's device."""

    def plan(self, inputs):
        device = "cpu" if self.spec.device == "cpu" else "gpu"
        return [BatchSpec(device, torch.float32, inputs[0].ndim, inputs[0].layout)], self.step


@register("coord_flip", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("layout", LAYOUT, "", "The order of the coordinates: of 'x', 'y', 'z' (by default 'x', 'xy' or "
        "'xyz' for 1, 2 or 3 of them)."),
    Arg("flip_x", INT, 1, "Flip the x coordinate.", per_sample=True),
    Arg("flip_y", INT, 0, "Flip the y coordinate.", per_sample=True),
    Arg("flip_z", INT, 0, "Flip the z coordinate.", per_sample=True),
    Arg("center_x", FLOAT, 0.5, "The flip's center in x.", per_sample=True),
    Arg("center_y", FLOAT, 0.5, "The flip's center in y.", per_sample=True),
    Arg("center_z", FLOAT, 0.5, "The flip's center in z.", per_sample=True),
])
class CoordFlip(_FloatVectors):
    """Points [..., n] (n of 1 to 3) reflected about a center, per coordinate: c' = 2 * center - c."""

    def step(self, inputs, args, ctx):
        samples, points, counts = vectors(self, inputs[0])
        n = points.shape[1]
        layout = str(self.spec.args["layout"]) or "xyz"[:n]
        if len(layout) != n or set(layout) - set("xyz") or len(set(layout)) != n:
            raise self.error(f"argument 'layout' is '{layout}' for points of {n} coordinates; give {n} distinct "
                             "letters of 'x', 'y', 'z'", ValueError)
        count = len(samples)
        flip = np.stack([per_sample(args, f"flip_{a}", count) != 0 for a in layout], 1)
        center = np.stack([per_sample(args, f"center_{a}", count) for a in layout], 1)
        flip, center = per_vector(flip, counts), per_vector(center, counts)
        out = torch.where(flip != 0, 2 * center - points, points)
        return [samples_like(out, counts, samples, inputs[0])]


_LTRB = Arg("ltrb", BOOL, False, "Boxes as [left, top, right, bottom]; False: [x, y, width, height].")


@register("bb_flip", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    _LTRB,
    Arg("horizontal", INT, 1, "Flip horizontally.", per_sample=True),
    Arg("vertical", INT, 0, "Flip vertically.", per_sample=True),
])
class BbFlip(_FloatVectors):
    """Boxes [..., 4] in relative coordinates (0 to 1) mirrored as their image is."""

    def step(self, inputs, args, ctx):
        samples, boxes, counts = vectors(self, inputs[0], 4)
        count = len(samples)
        flip = per_vector(np.stack([per_sample(args, "horizontal", count) != 0,
                                    per_sample(args, "vertical", count) != 0], 1), counts) != 0
        lo, hi = boxes[:, :2], boxes[:, 2:]
        if self.spec.args["ltrb"]:
            out = torch.cat([torch.where(flip, 1 - hi, lo), torch.where(flip, 1 - lo, hi)], 1)
        else:
            out = torch.cat([torch.where(flip, 1 - lo - hi, lo), hi], 1)
        return [samples_like(out, counts, samples, inputs[0])]


@register("bbox_paste", inputs=(1, 1), aliases=("BBoxPaste",), args=[
    _LTRB,
    Arg("ratio", FLOAT, REQUIRED, "The canvas's size over the image's; at least 1.", per_sample=True,
        check=lambda v: None if v >= 1 else "must be at least 1"),
    Arg("paste_x", FLOAT, 0.5, "Where the image lies across the canvas: 0 left, 1 right.", per_sample=True),
    Arg("paste_y", FLOAT, 0.5, "Where the image lies down the canvas: 0 top, 1 bottom.", per_sample=True),
])
class BBoxPaste(_FloatVectors):
    """Boxes [..., 4] in relative coordinates moved with their image pasted on a larger canvas
    (as `paste` does): corners c / ratio + paste * (ratio - 1) / ratio, sizes / ratio."""

    def step(self, inputs, args, ctx):
        samples, boxes, counts = vectors(self, inputs[0], 4)
        count = len(samples)
        ratio = per_sample(args, "ratio", count)
        paste = np.stack([per_sample(args, "paste_x", count), per_sample(args, "paste_y", count)], 1)
        scale = per_vector(1 / ratio[:, None], counts)
        shift = per_vector(paste * ((ratio - 1) / ratio)[:, None], counts)
        if self.spec.args["ltrb"]:
            out = torch.cat([boxes[:, :2] * scale + shift, boxes[:, 2:] * scale + shift], 1)
        else:
            out = torch.cat([boxes[:, :2] * scale + shift, boxes[:, 2:] * scale], 1)
        return [samples_like(out, counts, samples, inputs[0])]
