"""fn.slice and fn.paste in a pipeline: against NumPy references and, where installed,
NVIDIA DALI on the same inputs (bit-exact)."""
import numpy as np
import pytest

import torchdali
from torchdali import types

from conftest import assert_batches_equal, dali_or_skip, requires_cuda, run_operator

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(0)
SIZES = ((17, 23), (1, 1), (31, 5), (12, 12))
HWC = [RNG.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in SIZES]
CHW = [np.ascontiguousarray(im.transpose(2, 0, 1)) for im in HWC]
FLOATS = [(im.astype(np.float32) - 100.0) * 1.37 for im in HWC]
FHWC = [RNG.integers(0, 256, (f, h, w, 2), dtype=np.uint8) for f, h, w in ((3, 4, 5), (2, 7, 3))]
VECTORS = [RNG.standard_normal(n).astype(np.float32) for n in (9, 4, 13)]
F32 = np.float32
# Extents that make float32 products of 0.05-multiples land on halves (rounding ties).
TIES = [RNG.integers(0, 256, (h, w, 1), dtype=np.uint8) for h, w in ((10, 20), (20, 10), (40, 30))]


run = run_operator


def per_sample(values, dtype):
    return [np.array(v, dtype=dtype) for v in values]


# --- a NumPy reference for a window given per dim ----------------------------------------

def _index(a, s, n, policy):
    idx = np.arange(a, a + s)
    if policy in ("edge", "clamp"):
        return np.clip(idx, 0, n - 1), np.ones(s, bool)
    if policy == "wrap":
        return idx % n, np.ones(s, bool)
    if policy in ("reflect", "reflect_1001"):
        m = idx % (2 * n)
        return np.where(m < n, m, 2 * n - 1 - m), np.ones(s, bool)
    if policy == "reflect_101":
        m = idx % max(2 * n - 2, 1)
        return np.where(m < n, m, 2 * n - 2 - m), np.ones(s, bool)
    inside = (idx >= 0) & (idx < n)
    return np.clip(idx, 0, max(n - 1, 0)), inside


def numpy_slice(img, anchor, shape, policy="error", fill=(0,), channel_dim=None, dtype=None):
    """The window (anchor, shape over all dims) of img; outside elements per `policy`."""
    if policy == "trim_to_shape":
        end = [min(max(a + s, 0), n) for a, s, n in zip(anchor, shape, img.shape)]
        anchor = [min(max(a, 0), n) for a, n in zip(anchor, img.shape)]
        shape = [max(e - a, 0) for a, e in zip(anchor, end)]
    maps = [_index(a, s, n, policy) for a, s, n in zip(anchor, shape, img.shape)]
    out = img[np.ix_(*[m[0] for m in maps])] if img.size else np.zeros(shape, img.dtype)
    mask = np.ones(shape, bool)
    for d, (_, inside) in enumerate(maps):
        view = [1] * len(shape)
        view[d] = -1
        mask &= inside.reshape(view)
    if dtype is not None and dtype != out.dtype:
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            out = np.clip(out, info.min, info.max)
        out = out.astype(dtype)
    fills = np.asarray(fill, np.float32).astype(np.int64 if np.issubdtype(out.dtype, np.integer) else out.dtype)
    fills = fills.astype(out.dtype)
    if len(fills) > 1:
        view = [1] * len(shape)
        view[channel_dim] = -1
        fills = fills.reshape(view)
    return np.where(mask, out, fills).astype(out.dtype)


