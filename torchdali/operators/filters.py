"""Filters: gaussian_blur, on the `torchdali::separable_conv` kernel (csrc/): one 1D
Gaussian window per spatial axis and sample, one launch per axis for the whole batch.

DALI's rules are kept: the window size from sigma is 2 * ceil(3 * sigma) + 1, sigma from a
window size is (radius - 1) * 0.3 + 0.8 (OpenCV's rule); the weights are DALI's
float32 Gaussian normalized to sum 1; borders reflect-101; channels (first or last) and
frames (a leading F) are not blurred across."""
import functools
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
    return None if all(s >= 0 for s in v) else "must be >= 0 (and not NaN)"


def _window_ok(v):
    if all(w == 0 or (w > 0 and w % 2 == 1) for w in v):
        return None
    return "must be odd and positive (or 0: derived from sigma)"


@functools.lru_cache(maxsize=1024)
def gaussian_window(sigma, size):
    """DALI's Gaussian weights: exp(-x^2 / (2 sigma^2)) for x = -r..r, in float32, scaled to
    sum 1 (the outer half summed in order, doubled, plus the centre's 1)."""
    r = (size - 1) // 2
    sigma = np.float32(sigma)
    exp_scale = np.float32(0.5) / (sigma * sigma)
    x = np.arange(-r, 0, dtype=np.float32)
    half = np.exp(-(x * x * exp_scale).astype(np.float64)).astype(np.float32)
    total = np.float32(0)
    for v in half:
        total = np.float32(total + v)
    scale = np.float32(1) / np.float32(total * np.float32(2) + np.float32(1))
    half = half * scale
    return np.concatenate([half, [scale], half[::-1]]).astype(np.float32)


def window_size_for(sigma):
    return 2 * math.ceil(np.float32(sigma) * np.float32(3)) + 1


def sigma_for(size):
    return float(np.float32(((size - 1) // 2 - 1) * 0.3 + 0.8))


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
        params = [self._sample_windows(args, i, count) for i in range(n)]
        shared = all(p == params[0] for p in params)
        sizes = [s for p in (params[:1] if shared else params) for s, _ in p]
        windows = np.concatenate([gaussian_window(sg, s)
                                  for p in (params[:1] if shared else params) for s, sg in p])
        windows = torch.from_numpy(windows)
        if shared and batch.is_dense_tensor():  # the batch as one sample with its N in `outer`
            out = separable_conv([batch.as_torch()], windows, sizes, first + 1, count, out_dtype)[0]
        else:
            if shared:
                sizes = sizes * n
                windows = windows.repeat(n)
            out = separable_conv(images, windows, sizes, first, count, out_dtype)
        return [TensorList.make(out, batch.layout(), device=batch.device)]

    def _out_dtype(self, args, in_dtype):
        if args["dtype"] is None:
            return in_dtype
        out = types.to_torch_type(args["dtype"])
        if out not in (in_dtype, torch.float32):
            raise self.error(f"argument 'dtype' = {args['dtype']}: the output type must be the "
                             f"input's ({in_dtype}) or FLOAT", ValueError)
        return out

    def _per_axis(self, args, name, i, count):
        v = list(args.sample(name, i))
        if len(v) == 1:
            return v * count
        if len(v) != count:
            raise self.error(f"sample {i}: argument '{name}' = {v} must have 1 or {count} "
                             f"values (one per data axis)", ValueError)
        return v

    def _sample_windows(self, args, i, count):
        """((window size, sigma) per data axis, outermost first) of sample i."""
        sigmas = self._per_axis(args, "sigma", i, count)
        sizes = self._per_axis(args, "window_size", i, count)
        out = []
        for axis, (sigma, size) in enumerate(zip(sigmas, sizes)):
            if sigma == 0 and size == 0:
                raise self.error(f"sample {i}, axis {axis}: give sigma or window_size (both "
                                 "are 0)", ValueError)
            if size == 0:
                size = window_size_for(sigma)
            elif sigma == 0:
                sigma = sigma_for(size)
            out.append((int(size), float(sigma)))
        return out
