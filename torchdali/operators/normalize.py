"""normalize: `out = scale * (in - mean) / stddev + shift`, with the mean and standard
deviation given (scalars or per-sample tensors) or computed over some axes, per sample or
over the whole batch.

The statistics are torch reductions (`torch.var_mean` over the batch at once when the
samples share a shape): they are already fast, on the CPU and the GPU. The elementwise step,
with its broadcasting of per-sample parameters and integer rounding, is the
`torchdali::normalize` kernel (csrc/): one call, one launch per batch. DALI's rules are kept:
a computed stddev gives `scale / sqrt(var + epsilon)` with var = sum((x - mean)^2) / (N - ddof),
and 0 (output = shift) where the variance is 0 and epsilon is 0, or N <= ddof."""
import math

import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, FLOAT, INT, INTS, LAYOUT, ArgType, Arg, register
from ..tensor_list import TensorList
from .base import Operator


def _float_or_tensor(v):
    if isinstance(v, np.ndarray) and v.dtype.kind in "biuf":
        return v.astype(np.float32)
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
        return float(v)
    raise TypeError("expected a number (per-sample tensors come as an argument input)")


FLOAT_OR_TENSOR = ArgType("float or TensorList of float", _float_or_tensor)
_DTYPES = (types.FLOAT, types.FLOAT16, types.UINT8, types.INT8, types.INT16, types.INT32)
_IN_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.float16, torch.float32)


def _non_negative(v):
    return None if v >= 0 else "must be >= 0"


