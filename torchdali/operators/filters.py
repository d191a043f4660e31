"""Filters: gaussian_blur, on the `torchdali::separable_conv` kernel (csrc/): one 1D
Gaussian window per spatial axis and sample, one launch per axis for the whole batch.

DALI's rules are kept: the window size from sigma is 2 * ceil(3 * sigma) + 1, sigma from a
window size is (radius - 1) * 0.3 + 0.8 (OpenCV's rule); the weights are DALI's
float32 Gaussian normalized to sum 1; borders reflect-101; channels (first or last) and
frames (a leading F) are not blurred across."""
import math

import numpy as np
import torch

from .. import types
from ..schema import DTYPE, FLOATS, INTS, Arg, register
from ..tensor_list import TensorList
from .base import Operator

_MAX_AXES = 3
_DTYPES = (torch.uint8, torch.float16, torch.float32)


def _sigma_ok(v):
    return None if all(0 <= s < math.inf for s in v) else "must be >= 0 and finite"


MAX_WINDOW = 2 ** 24 + 1  # a window's weights are one array; wider ones fold onto the image anyway


def _window_ok(v):
    if all(w == 0 or (0 < w <= MAX_WINDOW and w % 2 == 1) for w in v):
        return None
    return f"must be odd, positive and at most {MAX_WINDOW:,} (or 0: derived from sigma)"


def gaussian_windows(sigmas, sizes):
    """DALI's Gaussian weights for each (sigma, odd size) pair, all pairs at once and
    concatenated in order: exp(-x^2 / (2 sigma^2)) for x = -r..r, in float32, scaled to sum 1
    (the outer half summed in order, doubled, plus the centre's 1)."""
    sigmas = np.asarray(sigmas, np.float32)
    r = (np.asarray(sizes, np.int64) - 1) // 2
    x = np.arange(-int(r.max(initial=0)), 0, dtype=np.float32)  # the outer half, padded on the left
    exp_scale = np.float32(0.5) / (sigmas * sigmas)
    valid = x[None, :] >= -r[:, None]
    half = np.exp(-(x[None, :] * x[None, :] * exp_scale[:, None]).astype(np.float64)).astype(np.float32)
    half = np.where(valid, half, np.float32(0))  # leading zeros leave the float32 sums exact
    total = np.add.accumulate(half, axis=1, dtype=np.float32)[:, -1] if len(x) else np.zeros(len(r), np.float32)
    scale = np.float32(1) / (total * np.float32(2) + np.float32(1))
    half = half * scale[:, None]
    full = np.concatenate([half, scale[:, None], half[:, ::-1]], axis=1)
    keep = np.concatenate([valid, np.ones((len(r), 1), bool), valid[:, ::-1]], axis=1)
    return full[keep].astype(np.float32)


