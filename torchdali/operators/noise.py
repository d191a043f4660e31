"""Noise operators: noise.gaussian, noise.salt_and_pepper and noise.shot. The random numbers are
drawn on the host by the operator's own generator (a seed repeats them, a checkpoint keeps
them, and the 'gpu' device gives the 'cpu' result); they are applied to the whole batch by
torch ops on the batch's device. Integer results are rounded and saturated as DALI's
ConvertSat does; the output has the input's shape, type and layout."""
import numpy as np
import torch

from .. import types
from ..schema import BOOL, FLOAT, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, RandomOperator
from .conversions import convert_saturate
from .erase import static_cast, where

NOISE_DTYPES = (torch.uint8, torch.int8, torch.uint16, torch.int16, torch.uint32, torch.int32, torch.uint64,
                torch.int64, torch.float32)
# Types whose gaussian noise DALI adds in double precision (float for the others).
_DOUBLE_DTYPES = (torch.uint32, torch.int32, torch.uint64, torch.int64)
# Shot noise's Poisson draws are capped here; DALI's 32-bit counts wrap far below it.
_MAX_LAMBDA = 1e15


def saturate(x, dtype):
    """DALI's ConvertSat of floats `x` to `dtype`: rounded half away from zero and clamped to the
    type's range (exact at the ends of the 64-bit types); NaN as DALI's C++ cast leaves it (0,
    or the smallest value of int32 and int64, 2^63 for uint64)."""
    if dtype.is_floating_point:
        return x.to(dtype)
    nan = int(static_cast(np.float32([np.nan]), dtype)[0])
    out = convert_saturate(x, dtype)
    if nan:
        out = where(torch.isnan(x), torch.tensor(nan, dtype=out.dtype).to(x.device), out)
    return out


def _per_element(args, name, sizes, dtype):
    """Argument `name` as `dtype` (DALI reads it as float32): a scalar, or one value per
    element of the batch's flat buffer where it is given per sample."""
    v = np.asarray(args.batch(name), np.float32).astype(dtype)
    return np.repeat(v, sizes) if v.ndim else v


def _per_sample(args, name, n, ndim):
    """Argument `name` as float32, shaped [n, 1, ...] to broadcast over a dense batch of n samples."""
    v = np.asarray(args.batch(name), np.float32)
    return np.broadcast_to(v, (n,)).reshape((n,) + (1,) * ndim)


class _Noise(RandomOperator):
    """Shared checks: the input's type must be one of DALI's noise types."""

    def plan(self, inputs):
        spec = inputs[0]
        self.check_dtype(spec.dtype)
        device = "cpu" if self.spec.device == "cpu" else "gpu"
        return [BatchSpec(device, spec.dtype, spec.ndim, spec.layout)], self.step

    def check_dtype(self, dtype):
        if dtype is not None and dtype not in NOISE_DTYPES:
            names = ", ".join(str(types.to_dali_type(d)).replace("DALIDataType.", "") for d in NOISE_DTYPES)
            raise self.error(f"input type {types.to_dali_type(dtype)} is not supported; give one of {names}",
                             TypeError)

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        if not len(batch):
            return [batch]
        self.check_dtype(types.to_torch_type(batch.dtype))
        try:
            flat, shapes = batch.flat()
        except ValueError as e:  # samples of different ndim
            raise self.error(str(e), ValueError) from None
        out = self.noisy(flat, shapes.prod(axis=1), args)
        return [TensorList.from_flat(out, shapes, batch.layout(), device=batch.device)]

    def noisy(self, flat, sizes, args):
        """The batch's flat buffer with noise; `sizes`: each sample's number of elements."""
        raise NotImplementedError


@register("noise.gaussian", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("mean", FLOAT, 0.0, "Mean of the distribution.", per_sample=True),
    Arg("stddev", FLOAT, 1.0, "Standard deviation of the distribution.", per_sample=True),
])
class GaussianNoise(_Noise):
    """Adds normally distributed noise to every element: out = ConvertSat(in + N(mean, stddev)),
    in float (double for 32- and 64-bit integers), as DALI does."""

    def noisy(self, flat, sizes, args):
        ftype = np.float64 if flat.dtype in _DOUBLE_DTYPES else np.float32
        noise = self.rng.standard_normal(int(sizes.sum()), dtype=ftype)
        with np.errstate(over="ignore", invalid="ignore"):  # to inf and NaN, as DALI's float math
            noise = noise * _per_element(args, "stddev", sizes, ftype) + _per_element(args, "mean", sizes, ftype)
        noise = torch.from_numpy(noise).to(flat.device)
        if flat.dtype == torch.float32:
            return flat + noise
        return saturate(flat.to(noise.dtype) + noise, flat.dtype)


