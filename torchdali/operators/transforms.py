"""Affine transforms as data (`transforms.*`): each sample is a float32 [ndim, ndim + 1]
matrix (the linear part, then the offset), the form `warp_affine` and `coord_transform`
consume. An operator given a transform as its input composes its own with it: by default
its own is applied after the input's (`reverse_order` turns that around). A whole batch is
computed at once, in float64, as [N, ndim + 1, ndim + 1] homogeneous matrices. Where an
argument is given per frame (fn.per_frame) or an input transform is a sequence, each sample
is a sequence of matrices ([F, ndim, ndim + 1], layout 'F**'), computed frame by frame."""
import numpy as np
import torch

from ..schema import BOOL, FLOAT, FLOATS, INT, REQUIRED, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator
from .sequences import frame_by_frame

_REVERSE = Arg("reverse_order", BOOL, False, "With an input transform: False applies this operator's "
               "transform after the input's, True before it.")


def _center(what):
    return Arg("center", FLOATS, None, f"The center of the {what}; one value per dimension.", per_sample=True,
               per_frame=True)


class _Transform(Operator):
    """A batch of this operator's matrices, composed with the optional input transform."""

    def plan(self, inputs):
        may_be_sequences = self.spec.arg_input_names or any(s.layout != "" for s in inputs)
        return [BatchSpec("cpu", torch.float32, None if may_be_sequences else 2,
                          None if may_be_sequences else "")], frame_by_frame(self, self.step)

    def step(self, inputs, args, ctx):
        n = len(inputs[0]) if inputs else ctx.batch_size
        given = self.input_matrices(inputs[0]) if inputs else None
        own = self.matrices(args, n, None if given is None else given.shape[1] - 1)
        if given is not None:
            if given.shape[1] != own.shape[1]:
                raise self.error(f"the input transforms are {given.shape[1] - 1}-D, this operator's are "
                                 f"{own.shape[1] - 1}-D; give transforms of one number of dimensions", ValueError)
            own = given @ own if args["reverse_order"] else own @ given
        return [TensorList.make(torch.from_numpy(own[:, :-1].astype(np.float32)), device="cpu")]

    def input_matrices(self, batch):
        """The input transforms ([ndim, ndim + 1] each) as homogeneous float64 matrices."""
        dense, samples = batch.dense_tensor(), batch.as_torch_list()
        if dense is None and samples and all(t.shape == samples[0].shape for t in samples):
            dense = torch.stack(samples)
        if dense is None or dense.dim() != 3 or dense.shape[2] != dense.shape[1] + 1:
            shapes = [tuple(t.shape) for t in samples]  # the error's sample
            i = next(i for i, s in enumerate(shapes) if len(s) != 2 or s[1] != s[0] + 1 or s != shapes[0])
            raise self.error(f"input sample {i} has shape {shapes[i]}; expected affine transforms of one shape "
                             "[ndim, ndim + 1], or sequences of them (layout 'F**')", ValueError, sample=i)
        return homogeneous(dense.double().cpu().numpy())

    def matrices(self, args, n, ndim):
        """[n, d + 1, d + 1] float64: this operator's transforms; `ndim`: the input's dims, if any."""
        raise NotImplementedError

    def rows(self, args, name, n, width=None):
        """The values of list argument `name` as [n, k] float64 (a constant repeated), k
        checked against `width` where given (a single value is repeated to it)."""
        v = args.rows(name, n)
        if width is not None and v.shape[1] != width:
            if v.shape[1] != 1:
                raise self.error(f"argument '{name}' has {v.shape[1]} values; expected {width} (one per "
                                 "dimension) or one", ValueError)
            v = np.broadcast_to(v, (n, width))
        return v

    def around(self, linear, args, n):
        """Homogeneous matrices of the [n, d, d] `linear` parts, about `center` where given."""
        d = linear.shape[1]
        m = np.zeros((n, d + 1, d + 1))
        m[:, :d, :d] = linear
        m[:, d, d] = 1
        if args.batch("center") is not None:
            c = self.rows(args, "center", n)
            if c.shape[1] != d:
                raise self.error(f"argument 'center' has {c.shape[1]} values; the transform is {d}-D", ValueError)
            m[:, :d, d] = c - np.einsum("nij,nj->ni", linear, c)
        return m