def folded_windows(sigmas, sizes, extents):
    """(weights, sizes) as gaussian_windows gives them for [N, k] sigmas and sizes, where a
    window wider than its axis (size > 2 * extent - 1) is folded onto it. With reflect-101
    borders an axis of extent n repeats every P = 2 (n - 1) pixels, so the weights of taps P
    apart add up: P + 1 taps (the last one 0) do what the whole window does, whatever sigma
    (a blur's cost would grow with it). Once sigma >= P the folded Gaussian is flat to float32
    precision (Poisson summation: the ripple is exp(-2 pi^2 sigma^2 / P^2)): 1 / P each."""
    weights, out_sizes = [], np.array(sizes, np.int64)
    for (i, d), size in np.ndenumerate(out_sizes):
        sigma, n = float(sigmas[i, d]), int(extents[i, d])
        if size <= 2 * n - 1:
            weights.append(gaussian_windows([sigma], [size]))
            continue
        period = 2 * (n - 1)
        if period == 0:
            folded = np.ones(1, np.float32)
        elif sigma >= period:
            folded = np.full(period + 1, 1 / period, np.float32)
            folded[-1] = 0
        else:  # the tail beyond 12 sigma is below float32's resolution of the sum
            r = min((size - 1) // 2, int(np.ceil(12 * sigma)) + 1)
            taps = (np.arange(-r, r + 1) + n - 1) % period  # the folded window's tap, 0..P-1
            folded = np.bincount(taps, gaussian_windows([sigma], [2 * r + 1]).astype(np.float64),
                                 minlength=period + 1).astype(np.float32)
        weights.append(folded)
        out_sizes[i, d] = len(folded)
    return np.concatenate(weights), out_sizes


def window_sizes_for(sigmas):
    """DALI's window size for each sigma: 2 * ceil(3 * sigma) + 1, in float32."""
    return 2 * np.ceil(np.asarray(sigmas, np.float32) * np.float32(3)).astype(np.int64) + 1


def sigmas_for(sizes):
    """DALI's (OpenCV's) sigma for each window size: (radius - 1) * 0.3 + 0.8, in float32."""
    return (((np.asarray(sizes, np.int64) - 1) // 2 - 1) * 0.3 + 0.8).astype(np.float32)


def spatial_axes(op, layout, ndim):
    """(first, count) of the data axes DALI blurs: all (up to 3) without a layout; else the
    axes after a leading C and/or F, without a trailing C."""
    if not layout:
        if ndim > _MAX_AXES:
            raise op.error(f"input without a layout has {ndim} dims; give a layout (e.g. "
                           f"'FHWC', 'DHWC') or at most {_MAX_AXES} dims", ValueError)
        return 0, ndim
    if len(layout) != ndim:
        raise op.error(f"layout '{layout}' does not match samples of {ndim} dims", ValueError)
    first, last = 0, ndim
    if layout.endswith("C"):
        last -= 1
    while first < min(2, last) and layout[first] in "CF":
        first += 1
    inner = layout[first:last]
    if "C" in inner:
        raise op.error(f"layout '{layout}': only channel-first or channel-last layouts are "
                       "supported", ValueError)
    if "F" in inner:
        raise op.error(f"layout '{layout}': for sequences, the layout must begin with 'F' or "
                       "'CF'", ValueError)
    if not 1 <= last - first <= _MAX_AXES:
        raise op.error(f"layout '{layout}' has {last - first} data axes; 1 to {_MAX_AXES} are "
                       "supported", ValueError)
    return first, last - first


@register("gaussian_blur", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("GaussianBlur",),
          args=[
              Arg("sigma", FLOATS, [0.0], "Sigma of the Gaussian: one value, or one per data "
                  "axis (outermost first); derived from window_size when 0.", per_sample=True,
                  check=_sigma_ok),
              Arg("window_size", INTS, [0], "Window diameter: one odd value, or one per data "
                  "axis; 2 * ceil(3 * sigma) + 1 when 0.", per_sample=True, check=_window_ok),
              Arg("dtype", DTYPE, None, "Output type: the input's (default) or FLOAT."),
          ])
class GaussianBlur(Operator):
    """Blur images (HWC, CHW), sequences (FHWC, ...) and volumes (DHWC, ...) with a
    separable Gaussian filter, per-sample sigma and window size."""

    def run(self, inputs, args, ctx):
        from ..kernels.separable_conv import separable_conv

        batch = inputs[0]
        images = batch.as_torch_list()
        n = len(images)
        if n == 0:
            return [batch]
        for im in images:
            if im.dtype not in _DTYPES:
                raise self.error(f"input type {im.dtype} is not supported; give uint8, float16 "
                                 "or float32 data", TypeError)
        ndim = self.check_rank(images)
        first, count = spatial_axes(self, batch.layout(), ndim)
        out_dtype = self._out_dtype(args, images[0].dtype)
        sigmas, sizes = self._windows(args, n, count)  # [N, count], or [1, count] for the whole batch
        extents = np.array([im.shape[first:first + count] for im in images], np.int64).reshape(n, count)
        if (sizes > 2 * extents - 1).any():  # windows wider than their images: folded, per sample
            sigmas, sizes = (np.broadcast_to(v, (n, count)) for v in (sigmas, sizes))
            windows, sizes = folded_windows(sigmas, sizes, extents)
            return [TensorList.make(separable_conv(images, torch.from_numpy(windows), sizes.ravel().tolist(), first,
                                                   count, out_dtype), batch.layout(), device=batch.device)]
        windows = torch.from_numpy(gaussian_windows(sigmas.ravel(), sizes.ravel()))
        shared = len(sizes) == 1
        if shared and batch.is_dense_tensor():  # the batch as one sample with its N in `outer`
            out = separable_conv([batch.as_torch()], windows, sizes[0].tolist(), first + 1, count, out_dtype)[0]
        else:
            if shared:
                sizes = np.repeat(sizes, n, axis=0)
                windows = windows.repeat(n)
            out = separable_conv(images, windows, sizes.ravel().tolist(), first, count, out_dtype)
        return [TensorList.make(out, batch.layout(), device=batch.device)]

    def _out_dtype(self, args, in_dtype):
        if args["dtype"] is None:
            return in_dtype
        out = types.to_torch_type(args["dtype"])
        if out not in (in_dtype, torch.float32):
            raise self.error(f"argument 'dtype' = {args['dtype']}: the output type must be the "
                             f"input's ({in_dtype}) or FLOAT", ValueError)
        return out

    def _per_axis(self, args, name, n, count):
        """An argument as one value per data axis, outermost first: [N, count] when it is
        per-sample, else [1, count]."""
        v, per_sample = args.batch(name), args.is_per_sample(name)
        if per_sample and isinstance(v, np.ndarray):  # [N, k]
            a = v.astype(np.float64).reshape(len(v), -1)
            rows = a[:1]  # all rows have k values
        else:
            rows = v if per_sample else [v]  # ragged rows come as a list
        for i, row in enumerate(rows):
            if len(row) not in (1, count):
                where = f"sample {i}: " if per_sample else ""
                raise self.error(f"{where}argument '{name}' = {list(row)} must have 1 or {count} values (one per "
                                 "data axis)", ValueError)
        if per_sample and isinstance(v, np.ndarray):
            return np.broadcast_to(a, (len(a), count))
        return np.stack([np.broadcast_to(np.asarray(r, np.float64), (count,)) for r in rows])

    def _windows(self, args, n, count):
        """(sigma, window size) per data axis: float and int arrays [N, count], or [1, count]
        when neither argument is per-sample; 0 in one is derived from the other."""
        sigmas, sizes = self._per_axis(args, "sigma", n, count), self._per_axis(args, "window_size", n, count)
        sigmas, sizes = np.broadcast_arrays(sigmas, sizes)
        none = (sigmas == 0) & (sizes == 0)
        if none.any():
            i, axis = (int(k) for k in np.argwhere(none)[0])
            raise self.error(f"sample {i}, axis {axis}: give sigma or window_size (both are 0)", ValueError)
        sizes = np.where(sizes == 0, window_sizes_for(sigmas), sizes).astype(np.int64)
        sigmas = np.where(sigmas == 0, sigmas_for(sizes), sigmas)
        return sigmas, sizes
