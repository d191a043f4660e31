"""Crop windows for a whole batch at once, as DALI places them: fixed windows at
`crop_pos * (size - crop)` (the position as a float32, then rounded or truncated), and random
windows as DALI's RandomCropGenerator draws them (log-uniform aspect ratio, uniform area,
`num_attempts` tries, then its fallback). A window is a row (y, x, h, w) of an [N, 4]
int64 array; image sizes come as an [N, 2] array of (height, width)."""
import math

import numpy as np

_F32 = np.float32


def round_half_away(v):
    """Round to the nearest integer, halves away from zero, as C's round / llround do, and
    exactly for every double (0.49999999999999994 stays 0): a Python int for a scalar, an
    int64 array for an array."""
    if np.ndim(v) == 0:
        a = abs(v)
        r = math.floor(a)
        r += 1 if a - r >= 0.5 else 0
        return int(r) if v >= 0 else -int(r)
    a = np.abs(np.asarray(v, np.float64))
    r = np.floor(a)
    r += (a - r) >= 0.5
    return (np.sign(v) * r).astype(np.int64)


def place(pos, room, rounding="round"):
    """DALI's anchor: the position as a float32, times the room (exact in float64), rounded
    half away from zero (or truncated): 0.7 * 195 is 136.5 in float64 but
    float32(0.7) * 195 = 136.499998, so row 136."""
    v = np.asarray(pos, _F32).astype(np.float64) * np.asarray(room, np.float64)
    return round_half_away(v) if rounding == "round" else np.trunc(v).astype(np.int64)


def crop_windows(op, hw, args, rounding="round"):
    """The (y, x, h, w) windows of the crop arguments (crop / crop_h / crop_w, crop_pos_y /
    crop_pos_x) over images of sizes `hw`; None when no sample asks for a crop. A sample
    whose crop size is 0 in both axes keeps the whole image. Fractional sizes are
    truncated (4.6 -> 4 rows), as in DALI."""
    n = len(hw)
    crop = args.batch("crop")
    if crop is None:
        ch = cw = np.zeros(n)
    else:
        crop = np.asarray(crop, np.float64)
        if crop.shape[-1] != 2:
            raise op.error(f"argument 'crop' must be (height, width), got {crop.tolist()}", ValueError)
        ch, cw = np.broadcast_to(crop[..., 0], n), np.broadcast_to(crop[..., 1], n)
    ch = np.where(np.asarray(args.batch("crop_h")) != 0, args.batch("crop_h"), ch)
    cw = np.where(np.asarray(args.batch("crop_w")) != 0, args.batch("crop_w"), cw)
    none = (ch == 0) & (cw == 0)
    if none.all():
        return None
    bad = (ch < 0) | (cw < 0) | ~np.isfinite(ch) | ~np.isfinite(cw)
    if bad.any():
        i = int(np.argmax(bad))
        raise op.error(f"sample {i}: crop size ({ch[i]}, {cw[i]}) is not valid: sizes must be finite and "
                       ">= 0", ValueError, sample=i)
    h, w = hw[:, 0], hw[:, 1]
    ch = np.where(ch != 0, np.trunc(ch), h).astype(np.int64)
    cw = np.where(cw != 0, np.trunc(cw), w).astype(np.int64)
    bad = ((ch <= 0) | (cw <= 0)) & ~none
    if bad.any():
        i = int(np.argmax(bad))
        raise op.error(f"sample {i}: crop size ({ch[i]}, {cw[i]}) must be positive", ValueError, sample=i)
    y = place(args.batch("crop_pos_y"), h - ch, rounding)
    x = place(args.batch("crop_pos_x"), w - cw, rounding)
    windows = np.stack(np.broadcast_arrays(y, x, ch, cw), axis=1)
    windows[none] = np.stack([np.zeros(n, np.int64), np.zeros(n, np.int64), h, w], axis=1)[none]
    return windows