# Windows given as (start, shape) in the order of the axes argument, per sample.
INSIDE = ([(1, 2), (0, 0), (2, 3), (4, 5)], [(5, 7), (1, 1), (2, 9), (8, 3)])
ACROSS = ([(-2, 3), (0, -1), (3, 25), (10, -4)], [(9, 7), (3, 2), (4, 9), (5, 5)])
FAR = ([(-20, 3), (0, -1), (3, 2), (10, -4)], [(40, 7), (3, 2), (4, 9), (5, 30)])
WINDOW_CASES = [
    # name, images, layout, axes (None: the default, x then y), (starts, shapes), policy
    ("hwc_inside", HWC, "HWC", None, INSIDE, "error"),
    ("hwc_pad", HWC, "HWC", None, ACROSS, "pad"),
    ("hwc_trim", HWC, "HWC", None, ([(-2, 3), (1, 1), (3, 25), (10, -4)], ACROSS[1]), "trim_to_shape"),
    ("chw_pad", CHW, "CHW", None, ACROSS, "pad"),
    ("chw_edge", CHW, "CHW", None, ACROSS, "edge"),
    ("hwc_reflect", HWC, "HWC", [0, 1], FAR, "reflect"),
    ("hwc_reflect_101", HWC, "HWC", [0, 1], FAR, "reflect_101"),
    ("hwc_wrap", HWC, "HWC", [0, 1], FAR, "wrap"),
    ("hwc_channels", HWC, "HWC", [2], ([(1,), (0,), (2,), (1,)], [(2,), (3,), (1,), (2,)]), "error"),
    ("fhwc_all_axes", FHWC, "FHWC", [], ([(1, -1, 2, 0), (0, 3, 1, 1)], [(2, 4, 2, 2), (2, 5, 1, 1)]), "pad"),
    ("vector", VECTORS, "", [0], ([(2,), (-3,), (11,)], [(4,), (5,), (4,)]), "pad"),
]


def _full_window(img, layout, axes, start, shape):
    anchor, size = [0] * img.ndim, list(img.shape)
    if axes is None:  # axis_names 'WH'
        axes = [layout.index("W"), layout.index("H")]
    axes = axes or list(range(img.ndim))
    for d, a, s in zip(axes, start, shape):
        anchor[d], size[d] = a, s
    return anchor, size


@pytest.mark.parametrize("case", WINDOW_CASES, ids=[c[0] for c in WINDOW_CASES])
@pytest.mark.parametrize("how", ["arguments", "argument_inputs", "positional"])
def test_slice_matches_numpy(case, how):
    _, images, layout, axes, (starts, shapes), policy = case
    kwargs = dict(out_of_bounds_policy=policy)
    if axes is not None:
        kwargs["axes"] = axes
    if how == "arguments":  # constants only when every sample has the same window
        images, starts, shapes = images[:1], starts[:1], shapes[:1]
        kwargs.update(start=list(starts[0]), shape=list(shapes[0]))
        got, out_layout = run(torchdali, "slice", images, layout, **kwargs)
    elif how == "argument_inputs":
        got, out_layout = run(torchdali, "slice", images, layout, **kwargs, arg_inputs=dict(
            start=per_sample(starts, np.int32), shape=per_sample(shapes, np.int32)))
    else:
        got, out_layout = run(torchdali, "slice", images, layout, **kwargs,
                              inputs=(per_sample(starts, np.int32), per_sample(shapes, np.int32)))
    assert out_layout == layout
    expected = [numpy_slice(im, *_full_window(im, layout, axes, a, s), policy=policy)
                for im, a, s in zip(images, starts, shapes)]
    assert_batches_equal(got, expected)


def test_slice_normalized_rounding_numpy():
    """anchor = llround(rel_start * n), end = llround((rel_start + rel_shape) * n), in double
    from float32 values: halves go away from zero."""
    row = [np.arange(10, dtype=np.uint8).reshape(1, 10, 1)]
    for kwargs, (a, e) in ((dict(rel_start=[0.25, 0], rel_shape=[0.5, 1]), (3, 8)),
                           # float32 products: 0.45f * 10 rounds to 4.5f, 0.35f * 10 to 3.5f
                           (dict(rel_start=[0.15, 0], rel_end=[0.45, 1]), (2, 5)),
                           (dict(rel_start=[0.35, 0], shape=[2, 1]), (4, 6)),
                           # the sum rel_start + rel_shape in double: (0.35f + 0.1f) * 10 < 4.5
                           (dict(rel_start=[0.35, 0], rel_shape=[0.1, 1]), (4, 4)),
                           (dict(start=[3, 0], rel_shape=[0.25, 1]), (3, 6))):
        got, _ = run(torchdali, "slice", row, **kwargs)
        assert_batches_equal(got, [row[0][:, a:e]])
    got, _ = run(torchdali, "slice", row, rel_start=[-0.35, 0], rel_shape=[0.5, 1], out_of_bounds_policy="pad")
    assert got[0].reshape(-1).tolist() == [0, 0, 0, 0, 0, 1]  # anchor llround(-3.5) = -4, end 2