@register("noise.shot", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("factor", FLOAT, 12.0, "Value of one event: out = poisson(max(0, in / factor)) * factor; 0 gives zeros, "
        "as DALI 2.4 does. When not given, 12: what DALI 2.4 applies (its documented default is 20).",
        per_sample=True),
])
class ShotNoise(_Noise):
    """Shot (Poisson) noise: each element is the count of a Poisson process whose expected
    value is in / factor, times factor; the results are multiples of factor."""

    def noisy(self, flat, sizes, args):
        factor = _per_element(args, "factor", sizes, np.float32)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            lam = flat.cpu().float().numpy() * (np.float32(1) / factor)
            lam = np.where((lam > 0) & (factor != 0), np.minimum(lam, _MAX_LAMBDA), 0.0)
            counts = self.rng.poisson(lam).astype(np.float32) * factor
        return saturate(torch.from_numpy(np.ascontiguousarray(counts, np.float32)).to(flat.device), flat.dtype)


@register("noise.salt_and_pepper", devices=("cpu", "gpu"), inputs=(1, 1), args=[
    Arg("prob", FLOAT, 0.05, "Probability of a value to be salt or pepper.", per_sample=True,
        check=lambda v: None if 0.0 <= v <= 1.0 else "must be in [0, 1]"),
    Arg("salt_vs_pepper", FLOAT, 0.5, "Probability of a noisy value to be salt (else pepper).", per_sample=True,
        check=lambda v: None if 0.0 <= v <= 1.0 else "must be in [0, 1]"),
    Arg("salt_val", FLOAT, None, "Value of salt: the type's largest value (1 for floats) when not given; "
        "converted to the input's type as DALI does (a C++ cast: no rounding or saturation).", per_sample=True),
    Arg("pepper_val", FLOAT, None, "Value of pepper: the type's smallest value (-1 for floats) when not given; "
        "converted as salt_val.", per_sample=True),
    Arg("per_channel", BOOL, False, "Noise each channel on its own; else a pixel's channels are all kept, all "
        "salt or all pepper (the layout's 'C' must be first or last; last where there is no layout)."),
])
class SaltAndPepperNoise(_Noise):
    """Replaces values by salt (`salt_val`) or pepper (`pepper_val`) with probability `prob`,
    salt with probability `salt_vs_pepper` among them."""

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        if not len(batch):
            return [batch]
        dtype = types.to_torch_type(batch.dtype)
        self.check_dtype(dtype)
        channel_dim = None if self.spec.args["per_channel"] else self._channel_dim(batch)
        dense = batch.dense_tensor()
        if dense is not None:
            out = self._noisy(dense, channel_dim, args, dtype)
        else:
            out = [self._noisy(s[None], channel_dim, args.subset([i]), dtype)[0]
                   for i, s in enumerate(batch.as_torch_list())]
        return [TensorList.make(out, batch.layout(), device=batch.device)]

    def _channel_dim(self, batch):
        """The samples' channel dim (shared by all the values of a pixel)."""
        layout, ndim = batch.layout(), batch.sample(0).dim()
        c = layout.find("C") if layout else ndim - 1
        if ndim and c not in (0, ndim - 1):
            raise self.error(f"with per_channel=False the layout's 'C' must be its first or last axis (layout "
                             f"'{layout}'); give per_channel=True, or such a layout", ValueError)
        return max(c, 0)

    def _values(self, args, name, n, ndim, dtype, default):
        """Salt or pepper for n samples as a tensor of `dtype` [n, 1, ...]."""
        v = args.batch(name)
        if v is None:
            values = np.full(n, default, types.to_numpy_type(types.to_dali_type(dtype)))
        else:
            values = static_cast(np.broadcast_to(np.asarray(v, np.float32), (n,)), dtype)
        return torch.from_numpy(values.reshape((n,) + (1,) * ndim))

    def _noisy(self, x, channel_dim, args, dtype):
        """x: a dense batch [n, ...] with salt and pepper."""
        n, ndim = x.shape[0], x.dim() - 1
        shape = list(x.shape)
        if channel_dim is not None and ndim:
            shape[channel_dim + 1] = 1  # one draw per pixel, for all its channels
        u = self.rng.random(shape, dtype=np.float32)
        prob = _per_sample(args, "prob", n, ndim)
        noisy = torch.from_numpy(u < prob).to(x.device)
        salty = torch.from_numpy(u < prob * _per_sample(args, "salt_vs_pepper", n, ndim)).to(x.device)
        info = None if dtype.is_floating_point else torch.iinfo(dtype)
        salt = self._values(args, "salt_val", n, ndim, dtype, 1.0 if info is None else info.max).to(x.device)
        pepper = self._values(args, "pepper_val", n, ndim, dtype, -1.0 if info is None else info.min).to(x.device)
        return where(salty, salt, where(noisy, pepper, x))
