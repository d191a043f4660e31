"""Random number operators. Each instance owns a NumPy PCG64 generator seeded from its
`seed` (or the pipeline's), so a pipeline with a fixed seed repeats its numbers."""
import numpy as np
import torch

from .. import types
from ..schema import DTYPE, FLOAT, FLOATS, INTS, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, RandomOperator

_SHAPE = Arg("shape", INTS, None, "Shape of each output sample; a scalar when not given.", per_sample=True,
             check=lambda v: "dimensions must be non-negative" if any(d < 0 for d in v) else None)


def _positive(v):
    return None if v >= 0 else "must not be negative"


class _Distribution(RandomOperator):
    """A whole batch drawn at once: shape from the `shape` argument or the optional input's
    samples; per-sample parameters broadcast over each sample's values."""

    default_dtype = types.FLOAT

    def plan(self, inputs):
        a = self.spec.args
        dtype = a["dtype"] if a.get("dtype") is not None else self.default_dtype
        self.dtype = types.to_numpy_type(dtype)
        ndim = inputs[0].ndim if inputs else None if "shape" in self.spec.arg_input_names else len(a["shape"] or ())
        device = "cpu" if self.spec.device == "cpu" else "gpu"
        return [BatchSpec(device, types.to_torch_type(dtype), ndim, "")], self.step

    def batch_shape(self, inputs, args, n):
        """(n, *shape) when every sample has one shape, else the list of sample shapes."""
        if inputs:
            dense = inputs[0].dense_tensor()
            if dense is not None:
                return tuple(dense.shape)
            shapes = [tuple(s.shape) for s in inputs[0].as_torch_list()]
        elif not args.is_per_sample("shape"):
            return (n,) + tuple(args["shape"] or ())
        else:
            shapes = [tuple(args.sample("shape", i) or ()) for i in range(n)]
        return (n,) + shapes[0] if len(set(shapes)) == 1 else shapes

    def step(self, inputs, args, ctx):
        n = len(inputs[0]) if inputs else ctx.batch_size
        shape = self.batch_shape(inputs, args, n)
        if isinstance(shape, tuple):
            out = torch.from_numpy(self.draw(shape, _Params(args, len(shape))).astype(self.dtype, copy=False))
        else:  # samples of different shapes: one draw each
            out = [torch.from_numpy(self.draw((1,) + s, _Params(args, len(s) + 1, i))[0].astype(self.dtype))
                   for i, s in enumerate(shape)]
        if self.spec.device != "cpu":
            out = out.to(ctx.cuda_device) if isinstance(out, torch.Tensor) else [t.to(ctx.cuda_device) for t in out]
        return [TensorList.make(out, device="cpu" if self.spec.device == "cpu" else "gpu")]

    def draw(self, shape, params):
        """Values of `shape` (batch first) as a NumPy array."""
        raise NotImplementedError


class _Params:
    """Argument values shaped to broadcast over a draw of `ndim` dims, batch first: all
    samples, or only sample `i`."""

    def __init__(self, args, ndim, i=None):
        self.args, self.ndim, self.i = args, ndim, i

    def __call__(self, name, column=None):
        v = self.args.batch(name)
        if not isinstance(v, np.ndarray) or not self.args.is_per_sample(name):
            return v if column is None else v[column]
        if column is not None:
            v = v[:, column]
        if self.i is not None:
            v = v[self.i:self.i + 1]
        return v.reshape((len(v),) + (1,) * (self.ndim - 1))


@register("random.uniform", devices=("cpu", "gpu"), inputs=(0, 1), aliases=("Uniform",), deprecated_names=("uniform",),
          args=[Arg("range", FLOATS, [-1.0, 1.0], "[lo, hi) of the distribution.", per_sample=True,
                    check=lambda v: None if len(v) == 2 and v[0] <= v[1] else "must be [lo, hi] with lo <= hi"),
                Arg("values", FLOATS, None, "Discrete values to draw from instead of a range.", per_sample=True),
                _SHAPE, Arg("dtype", DTYPE, None, "Output type (FLOAT); integer types draw integers in [lo, hi).",
                            choices=(types.FLOAT, types.FLOAT64, types.UINT8, types.UINT16, types.UINT32,
                                     types.INT8, types.INT16, types.INT32, types.INT64))])
class Uniform(_Distribution):
    """Uniformly distributed numbers in `range`, or drawn from `values`."""

    def draw(self, shape, p):
        values = p.args.batch("values")
        if isinstance(values, list) and p.args.is_per_sample("values"):  # a different count per sample
            rows = values if p.i is None else [values[p.i]]
            return np.stack([np.asarray(v, np.float32)[self.rng.integers(0, len(v), shape[1:])] for v in rows])
        if values is not None and len(values):
            table = np.asarray(values, np.float32)
            if table.ndim == 1:
                return table[self.rng.integers(0, len(table), shape)]
            table = table if p.i is None else table[p.i:p.i + 1]
            picks = self.rng.integers(0, table.shape[1], shape).reshape(shape[0], -1)
            return np.take_along_axis(table, picks, axis=1).reshape(shape)
        drawn = self.rng.uniform(p("range", 0), p("range", 1), shape)
        return np.floor(drawn) if self.dtype.kind in "iu" else drawn