def test_slice_dtype_and_fill_casts_numpy():
    """Floats to uint8 saturate and truncate; fill values are cast as DALI's static_cast
    (-3.7 -> 253, 300 -> 44 in uint8)."""
    got, _ = run(torchdali, "slice", FLOATS[:1], start=[0, 0], shape=[23, 17], dtype=types.UINT8)
    assert_batches_equal(got, [numpy_slice(FLOATS[0], [0, 0, 0], [17, 23, 3], dtype=np.uint8)])
    img = HWC[3][:, :, :2]
    got, _ = run(torchdali, "slice", [img], start=[-1, 10], shape=[3, 4], out_of_bounds_policy="pad",
                 fill_values=[-3.7, 300])
    assert got[0][:, 0].tolist() == [[253, 44]] * 4
    got, _ = run(torchdali, "slice", [img], start=[-1, 10], shape=[3, 4], out_of_bounds_policy="pad",
                 fill_values=[1.7], dtype=types.FLOAT16)
    assert got[0].dtype == np.float16 and got[0][0, 0, 0] == np.float16(np.float32(1.7))
    assert_batches_equal([got[0][:2, 1:]], [img[10:12, :2].astype(np.float16)])


# --- against DALI, bit-exact --------------------------------------------------------------

INT_WINDOWS = per_sample([(1, 2), (0, 0), (2, 3), (4, 5)], np.int32)
INT_SHAPES = per_sample([(5, 7), (1, 1), (2, 9), (8, 3)], np.int32)
REL_STARTS = per_sample([(0.25, 0.15), (0.0, 0.0), (0.35, 0.05), (0.5, 0.45)], np.float32)
REL_SHAPES = per_sample([(0.5, 0.3), (1.0, 1.0), (0.45, 0.55), (0.25, 0.5)], np.float32)
OUT_STARTS = per_sample([(-3, 3), (0, -1), (2, 25), (10, -4)], np.int32)
OUT_SHAPES = per_sample([(9, 7), (3, 2), (4, 9), (5, 5)], np.int32)
# Odd extents and per-sample relative coordinates fed as argument inputs, many landing on
# halves: 0.5 * 21, and 0.7f * 5, which is 3.5 in float32 but 3.4999999 in double.
ODD = [RNG.integers(0, 256, (h, w, 2), dtype=np.uint8)
       for h, w in ((15, 21), (9, 7), (33, 13), (5, 27), (11, 3))]
ODD_STARTS = per_sample([(0.5, 0.1), (0.25, 0.5), (0.3, 0.5), (0.5, 0.7), (0.0, 0.5)], F32)
ODD_SHAPES = per_sample([(0.25, 0.5), (0.25, 0.25), (0.5, 0.5), (0.25, 0.3), (1.0, 0.5)], F32)
ODD_ENDS = per_sample([(0.75, 0.9), (0.5, 0.5), (0.9, 0.7), (0.5, 0.9), (0.5, 1.0)], F32)
ODD_AXES = per_sample([(1, 0), (0, 1), (1, 0), (0, 1), (0, 1)], np.int32)
POLICIES = ("pad", "constant", "trim_to_shape", "edge", "clamp", "reflect", "reflect_1001",
            "reflect_101", "wrap")