@register("normalize", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("Normalize",), args=[
    Arg("mean", FLOAT_OR_TENSOR, None, "Mean to subtract: a scalar, or per-sample tensors with "
        "the input's number of dims, extent 1 on reduced axes; computed if not given.",
        per_sample=True),
    Arg("stddev", FLOAT_OR_TENSOR, None, "Standard deviation to divide by, shaped like `mean`; "
        "computed if not given.", per_sample=True),
    Arg("axes", INTS, None, "Axes to reduce (negative counts from the back); all axes if "
        "neither axes nor axis_names is given (or inferred from tensor mean/stddev)."),
    Arg("axis_names", LAYOUT, None, "Names of the axes to reduce (instead of axes)."),
    Arg("batch", BOOL, False, "Compute the statistics over the whole batch (non-reduced extents "
        "must match)."),
    Arg("scale", FLOAT, 1.0, "Factor applied to the normalized values."),
    Arg("shift", FLOAT, 0.0, "Value the mean maps to in the output."),
    Arg("epsilon", FLOAT, 0.0, "Added to the variance before the square root.",
        check=_non_negative),
    Arg("ddof", INT, 0, "Delta degrees of freedom: variance = sum((x - mean)^2) / (N - ddof).",
        check=_non_negative),
    Arg("dtype", DTYPE, types.FLOAT, "Output type; integers are rounded and saturated.",
        choices=_DTYPES),
])
class Normalize(Operator):
    """Normalize by a mean and standard deviation, given or computed over `axes`, per sample
    or (batch=True) over the whole batch."""

    def __init__(self, spec):
        super().__init__(spec)
        for name in ("mean", "stddev"):
            if isinstance(spec.args.get(name), np.ndarray):
                raise self.error(f"argument '{name}': a constant must be a scalar; give "
                                 "per-sample tensors as an argument input", TypeError)
        given = self._given()
        if given["mean"] == "scalar" and given["stddev"] == "scalar" and self._axes_given():
            raise self.error("axes must not be given when mean and stddev are both scalars",
                             ValueError)
        if spec.args["batch"] and "tensor" in given.values():
            raise self.error("batch=True cannot be used with mean/stddev given as argument "
                             "inputs", ValueError)
        if spec.args["axes"] is not None and spec.args["axis_names"] is not None:
            raise self.error("give axes or axis_names, not both", ValueError)
        if spec.args["axes"] is not None and not spec.args["axes"]:
            raise self.error("argument 'axes' must list at least one axis", ValueError)
        if given["stddev"] == "scalar" and spec.args["stddev"] == 0 and not spec.args["epsilon"]:
            raise self.error("argument 'stddev' = 0.0 divides by zero; give a nonzero stddev "
                             "or an epsilon", ValueError)

    def _given(self):
        """'tensor', 'scalar' or None for mean and stddev."""
        return {name: "tensor" if name in self.spec.arg_input_names else
                ("scalar" if self.spec.args.get(name) is not None else None)
                for name in ("mean", "stddev")}

    def _axes_given(self):
        return self.spec.args["axes"] is not None or self.spec.args["axis_names"] is not None

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        n = len(batch)
        if n == 0:
            return [batch]
        held = batch.dense_tensor()  # a dense batch is checked once, and never split
        images = None if held is not None else batch.as_torch_list()
        ndim = held.dim() - 1 if held is not None else self.check_rank(images)
        for i, im in enumerate([held] if held is not None else images):
            if im.dtype not in _IN_DTYPES:
                raise self.error(f"input type {im.dtype} is not supported; give uint8, int8, "
                                 "int16, int32, float16 or float32 data", TypeError)
        given = self._given()
        tensors = {name: [self._param(args, name, i, ndim) for i in range(n)]
                   for name in given if given[name] == "tensor"}
        reduced = self._reduced_axes(batch.layout(), ndim, tensors)
        self._check_shapes(batch, reduced, tensors)
        dense = held is not None or batch.is_dense_tensor()
        mean, inv_std = _statistics(images, batch, reduced, args, given, tensors, dense)
        mean, inv_std = _kernel_params(mean, ndim, dense), _kernel_params(inv_std, ndim, dense)
        out_dtype = types.to_torch_type(args["dtype"])
        from ..kernels.normalize import normalize
        if dense:
            out = normalize([batch.as_torch()], mean, inv_std, args["shift"], out_dtype)[0]
        else:
            out = normalize(images, mean, inv_std, args["shift"], out_dtype)
        return [TensorList.make(out, batch.layout(), device=batch.device)]

    def _param(self, args, name, i, ndim):
        v = args.sample(name, i)
        a = np.asarray(v, dtype=np.float32)
        if a.ndim != ndim:
            raise self.error(f"argument input '{name}' sample {i} has shape {a.shape}; it must "
                             f"have the input's {ndim} dims (extent 1 on reduced axes)",
                             ValueError)
        return torch.from_numpy(np.ascontiguousarray(a))

    def _reduced_axes(self, layout, ndim, tensors):
        names = self.spec.args["axis_names"]
        if names is not None:
            missing = [c for c in names if c not in (layout or "")]
            if missing:
                raise self.error(f"axis_names '{names}': {missing} not in the input layout "
                                 f"'{layout}'", ValueError)
            return sorted({layout.index(c) for c in names})
        axes = self.spec.args["axes"]
        if axes is not None:
            bad = [a for a in axes if not -ndim <= a < ndim]
            if bad:
                raise self.error(f"axes {bad} out of range for samples of {ndim} dims",
                                 ValueError)
            return sorted({a % ndim for a in axes})
        if tensors:  # inferred as DALI does: the dims of extent 1 in every sample's parameter
            params = next(iter(tensors.values()))
            return [d for d in range(ndim) if all(p.shape[d] == 1 for p in params)]
        return list(range(ndim))

    def _check_shapes(self, batch, reduced, tensors):
        """Per-sample parameters fit their samples reduced over `reduced`; with batch=True
        the samples agree outside it (the sample shapes as one array: no loop for a dense batch)."""
        shapes = batch.sample_shapes()
        expected = shapes.copy()
        expected[:, reduced] = 1
        for name, params in tensors.items():
            for i, p in enumerate(params):
                if tuple(p.shape) != tuple(expected[i]):
                    raise self.error(
                        f"argument input '{name}' sample {i} has shape {tuple(p.shape)}; the input of shape "
                        f"{tuple(shapes[i].tolist())} reduced over axes {reduced} needs "
                        f"{tuple(expected[i].tolist())}", ValueError)
        if self.spec.args["batch"]:
            kept = [d for d in range(shapes.shape[1]) if d not in reduced]
            differ = (shapes[:, kept] != shapes[0, kept]).any(axis=1)
            if differ.any():
                i = int(np.argmax(differ))
                raise self.error(
                    f"batch=True needs equal extents in the non-reduced axes {kept}; sample 0 has shape "
                    f"{tuple(shapes[0].tolist())}, sample {i} has {tuple(shapes[i].tolist())}", ValueError)