@register("random.normal", devices=("cpu", "gpu"), inputs=(0, 1), aliases=("NormalDistribution",),
          deprecated_names=("normal_distribution",),
          args=[Arg("mean", FLOAT, 0.0, "Mean.", per_sample=True),
                Arg("stddev", FLOAT, 1.0, "Standard deviation.", per_sample=True, check=_positive),
                _SHAPE, Arg("dtype", DTYPE, None, "Output type (FLOAT).",
                            choices=(types.FLOAT, types.FLOAT64))])
class Normal(_Distribution):
    """Normally distributed numbers."""

    def draw(self, shape, p):
        return self.rng.normal(p("mean"), p("stddev"), shape)


@register("random.beta", devices=("cpu",), inputs=(0, 1),
          args=[Arg("alpha", FLOAT, 1.0, "The alpha parameter.", per_sample=True,
                    check=lambda v: None if v > 0 else "must be positive"),
                Arg("beta", FLOAT, 1.0, "The beta parameter.", per_sample=True,
                    check=lambda v: None if v > 0 else "must be positive"),
                _SHAPE, Arg("dtype", DTYPE, None, "Output type (FLOAT).",
                            choices=(types.FLOAT, types.FLOAT64))])
class Beta(_Distribution):
    """Numbers in [0, 1] from the beta distribution (mixup's mixing weight)."""

    def draw(self, shape, p):
        return self.rng.beta(p("alpha"), p("beta"), shape)


@register("random.coin_flip", devices=("cpu", "gpu"), inputs=(0, 1), aliases=("CoinFlip",),
          deprecated_names=("coin_flip",),
          args=[Arg("probability", FLOAT, 0.5, "Probability of a 1.", per_sample=True,
                    check=lambda p: None if 0.0 <= p <= 1.0 else "must be in [0, 1]"),
                _SHAPE, Arg("dtype", DTYPE, None, "Output type (INT32).",
                            choices=(types.BOOL, types.UINT8, types.INT32))])
class CoinFlip(_Distribution):
    """0/1 values, 1 with `probability` (Bernoulli)."""

    default_dtype = types.INT32

    def draw(self, shape, p):
        return self.rng.random(shape) < p("probability")


@register("random.choice", devices=("cpu",), inputs=(1, 2), input_names=("a", "shape_like"),
          args=[Arg("p", FLOATS, None, "Probabilities of the choices (uniform if not given).", per_sample=True),
                _SHAPE])
class Choice(RandomOperator):
    """Random picks from `a`: 0..a-1 for a scalar int, else the elements of a 1D sample."""

    def run(self, inputs, args, ctx):
        choices = inputs[0].as_torch_list()
        shapes = ([tuple(s.shape) for s in inputs[1].as_torch_list()] if len(inputs) > 1
                  else [tuple(args.sample("shape", i) or ()) for i in range(ctx.batch_size)]
                  if args.is_per_sample("shape") else [tuple(args["shape"] or ())] * ctx.batch_size)
        if choices and all(a is choices[0] for a in choices) and not args.is_per_sample("p") \
                and all(s == shapes[0] for s in shapes):  # one `a`, p and shape (a constant `a`): one draw
            values = self._values(choices[0], 0)
            p = self._probabilities(args["p"], values, 0)
            picks = values[self.rng.choice(len(values), size=(len(choices),) + shapes[0], p=p)]
            return [TensorList.make(torch.from_numpy(np.array(picks)), device="cpu")]
        out = []
        for i, (a, shape) in enumerate(zip(choices, shapes)):
            values = self._values(a, i)
            p = self._probabilities(args.sample("p", i), values, i)
            out.append(torch.from_numpy(np.array(values[self.rng.choice(len(values), size=shape, p=p)])))
        return [TensorList.make(out, device="cpu")]

    def _values(self, a, i):
        """What sample i chooses from: 0..a-1 for a scalar int `a`, else a's elements."""
        a = a.numpy()
        if a.ndim == 0:
            if a.dtype.kind not in "iu":
                raise self.error(f"sample {i}: a scalar `a` must be an integer, got {a.dtype}", TypeError)
            values = np.arange(int(a), dtype=a.dtype)
        else:
            values = a.reshape(-1)
        if len(values) == 0:
            raise self.error(f"sample {i}: nothing to choose from", ValueError)
        return values

    def _probabilities(self, p, values, i):
        if p is not None and len(p) != len(values):
            raise self.error(f"sample {i}: p has {len(p)} entries for {len(values)} choices", ValueError)
        if p is not None and abs(sum(p) - 1.0) > 1e-4:
            raise self.error(f"sample {i}: p must sum to 1, sums to {sum(p)}", ValueError)
        return p