DALI_CASES = [
    # name, images, layout, positional inputs, argument inputs, kwargs
    ("rel_start_rel_shape", HWC, "HWC", (), {}, dict(rel_start=[0.25, 0.15], rel_shape=[0.5, 0.3])),
    ("rel_start_rel_end", HWC, "HWC", (), {}, dict(rel_start=[0.15, 0.35], rel_end=[0.45, 0.65])),
    ("ties_rel_start_rel_end", TIES, "HWC", (), {}, dict(rel_start=[0.15, 0.35], rel_end=[0.45, 0.65])),
    ("ties_rel_start_shape", TIES, "HWC", (), {}, dict(rel_start=[0.35, 0.15], shape=[2, 3])),
    ("ties_rel_start_rel_shape", TIES, "HWC", (), {}, dict(rel_start=[0.35, 0.15], rel_shape=[0.1, 0.3])),
    ("ties_start_rel_shape", TIES, "HWC", (), {}, dict(start=[1, 2], rel_shape=[0.35, 0.45])),
    ("ties_rel_shape", TIES, "HWC", (), {}, dict(rel_shape=[0.35, 0.45])),
    ("ties_positional", TIES, "HWC", (per_sample([(0.35, 0.15)] * 3, F32), per_sample([(0.1, 0.3)] * 3, F32)), {}, {}),
    ("ties_positional_shape_absolute", TIES, "HWC", (per_sample([(0.35, 0.15)] * 3, F32),
                                                     per_sample([(2.5, 1.5)] * 3, F32)), {},
     dict(normalized_shape=False)),
    ("empty_window_at_the_end", HWC[:1], "HWC", (), {}, dict(start=[23, 2], shape=[0, 4])),
    ("trim_to_nothing", HWC[:1], "HWC", (), {}, dict(start=[30, 2], shape=[5, 4], out_of_bounds_policy="trim_to_shape")),
    ("start_end", HWC[:1], "HWC", (), {}, dict(start=[2, 3], end=[9, 14])),
    ("start_rel_shape", HWC[:1], "HWC", (), {}, dict(start=[2, 3], rel_shape=[0.55, 0.65])),
    ("rel_shape_only", HWC, "HWC", (), {}, dict(rel_shape=[0.5, 0.75])),
    ("rel_start_only", HWC, "HWC", (), {}, dict(rel_start=[0.5, 0.25])),
    ("arg_inputs_rel", HWC, "HWC", (), dict(rel_start=REL_STARTS, rel_shape=REL_SHAPES), {}),
    ("arg_inputs_abs", HWC, "HWC", (), dict(start=INT_WINDOWS, shape=INT_SHAPES), {}),
    ("odd_arg_inputs_rel_shape", ODD, "HWC", (), dict(rel_start=ODD_STARTS, rel_shape=ODD_SHAPES), {}),
    ("odd_arg_inputs_rel_end", ODD, "HWC", (), dict(rel_start=ODD_STARTS, rel_end=ODD_ENDS), {}),
    ("odd_arg_inputs_rel_start_shape", ODD, "HWC", (), dict(rel_start=ODD_STARTS), dict(shape=[2, 1])),
    ("odd_arg_inputs_float", [im.astype(F32) for im in ODD], "HWC", (),
     dict(rel_start=ODD_STARTS, rel_shape=ODD_SHAPES), {}),
    ("odd_arg_inputs_axes", ODD, "HWC", (), dict(axes=ODD_AXES, rel_start=ODD_STARTS, rel_shape=ODD_SHAPES),
     {}),
    ("odd_positional", ODD, "HWC", (ODD_STARTS, ODD_SHAPES), {}, {}),
    ("positional_normalized", HWC, "HWC", (REL_STARTS, REL_SHAPES), {}, {}),
    ("positional_absolute_float", HWC, "HWC",
     (per_sample([(1.5, 2.5), (0, 0), (0.5, 1.49), (2.5, 3.5)], F32),
      per_sample([(3.5, 4.5), (1, 1), (2.5, 1.5), (4.5, 3.5)], F32)), {},
     dict(normalized_anchor=False, normalized_shape=False)),
    ("positional_mixed", HWC, "HWC", (per_sample([(1.5, 2.5), (0, 0), (0.5, 1.49), (2.5, 3.5)], F32), REL_SHAPES),
     {}, dict(normalized_anchor=False)),
    ("positional_int", HWC, "HWC", (INT_WINDOWS, INT_SHAPES), {}, {}),
    ("positional_int64", HWC, "HWC", (per_sample([(1, 2), (0, 0), (2, 3), (4, 5)], np.int64),
                                      per_sample([(5, 7), (1, 1), (2, 9), (8, 3)], np.int64)), {}, {}),
    ("axes_h", HWC, "HWC", (), {}, dict(rel_start=[0.3], rel_shape=[0.5], axes=[0])),
    ("axes_negative", HWC, "HWC", (), {}, dict(rel_start=[0.3], rel_shape=[0.5], axes=[-2])),
    ("axes_all", HWC[:1], "HWC", (), {}, dict(start=[1, 2, 1], shape=[4, 5, 2], axes=[])),
    ("axis_names_hw", HWC, "HWC", (), {}, dict(rel_start=[0.3, 0.2], rel_shape=[0.5, 0.6], axis_names="HW")),
    ("axis_names_c", HWC, "HWC", (), {}, dict(start=[1], shape=[2], axis_names="C")),
    ("chw", CHW, "CHW", (), {}, dict(rel_start=[0.25, 0.15], rel_shape=[0.5, 0.3])),
    ("chw_pad_fill", CHW, "CHW", (OUT_STARTS, OUT_SHAPES), {},
     dict(out_of_bounds_policy="pad", fill_values=[10, 20, 30])),
    ("hwc_pad_fill", HWC, "HWC", (OUT_STARTS, OUT_SHAPES), {},
     dict(out_of_bounds_policy="pad", fill_values=[-3.7, 300, 255.9])),
    ("no_layout_pad_fill", HWC, "", (OUT_STARTS, OUT_SHAPES), {},
     dict(out_of_bounds_policy="pad", fill_values=[10, 20, 30])),
    ("fhwc", FHWC, "FHWC", (), {}, dict(rel_start=[0.5, 0.4], rel_shape=[0.5, 0.6])),
    ("fhwc_frames", FHWC, "FHWC", (), {}, dict(start=[1], shape=[1], axis_names="F")),
    ("vector", VECTORS, "", (), {}, dict(start=[1], shape=[3], axes=[0])),
    ("float_to_uint8", FLOATS, "HWC", (), {}, dict(rel_start=[0.1, 0.1], rel_shape=[0.8, 0.8], dtype=types.UINT8)),
    ("float_to_float16", FLOATS, "HWC", (OUT_STARTS, OUT_SHAPES), {},
     dict(dtype=types.FLOAT16, out_of_bounds_policy="pad", fill_values=[1.7])),
    ("uint8_to_float", HWC, "HWC", (OUT_STARTS, OUT_SHAPES), {},
     dict(dtype=types.FLOAT, out_of_bounds_policy="pad", fill_values=[0.1, -2, 3e9])),
    ("int16", [(im.astype(np.int16) - 128) * 100 for im in HWC], "HWC", (OUT_STARTS, OUT_SHAPES), {},
     dict(out_of_bounds_policy="pad", fill_values=[-40000.5])),
    ("int16_to_uint8", [(im.astype(np.int16) - 128) * 3 for im in HWC], "HWC", (), {},
     dict(rel_start=[0.1, 0.1], rel_shape=[0.8, 0.8], dtype=types.UINT8)),
] + [(f"policy_{p}", HWC, "HWC", (OUT_STARTS, OUT_SHAPES), {}, dict(out_of_bounds_policy=p)) for p in POLICIES] + [
    (f"policy_{p}_chw", CHW, "CHW", (OUT_STARTS, OUT_SHAPES), {}, dict(out_of_bounds_policy=p))
    for p in ("pad", "trim_to_shape", "reflect_101")]