def volume_windows(op, dhw, args, rounding="round"):
    """The (z, y, x, d, h, w) windows [N, 6] of the crop arguments over volumes of sizes `dhw`
    [N, 3], as DALI crops volumes: `crop` as (depth, height, width) or (height, width),
    crop_d / crop_h / crop_w over it, an extent of 0 (or none given) keeping the whole axis;
    each window at crop_pos_z / crop_pos_y / crop_pos_x as `crop_windows` places them."""
    n = len(dhw)
    extents = np.zeros((n, 3))
    crop = args.batch("crop")
    if crop is not None:
        crop = np.asarray(crop, np.float64)
        k = crop.shape[-1]
        if k not in (2, 3):
            raise op.error(f"argument 'crop' must be (depth, height, width) or (height, width) for volumes, got "
                           f"{crop.tolist()}", ValueError)
        extents[:, 3 - k:] = np.broadcast_to(crop, (n, k))
    for axis, name in enumerate(("crop_d", "crop_h", "crop_w")):
        v = np.broadcast_to(np.asarray(args.batch(name), np.float64), (n,))
        extents[:, axis] = np.where(v != 0, v, extents[:, axis])
    depth_only = (extents[:, 0] != 0) & (extents[:, 1:] == 0).all(axis=1)
    if depth_only.any():
        raise op.error("argument 'crop_d' needs the height and width of the window too (crop_h and crop_w, or "
                       "'crop')", ValueError)
    bad = (extents < 0).any(axis=1) | ~np.isfinite(extents).all(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        raise op.error(f"sample {i}: crop size {tuple(extents[i].tolist())} is not valid: sizes must be finite and "
                       ">= 0", ValueError, sample=i)
    extents = np.where(extents != 0, np.trunc(extents), dhw).astype(np.int64)
    if (extents <= 0).any():
        i = int(np.argmax((extents <= 0).any(axis=1)))
        raise op.error(f"sample {i}: crop size {tuple(extents[i].tolist())} must be positive", ValueError, sample=i)
    anchors = [place(args.batch(f"crop_pos_{axis}"), dhw[:, k] - extents[:, k], rounding)
               for k, axis in enumerate("zyx")]
    return np.concatenate([np.stack(np.broadcast_arrays(*anchors), axis=1), extents], axis=1)


def fit_windows_nd(op, windows, sizes, policy):
    """fit_windows for windows [N, 2k] (anchors, then extents) over samples of `sizes` [N, k]."""
    k = sizes.shape[1]
    lo, ext = windows[:, :k], windows[:, k:]
    outside = ((lo < 0) | (lo + ext > sizes)).any(axis=1)
    if policy == "pad" or not outside.any():
        return windows
    if policy == "error":
        i = int(np.argmax(outside))
        raise op.error(f"sample {i}: the crop window {'x'.join(map(str, ext[i].tolist()))} at "
                       f"{tuple(lo[i].tolist())} is outside the {'x'.join(map(str, sizes[i].tolist()))} volume; use "
                       "out_of_bounds_policy='pad' or 'trim_to_shape'", ValueError, sample=i)
    start = np.maximum(lo, 0)
    return np.concatenate([start, np.minimum(lo + ext, sizes) - start], axis=1)


def whole_images(hw):
    """Windows covering each image."""
    return np.concatenate([np.zeros_like(hw), hw], axis=1)


def fit_windows(op, windows, hw, policy):
    """Windows after the out-of-bounds policy: 'pad' keeps them (the kernel fills what lies
    outside), 'trim_to_shape' clips them to the image, 'error' names the first sample
    whose window leaves its image."""
    y, x, ch, cw = windows.T
    h, w = hw[:, 0], hw[:, 1]
    outside = (y < 0) | (x < 0) | (y + ch > h) | (x + cw > w)
    if policy == "pad" or not outside.any():
        return windows
    if policy == "error":
        i = int(np.argmax(outside))
        raise op.error(f"sample {i}: the crop window {ch[i]}x{cw[i]} at (y={y[i]}, x={x[i]}) is outside the "
                       f"{h[i]}x{w[i]} image; use out_of_bounds_policy='pad' or 'trim_to_shape'", ValueError,
                       sample=i)
    y0, x0 = np.maximum(y, 0), np.maximum(x, 0)
    return np.stack([y0, x0, np.minimum(y + ch, h) - y0, np.minimum(x + cw, w) - x0], axis=1)


def _round_positive(v):
    """round_half_away for an array of values >= 0, in fewer steps (a hot path), as int64."""
    r = np.floor(v)
    r += (v - r) >= 0.5
    return r.astype(np.int64)


def random_crop_windows(rng, hw, area, aspect, num_attempts):
    """Random windows for images of sizes `hw`, as DALI's RandomCropGenerator picks them:
    every attempt of every sample drawn at once from the NumPy generator `rng` (the
    numbers are torchdali's own), the first attempt that fits taken, DALI's fallback
    where none does, and uniform anchors. Each step works on both sides at once (rows
    0 and 1 of a [2, N, attempts] array): this runs once a batch on the decode thread."""
    hw = hw.astype(np.int64)
    h, w = hw[:, 0], hw[:, 1]
    n = len(h)
    lo_r, hi_r = float(_F32(aspect[0])), float(_F32(aspect[1]))
    max_w = np.maximum(1, (h.astype(_F32) * _F32(hi_r)).astype(np.int64))
    max_h = np.maximum(1, (w.astype(_F32) * (_F32(1) / _F32(lo_r))).astype(np.int64))
    pixels = w * h
    min_area = pixels.astype(_F32) * _F32(area[0])
    too_wide = h * max_w < min_area
    too_tall = ~too_wide & (w * max_h < min_area)
    scale = rng.uniform(area[0], area[1], (n, num_attempts))
    ratio = np.exp(rng.uniform(np.log(lo_r), np.log(hi_r), (n, num_attempts)))
    target = (scale * pixels[:, None]).astype(_F32).astype(np.float64)
    sides = np.maximum(1, _round_positive(np.sqrt(np.stack([target * ratio, target / ratio]))))  # (w, h)
    tw, th = sides
    r = (tw / th).astype(_F32)
    fits = (sides <= hw.T[::-1, :, None]).all(axis=0) & (r >= _F32(lo_r)) & (r <= _F32(hi_r))
    first = np.argmax(fits, axis=1)
    rows = np.arange(n)
    ch, cw = th[rows, first], tw[rows, first]
    # DALI's fallback: the whole image (or its widest / tallest allowed part), shrunk to
    # the largest allowed area, keeping its aspect ratio.
    none = ~fits[rows, first]
    if none.any():
        img_r = (w / h).astype(_F32)
        fh = np.where(img_r > hi_r, h, np.where(img_r < lo_r, max_h, h))
        fw = np.where(img_r > hi_r, max_w, np.where(img_r < lo_r, w, w))
        max_area = _F32(area[1]) * w.astype(_F32) * h.astype(_F32)
        shrink = np.sqrt(np.minimum(1.0, max_area / (fh * fw)))
        ch = np.where(none, np.maximum(1, (fh * shrink).astype(np.int64)), ch)
        cw = np.where(none, np.maximum(1, (fw * shrink).astype(np.int64)), cw)
    if too_wide.any() or too_tall.any():
        ch = np.where(too_wide, h, np.where(too_tall, max_h, ch))
        cw = np.where(too_wide, max_w, np.where(too_tall, w, cw))
    # Inside the image even for an area range above 1, which can make those exceed it.
    ch, cw = np.minimum(ch, h), np.minimum(cw, w)
    y = rng.integers(0, h - ch + 1)
    x = rng.integers(0, w - cw + 1)
    return np.stack([y, x, ch, cw], axis=1)