def _map(f, *xs):
    """f over per-sample lists (ragged batches), or once over dense [N, ...] tensors."""
    lists = [x for x in xs if isinstance(x, list)]
    if not lists:
        return f(*xs)
    return [f(*(x[i] if isinstance(x, list) else x for x in xs)) for i in range(len(lists[0]))]


def _statistics(images, batch, reduced, args, given, tensors, dense):
    """(mean, inv_std), each a dense [N or 1, ...] tensor, a list of per-sample tensors
    (ragged batches) or a tensor shared by all samples; inv_std includes `scale`."""
    def given_param(name):
        if given[name] == "scalar":
            return torch.tensor(args[name], dtype=torch.float32)
        if given[name] == "tensor":
            return torch.stack(tensors[name]) if dense else tensors[name]
        return None

    scale, eps, ddof = args["scale"], args["epsilon"], args["ddof"]
    mean, stddev = given_param("mean"), given_param("stddev")
    if given["stddev"] == "scalar":  # DALI divides by a scalar stddev without a zero check
        s = float(stddev)
        inv_std = torch.tensor(scale / math.sqrt(s * s + eps) if eps else scale / s)
    elif stddev is not None:
        inv_std = _map(lambda s: _inv_of_stddev(s, scale, eps), stddev)
    if mean is not None and stddev is not None:
        return mean, inv_std
    count, m, var = _moments(images, batch, reduced, dense)
    if mean is None and args["batch"]:
        mean = m.mean(0, keepdim=True) if dense else _pool(count, m) / max(sum(count), 1)
    elif mean is None:
        mean = m
    if stddev is not None:
        return mean, inv_std
    # The sum of squares about the mean in use: DALI centres the variance on a given mean.
    ss = _map(lambda c, v, mu, u: c * (v + (mu - u.to(mu.device)) ** 2), count, var, m, mean)
    if args["batch"]:
        ss = ss.sum(0, keepdim=True) if dense else _pool([1] * len(ss), ss)
        count = count * m.shape[0] if dense else sum(count)
    return mean, _map(lambda s, c: _inv_of_sum_squares(s, c, ddof, scale, eps), ss, count)


def _moments(images, batch, dims, dense):
    """(count, mean, biased variance) over the reduced `dims`, per sample: dense [N, ...]
    tensors and one count when the samples share a shape, else lists."""
    if dense:
        x = batch.as_torch().float()
        var, mean = torch.var_mean(x, dim=[d + 1 for d in dims], correction=0, keepdim=True)
        return math.prod(x.shape[d + 1] for d in dims), mean, var
    counts, means, variances = [], [], []
    for im in images:
        count = math.prod(im.shape[d] for d in dims)
        if count == 0:
            shape = [1 if d in dims else e for d, e in enumerate(im.shape)]
            var = mean = torch.zeros(shape, device=im.device)
        else:
            var, mean = torch.var_mean(im.float(), dim=dims, correction=0, keepdim=True)
        counts.append(count)
        means.append(mean)
        variances.append(var)
    return counts, means, variances


def _pool(counts, tensors):
    """sum_i counts[i] * tensors[i] over the samples of a ragged batch."""
    total = None
    for c, t in zip(counts, tensors):
        term = c * t
        total = term if total is None else total + term
    return total


def _kernel_params(p, ndim, dense):
    """A parameter as the kernel's list: per-sample tensors, or 1 shared tensor with the
    samples' dims (plus the batch dim when the batch is one dense tensor)."""
    if isinstance(p, list):
        return p
    return [p.reshape([1] * (ndim + dense)) if p.dim() == 0 else p]


def _inv_of_sum_squares(ss, count, ddof, scale, eps):
    """scale / sqrt(ss / (count - ddof) + eps), 0 where that variance is 0 without epsilon;
    count <= ddof gives 0 without epsilon, scale / sqrt(eps) with it (DALI's rules)."""
    if count > ddof:
        rdiv = float(np.float32(1.0 / (count - ddof)))
    else:
        rdiv = 0.0 if eps else 1.0
        scale = scale if eps else 0.0
    var = ss * rdiv
    if eps:
        return scale * torch.rsqrt(var + eps)
    return torch.where(var != 0, scale * torch.rsqrt(var), torch.zeros_like(var))


def _inv_of_stddev(s, scale, eps):
    if eps:
        return scale * torch.rsqrt(s * s + eps)
    return torch.where(s != 0, scale / s, torch.zeros_like(s))