@pytest.mark.parametrize("case", DALI_CASES, ids=[c[0] for c in DALI_CASES])
def test_slice_matches_dali(case):
    dali = dali_or_skip()
    _, images, layout, inputs, arg_inputs, kwargs = case
    expected, expected_layout = run(dali, "slice", images, layout, inputs=inputs, arg_inputs=arg_inputs, **kwargs)
    got, got_layout = run(torchdali, "slice", images, layout, inputs=inputs, arg_inputs=arg_inputs, **kwargs)
    assert got_layout == expected_layout
    assert_batches_equal(got, expected)


# --- bad input --------------------------------------------------------------------------

BAD_CASES = [
    # kwargs / inputs, error type, words the message must contain
    (dict(rel_start=[float("nan"), 0.1], rel_shape=[0.5, 0.5]), ValueError, ["slice", "anchor", "nan"]),
    (dict(start=[1, 2], shape=[-3, 4]), ValueError, ["slice", "'shape'", ">= 0"]),
    (dict(rel_start=[0.1, 0.2], rel_shape=[0.5, -0.1]), ValueError, ["slice", "'rel_shape'", ">= 0"]),
    (dict(start=[3, 2], end=[1, 4]), ValueError, ["slice", "ends before it starts"]),
    (dict(start=[1, 2, 3], shape=[1, 1, 1]), ValueError, ["slice", "'start'", "3 values", "2 slice axes"]),
    (dict(start=[20, 2], shape=[5, 4]), ValueError, ["slice", "outside", "out_of_bounds_policy"]),
    (dict(start=[-1, 2], shape=[5, 4]), ValueError, ["slice", "outside"]),
    (dict(start=[1, 2], rel_start=[0.1, 0.1], shape=[1, 1]), ValueError, ["'start' and 'rel_start'"]),
    (dict(start=[1, 2], end=[3, 3], shape=[1, 1]), ValueError, ["mutually exclusive", "end", "shape"]),
    (dict(start=[1], shape=[1], axes=[0], axis_names="W"), ValueError, ["'axes' and 'axis_names'"]),
    (dict(start=[1], shape=[1], axis_names="D"), ValueError, ["axis_names", "'D'", "HWC"]),
    (dict(start=[1], shape=[1], axes=[3]), ValueError, ["axes", "[3]", "3 dims"]),
    (dict(start=[1, 1], shape=[1, 1], axes=[0, -3]), ValueError, ["repeat"]),
    ({}, ValueError, ["slice", "anchor and shape inputs"]),
    (dict(start=[-1, 0], shape=[3, 3], out_of_bounds_policy="pad", fill_values=[1, 2]), ValueError,
     ["fill_values", "2 values", "3 output channels"]),
    (dict(start=[1, 2], shape=[1, 1], out_of_bounds_policy="bogus"), ValueError, ["out_of_bounds_policy", "bogus"]),
    (dict(start=[1.5, 2], shape=[1, 1]), TypeError, ["'start'", "int"]),
    (dict(start=[1, 2], shape=[1, 1], dtype=types.INT32), ValueError, ["dtype"]),
]


