"""Random number operators. Each instance owns a NumPy PCG64 generator seeded from its
`seed` (or the pipeline's), so a pipeline with a fixed seed repeats its numbers."""
import numpy as np
import torch

from .. import types
from ..schema import DTYPE, FLOAT, FLOATS, INTS, Arg, register
from ..tensor_list import TensorList
from .base import RandomOperator

_SHAPE = Arg("shape", INTS, None, "Shape of each output sample; a scalar when not given.", per_sample=True,
             check=lambda v: "dimensions must be non-negative" if any(d < 0 for d in v) else None)


def _positive(v):
    return None if v >= 0 else "must not be negative"


class _Distribution(RandomOperator):
    """Shared per-sample shape logic: `shape` argument, or the shape of an optional input."""

    default_dtype = types.FLOAT

    def sample_shapes(self, inputs, args, n):
        if inputs:
            return [tuple(s.shape) for s in inputs[0].as_torch_list()]
        return [tuple(args.sample("shape", i) or ()) for i in range(n)]

    def out_dtype(self, args):
        return types.to_numpy_type(args["dtype"] if args["dtype"] is not None else self.default_dtype)

    def finish(self, samples):
        out = [torch.from_numpy(np.array(s)) for s in samples]
        return [TensorList.make(out, device="cpu") if self.spec.device == "cpu"
                else TensorList.make([s.cuda() for s in out], device="gpu")]


@register("random.uniform", devices=("cpu", "gpu"), inputs=(0, 1), aliases=("Uniform",),
          args=[Arg("range", FLOATS, [-1.0, 1.0], "[lo, hi) of the distribution.", per_sample=True,
                    check=lambda v: None if len(v) == 2 and v[0] <= v[1] else "must be [lo, hi] with lo <= hi"),
                Arg("values", FLOATS, None, "Discrete values to draw from instead of a range.", per_sample=True),
                _SHAPE, Arg("dtype", DTYPE, None, "Output type (FLOAT); integer types draw integers in [lo, hi).",
                            choices=(types.FLOAT, types.FLOAT64, types.UINT8, types.UINT16, types.UINT32,
                                     types.INT8, types.INT16, types.INT32, types.INT64))])
class Uniform(_Distribution):
    """Uniformly distributed numbers in `range`, or drawn from `values`."""

    def run(self, inputs, args, ctx):
        dtype = self.out_dtype(args)
        out = []
        for i, shape in enumerate(self.sample_shapes(inputs, args, ctx.batch_size)):
            values = args.sample("values", i)
            if values:
                out.append(np.asarray(values, np.float32)[self.rng.integers(0, len(values), shape)].astype(dtype))
            else:
                lo, hi = args.sample("range", i)
                drawn = self.rng.uniform(lo, hi, shape)
                out.append((np.floor(drawn) if dtype.kind in "iu" else drawn).astype(dtype))
        return self.finish(out)


@register("random.normal", devices=("cpu", "gpu"), inputs=(0, 1), aliases=("NormalDistribution",),
          args=[Arg("mean", FLOAT, 0.0, "Mean.", per_sample=True),
                Arg("stddev", FLOAT, 1.0, "Standard deviation.", per_sample=True, check=_positive),
                _SHAPE, Arg("dtype", DTYPE, None, "Output type (FLOAT).",
                            choices=(types.FLOAT, types.FLOAT64))])
class Normal(_Distribution):
    """Normally distributed numbers."""

    def run(self, inputs, args, ctx):
        dtype = self.out_dtype(args)
        return self.finish([self.rng.normal(args.sample("mean", i), args.sample("stddev", i), shape).astype(dtype)
                            for i, shape in enumerate(self.sample_shapes(inputs, args, ctx.batch_size))])


@register("random.coin_flip", devices=("cpu", "gpu"), inputs=(0, 1), aliases=("CoinFlip",),
          args=[Arg("probability", FLOAT, 0.5, "Probability of a 1.", per_sample=True,
                    check=lambda p: None if 0.0 <= p <= 1.0 else "must be in [0, 1]"),
                _SHAPE, Arg("dtype", DTYPE, None, "Output type (INT32).",
                            choices=(types.BOOL, types.UINT8, types.INT32))])
class CoinFlip(_Distribution):
    """0/1 values, 1 with `probability` (Bernoulli)."""

    default_dtype = types.INT32

    def run(self, inputs, args, ctx):
        dtype = self.out_dtype(args)
        return self.finish([(self.rng.random(shape) < args.sample("probability", i)).astype(dtype)
                            for i, shape in enumerate(self.sample_shapes(inputs, args, ctx.batch_size))])


@register("random.choice", devices=("cpu",), inputs=(1, 2), input_names=("a", "shape_like"),
          args=[Arg("p", FLOATS, None, "Probabilities of the choices (uniform if not given).", per_sample=True),
                _SHAPE])
class Choice(_Distribution):
    """Random picks from `a`: 0..a-1 for a scalar int, else the elements of a 1D sample."""

    def run(self, inputs, args, ctx):
        choices = inputs[0].as_torch_list()
        shapes = ([tuple(s.shape) for s in inputs[1].as_torch_list()] if len(inputs) > 1
                  else [tuple(args.sample("shape", i) or ()) for i in range(ctx.batch_size)])
        out = []
        for i, (a, shape) in enumerate(zip(choices, shapes)):
            a = a.numpy()
            if a.ndim == 0:
                if a.dtype.kind not in "iu":
                    raise self.error(f"sample {i}: a scalar `a` must be an integer, got {a.dtype}", TypeError)
                values = np.arange(int(a), dtype=a.dtype)
            else:
                values = a.reshape(-1)
            if len(values) == 0:
                raise self.error(f"sample {i}: nothing to choose from", ValueError)
            p = args.sample("p", i)
            if p is not None and len(p) != len(values):
                raise self.error(f"sample {i}: p has {len(p)} entries for {len(values)} choices", ValueError)
            if p is not None and abs(sum(p) - 1.0) > 1e-4:
                raise self.error(f"sample {i}: p must sum to 1, sums to {sum(p)}", ValueError)
            out.append(values[self.rng.choice(len(values), size=shape, p=p)])
        return self.finish(out)