def homogeneous(affine):
    """[n, d, d + 1] affine matrices with the row (0 ... 0 1) appended."""
    n, d = affine.shape[:2]
    m = np.zeros((n, d + 1, d + 1))
    m[:, :d] = affine
    m[:, d, d] = 1
    return m


@register("transforms.translation", inputs=(0, 1), deprecated_names=("transform_translation",), args=[
    Arg("offset", FLOATS, REQUIRED, "The translation vector; its length is the transform's dimensions.",
        per_sample=True, per_frame=True), _REVERSE])
class Translation(_Transform):
    """A translation by `offset`."""

    def matrices(self, args, n, ndim):
        offset = self.rows(args, "offset", n)
        d = offset.shape[1]
        return homogeneous(np.concatenate([np.broadcast_to(np.eye(d), (n, d, d)), offset[:, :, None]], 2))


@register("transforms.scale", inputs=(0, 1), args=[
    Arg("scale", FLOATS, REQUIRED, "The scale factor per dimension; one value is used for every dimension.",
        per_sample=True, per_frame=True),
    _center("scaling"),
    Arg("ndim", INT, None, "The transform's dimensions, where neither `scale` nor the input gives them.",
        check=lambda v: None if v > 0 else "must be positive"),
    _REVERSE])
class Scale(_Transform):
    """A scaling by `scale`, about `center` (the origin by default)."""

    def matrices(self, args, n, ndim):
        scale = self.rows(args, "scale", n)
        d = scale.shape[1] if scale.shape[1] > 1 else args["ndim"] or ndim
        if d is None:
            raise self.error("argument 'scale' has one value: give `ndim` (or an input transform) to say "
                             "the transform's dimensions", ValueError)
        scale = np.broadcast_to(scale, (n, d)) if scale.shape[1] == 1 else scale
        return self.around(scale[:, :, None] * np.eye(d), args, n)


@register("transforms.rotation", inputs=(0, 1), args=[
    Arg("angle", FLOAT, REQUIRED, "The angle, in degrees (counter-clockwise in x, y).", per_sample=True,
        per_frame=True),
    Arg("axis", FLOATS, None, "3-D only: the axis of rotation (any non-zero length); a 2-D transform "
        "without it.", per_sample=True, per_frame=True),
    _center("rotation"), _REVERSE])
class Rotation(_Transform):
    """A rotation by `angle` degrees, about `center` (the origin by default); 3-D about `axis`."""

    def matrices(self, args, n, ndim):
        angle = np.broadcast_to(np.radians(np.asarray(args.batch("angle"), np.float64)), (n,))
        cos, sin = np.cos(angle), np.sin(angle)
        if args.batch("axis") is None:
            linear = np.stack([np.stack([cos, -sin], 1), np.stack([sin, cos], 1)], 1)
        else:
            axis = self.rows(args, "axis", n, 3)
            length = np.linalg.norm(axis, axis=1)
            if (length == 0).any():
                raise self.error("argument 'axis' must have a non-zero length", ValueError,
                                 sample=int(np.argmax(length == 0)))
            x, y, z = (axis / length[:, None]).T
            k = np.zeros((n, 3, 3))  # the cross-product matrix of the unit axis (Rodrigues)
            k[:, 0, 1], k[:, 0, 2], k[:, 1, 2] = -z, y, -x
            k = k - k.transpose(0, 2, 1)
            linear = np.eye(3) + sin[:, None, None] * k + (1 - cos)[:, None, None] * (k @ k)
        return self.around(linear, args, n)