@pytest.mark.parametrize("kwargs, error, words", BAD_CASES)
def test_slice_bad_arguments(kwargs, error, words):
    with pytest.raises(error) as info:
        run(torchdali, "slice", HWC[:1], **kwargs)
    text = str(info.value)
    for w in words:
        assert w in text, f"{w!r} not in {text!r}"


def test_slice_bad_positional_inputs():
    f = per_sample([(0.1, 0.2, 0.3)], F32)
    with pytest.raises(ValueError, match="slice.*anchor input has 3 values for 2 slice axes"):
        run(torchdali, "slice", HWC[:1], inputs=(f, f))
    with pytest.raises(ValueError, match="cannot be combined with the positional"):
        run(torchdali, "slice", HWC[:1], inputs=[per_sample([(0.1, 0.2)], F32)] * 2, start=[1, 1], shape=[1, 1])
    with pytest.raises(ValueError, match="slice.*ends before it starts"):
        run(torchdali, "slice", HWC[:1], inputs=(per_sample([(0.5, 0.2)], F32), per_sample([(-0.25, 0.5)], F32)))
    with pytest.raises(ValueError, match="slice.*not a valid coordinate"):
        run(torchdali, "slice", HWC[:1], inputs=(per_sample([(np.nan, 0.2)], F32), per_sample([(0.2, 0.5)], F32)))
    with pytest.raises(ValueError, match="fill_values has 2 values but the layout has no channel axis"):
        run(torchdali, "slice", FHWC[:1], layout="FHWX",
            start=[-1, 0], shape=[2, 1], out_of_bounds_policy="pad", fill_values=[1, 2])


@pytest.mark.parametrize("start", [[2**53 + 1, 0], [2**60, 0], [-2**60, 0], [10**17 + 1, 0], [-2**63, 0],
                                   [0, 2**53 + 1], [2**62, -2**62]])
def test_slice_far_outside_keeps_the_requested_shape_padded(start):
    """Integer coordinates past 2**53, where float64 sums round: the extent is the shape given
    (DALI too), the pixels all padding."""
    img = np.ones((4, 5, 3), np.uint8)
    (out,) = run(torchdali, "slice", [img], start=start, shape=[5, 5], axis_names="WH", out_of_bounds_policy="pad")[0]
    assert out.shape == (5, 5, 3) and not out.any()


def test_slice_ending_at_the_int64_limit_and_beyond():
    img = np.ones((4, 5, 3), np.uint8)
    (out,) = run(torchdali, "slice", [img], start=[2**63 - 2048, 0], shape=[2047, 4], axis_names="WH",
                 out_of_bounds_policy="pad")[0]
    assert out.shape == (4, 2047, 3) and not out.any()
    with pytest.raises(ValueError, match=r"slice.*sample 0: the slice \(anchor 9223372036854773760, shape 2048\) on "
                                         r"axis 1 ends beyond the int64 range"):
        run(torchdali, "slice", [img], start=[2**63 - 2048, 0], shape=[2048, 4], axis_names="WH",
            out_of_bounds_policy="pad")


def test_slice_argument_input_errors_name_the_first_sample():
    shapes = per_sample([(2, 2), (1, 1), (-1, 3), (-2, 1)], np.int32)
    with pytest.raises(ValueError, match=r"sample 2: argument 'shape' = \[-1, 3\] must be >= 0") as info:
        run(torchdali, "slice", HWC, arg_inputs=dict(start=INT_WINDOWS, shape=shapes))
    assert info.value.sample == 2
    shapes = per_sample([(2, 2), (1, 1), (1, 3), (9, 3)], np.int32)
    with pytest.raises(ValueError, match=r"sample 3: the slice \(anchor \[5, 4, 0\], shape \[3, 9, 3\]\) is "
                                         "outside the input of shape \\[12, 12, 3\\] on axis 1") as info:
        run(torchdali, "slice", HWC, arg_inputs=dict(start=INT_WINDOWS, shape=shapes))
    assert info.value.sample == 3
    axes = per_sample([(0, 1), (1, 0), (0, 3), (0, 1)], np.int32)
    with pytest.raises(ValueError, match=r"axes \[3\] out of range for samples of 3 dims") as info:
        run(torchdali, "slice", HWC, arg_inputs=dict(axes=axes, start=INT_WINDOWS, shape=INT_SHAPES))
    assert info.value.sample == 2


# --- paste --------------------------------------------------------------------------------

def numpy_paste(img, ratio, fill, px=0.5, py=0.5, least=0.0):
    h, w, c = img.shape
    ch = max(int(F32(ratio) * F32(h)), int(least))
    cw = max(int(F32(ratio) * F32(w)), int(least))
    y, x = int(F32(py) * F32(ch - h)), int(F32(px) * F32(cw - w))
    out = np.empty((ch, cw, c), img.dtype)
    out[:] = np.asarray(fill, img.dtype)
    out[y:y + h, x:x + w] = img
    return out


PASTE_RATIOS = [F32(r) for r in (1.0, 2.5, 1.37, 3.0)]
PASTE_X = [F32(v) for v in (0.0, 0.3, 1.0, 0.5)]
PASTE_CASES = [
    ("constants", {}, dict(ratio=2.0, fill_value=[10, 20, 30], paste_x=0.25, paste_y=0.75)),
    ("single_fill", {}, dict(ratio=1.5, fill_value=[7])),
    ("min_canvas", {}, dict(ratio=1.0, fill_value=[1, 2, 3], min_canvas_size=25.6)),
    ("per_sample", dict(ratio=PASTE_RATIOS, paste_x=PASTE_X), dict(fill_value=[0, 255, 9], paste_y=0.6)),
]