@register("transforms.shear", inputs=(0, 1), args=[
    Arg("shear", FLOATS, None, "The shear factors: 2-D (x, y) or 3-D (xy, xz, yx, yz, zx, zy).",
        per_sample=True, per_frame=True),
    Arg("angles", FLOATS, None, "The shear angles in degrees, in `shear`'s order (a factor is the angle's "
        "tangent); not with `shear`.", per_sample=True, per_frame=True),
    _center("shear"), _REVERSE])
class Shear(_Transform):
    """A shear mapping: factor xy moves x by that much per unit of y."""

    def matrices(self, args, n, ndim):
        given = [name for name in ("shear", "angles") if args.batch(name) is not None]
        if len(given) != 1:
            raise self.error("give exactly one of `shear` and `angles`", ValueError)
        factors = self.rows(args, given[0], n)
        if given[0] == "angles":
            if (np.abs(factors) >= 90).any():
                raise self.error("argument 'angles' must lie between -90 and 90 degrees", ValueError)
            factors = np.tan(np.radians(factors))
        if factors.shape[1] not in (2, 6):
            raise self.error(f"argument '{given[0]}' has {factors.shape[1]} values; expected 2 (2-D) or 6 (3-D)",
                             ValueError)
        d = 2 if factors.shape[1] == 2 else 3
        linear = np.broadcast_to(np.eye(d), (n, d, d)).copy()
        off_diagonal = [(i, j) for i in range(d) for j in range(d) if i != j]
        for k, (i, j) in enumerate(off_diagonal):
            linear[:, i, j] = factors[:, k]
        return self.around(linear, args, n)


@register("transforms.crop", inputs=(0, 1), args=[
    Arg("from_start", FLOATS, [0.0], "The source space's lower bound (one value: every dimension).",
        per_sample=True, per_frame=True),
    Arg("from_end", FLOATS, [1.0], "The source space's upper bound.", per_sample=True, per_frame=True),
    Arg("to_start", FLOATS, [0.0], "The destination space's lower bound.", per_sample=True, per_frame=True),
    Arg("to_end", FLOATS, [1.0], "The destination space's upper bound.", per_sample=True, per_frame=True),
    Arg("absolute", BOOL, False, "Swap a start and end where start > end."),
    _REVERSE])
class Crop(_Transform):
    """The map of the box [from_start, from_end] onto [to_start, to_end], per dimension (to
    adjust coordinates after a crop)."""

    NAMES = ("from_start", "from_end", "to_start", "to_end")

    def matrices(self, args, n, ndim):
        d = max([self.rows(args, name, n).shape[1] for name in self.NAMES] + [ndim or 1])
        f0, f1, t0, t1 = (self.rows(args, name, n, d) for name in self.NAMES)
        if args["absolute"]:
            f0, f1 = np.minimum(f0, f1), np.maximum(f0, f1)
            t0, t1 = np.minimum(t0, t1), np.maximum(t0, t1)
        m = np.zeros((n, d + 1, d + 1))
        with np.errstate(divide="ignore", invalid="ignore"):  # an empty source box: infinite scale, as DALI
            m[:, range(d), range(d)] = (t1 - t0) / (f1 - f0)
            m[:, :d, d] = t0 - f0 * m[:, range(d), range(d)]
        m[:, d, d] = 1
        return m


@register("transforms.combine", inputs=(2, 99), args=[
    Arg("reverse_order", BOOL, False, "False: the result applies the inputs in the order listed "
        "(T3(T2(T1(x)))); True: in the reverse order.")])
class Combine(_Transform):
    """One transform doing what the input transforms do one after another."""

    def step(self, inputs, args, ctx):
        parts = [self.input_matrices(batch) for batch in inputs]
        if len({p.shape[1:] for p in parts}) > 1:
            raise self.error("the input transforms differ in dimensions: " +
                             ", ".join(f"input {k} is {p.shape[1] - 1}-D" for k, p in enumerate(parts)), ValueError)
        out = parts[0]
        for p in parts[1:]:
            out = out @ p if args["reverse_order"] else p @ out
        return [TensorList.make(torch.from_numpy(out[:, :-1].astype(np.float32)), device="cpu")]