@pytest.mark.parametrize("case", PASTE_CASES, ids=[c[0] for c in PASTE_CASES])
def test_paste_matches_numpy_and_dali(case):
    _, arg_inputs, kwargs = case
    got, layout = run(torchdali, "paste", HWC, arg_inputs=arg_inputs, **kwargs)
    assert layout == "HWC"
    expected = []
    for i, im in enumerate(HWC):
        ratio = arg_inputs["ratio"][i] if "ratio" in arg_inputs else kwargs["ratio"]
        px = arg_inputs["paste_x"][i] if "paste_x" in arg_inputs else kwargs.get("paste_x", 0.5)
        expected.append(numpy_paste(im, ratio, kwargs["fill_value"], px, kwargs.get("paste_y", 0.5),
                                    kwargs.get("min_canvas_size", 0.0)))
    assert_batches_equal(got, expected)
    try:
        dali = dali_or_skip()
    except pytest.skip.Exception:
        return
    if hasattr(dali.fn, "paste"):
        assert_batches_equal(got, run(dali, "paste", HWC, arg_inputs=arg_inputs, **kwargs)[0])


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(ratio=0.5, fill_value=[0]), ValueError, ["paste", "'ratio'", ">= 1"]),
    (dict(ratio=2.0, fill_value=[0], paste_x=1.5), ValueError, ["paste", "'paste_x'", "[0, 1]"]),
    (dict(ratio=2.0, fill_value=[0, 1]), ValueError, ["paste", "fill_value has 2 values"]),
    (dict(ratio=2.0, fill_value=[0, 1], n_channels=2), ValueError, ["paste", "3 channels", "n_channels=2"]),
    (dict(fill_value=[0]), TypeError, ["paste", "'ratio'", "required"]),
])
def test_paste_bad_arguments(kwargs, error, words):
    with pytest.raises(error) as info:
        run(torchdali, "paste", HWC[:1], **kwargs)
    for w in words:
        assert w in str(info.value), f"{w!r} not in {info.value}"


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_paste_float_images_match_numpy(dtype):
    images = [im.astype(dtype) * dtype(0.5) for im in HWC]
    got, _ = run(torchdali, "paste", images, ratio=1.7, fill_value=[3, 200, 9], paste_x=0.2)
    assert_batches_equal(got, [numpy_paste(im, 1.7, [3, 200, 9], px=0.2) for im in images])


def test_paste_rejects_other_types_at_build():
    with pytest.raises(TypeError, match="paste.*INT16 is not supported"):
        run(torchdali, "paste", [im.astype(np.int16) for im in HWC], ratio=2.0, fill_value=[0])


# --- GPU: the same results as the CPU -----------------------------------------------------

GPU_CASES = [c for c in DALI_CASES if c[0] in (
    "rel_start_rel_shape", "arg_inputs_abs", "positional_normalized", "axes_all", "chw_pad_fill",
    "hwc_pad_fill", "fhwc", "float_to_uint8", "uint8_to_float", "policy_reflect_101", "policy_trim_to_shape")]


@requires_cuda
@pytest.mark.parametrize("case", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_slice_gpu_matches_cpu(case):
    _, images, layout, inputs, arg_inputs, kwargs = case
    cpu, _ = run(torchdali, "slice", images, layout, inputs=inputs, arg_inputs=arg_inputs, **kwargs)
    gpu, _ = run(torchdali, "slice", images, layout, device="gpu", inputs=inputs, arg_inputs=arg_inputs, **kwargs)
    assert_batches_equal(gpu, cpu)


@requires_cuda
@pytest.mark.parametrize("case", PASTE_CASES, ids=[c[0] for c in PASTE_CASES])
def test_paste_gpu_matches_cpu(case):
    _, arg_inputs, kwargs = case
    cpu, _ = run(torchdali, "paste", HWC, arg_inputs=arg_inputs, **kwargs)
    gpu, _ = run(torchdali, "paste", HWC, device="gpu", arg_inputs=arg_inputs, **kwargs)
    assert_batches_equal(gpu, cpu)
