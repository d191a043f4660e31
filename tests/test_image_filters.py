"""filter and laplacian against NVIDIA DALI on the CPU (exact: both accumulate in float32 in
the same order); experimental.median_blur, dilate and erode (GPU-only in DALI) against NumPy
references of OpenCV's medianBlur / dilate / erode, which DALI's own tests compare with."""
from types import SimpleNamespace

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import torchdali
from torchdali import fn, types
from torchdali.operators.image_filters import derivative_window, smoothing_window

from conftest import assert_batches_equal, constant_source, dali_or_skip, requires_cuda, run_operator

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(7)
SIZES = ((7, 9), (1, 1), (2, 3), (12, 5))


def images(dtype=np.uint8, c=3, sizes=SIZES, lo=0, hi=256):
    return [RNG.integers(lo, hi, (h, w, c)).astype(dtype) for h, w in sizes]


HWC = images()
FILTERS = [RNG.normal(size=(3, 3)).astype(np.float32) for _ in SIZES]
WIDE = [RNG.normal(size=(5, 8)).astype(np.float32) for _ in SIZES]  # wider than most images
RAGGED = [RNG.normal(size=s).astype(np.float32) for s in ((3, 3), (1, 4), (2, 2), (5, 1))]
SEQ = [RNG.integers(0, 256, (3, h, w, 2)).astype(np.uint8) for h, w in SIZES[:3]]

# name: (images, layout, extra inputs, arg inputs, kwargs)
FILTER_CASES = {
    **{f"border_{b}": (HWC, "HWC", [FILTERS], None, dict(border=b))
       for b in ("reflect_101", "reflect_1001", "wrap", "clamp", "constant", "pad", "edge", "REFLECT")},
    "fill_value": (HWC, "HWC", [FILTERS, [np.uint8(v) for v in (7, 255, 0, 100)]], None, dict(border="constant")),
    "fill_ignored": (HWC, "HWC", [FILTERS, [np.uint8(7)] * 4], None, {}),
    **{f"wide_{b}": (HWC, "HWC", [WIDE], None, dict(border=b, anchor=[1, 6]))
       for b in ("reflect_101", "reflect_1001", "wrap", "clamp", "constant")},
    "ragged_filters": (HWC, "HWC", [RAGGED], None, {}),
    "anchor_per_sample": (HWC, "HWC", [FILTERS], {"anchor": [np.array(a, np.int32) for a in
                                                             ([0, 0], [2, 1], [-1, -1], [1, 2])]}, {}),
    "valid": (images(sizes=((7, 9), (5, 8), (6, 11))), "HWC", [WIDE[:3]], None, dict(mode="valid")),
    "valid_exact_fit": (images(sizes=((5, 8),)), "HWC", [WIDE[:1]], None, dict(mode="VALID")),
    "to_float": (HWC, "HWC", [FILTERS], None, dict(dtype=types.FLOAT)),
    "int16": (images(np.int16, lo=-30000, hi=30000), "HWC", [FILTERS], None, {}),
    "uint16": (images(np.uint16, hi=65536), "HWC", [FILTERS], None, dict(border="wrap")),
    "float32": ([(im / 255).astype(np.float32) for im in HWC], "HWC", [FILTERS], None, {}),
    "chw": ([np.ascontiguousarray(im.transpose(2, 0, 1)) for im in HWC], "CHW", [FILTERS], None, {}),
    "hw": ([im[..., 0].copy() for im in HWC], "HW", [FILTERS], None, dict(border="clamp")),
    "no_layout": ([im[..., 0].copy() for im in HWC], "", [FILTERS], None, {}),
    "dense": (images(sizes=((6, 7),) * 3), "HWC", [[FILTERS[0]] * 3], None, {}),
    "sequence": (SEQ, "FHWC", [FILTERS[:3]], None, {}),
    "big_filter": (images(sizes=((40, 45), (13, 17))), "HWC",
                   [[RNG.normal(size=(13, 15)).astype(np.float32) for _ in range(2)]], None, {}),
}


def _filter_run(lib, case, device="cpu"):
    ims, layout, extra, named, kwargs = FILTER_CASES[case]
    return run_operator(lib, "filter", ims, layout=layout, device=device, inputs=extra, arg_inputs=named,
                        **kwargs)


@pytest.mark.parametrize("case", list(FILTER_CASES))
def test_filter_against_dali(case):
    nvidia_dali = dali_or_skip()
    ours, our_layout = _filter_run(torchdali, case)
    theirs, their_layout = _filter_run(nvidia_dali, case)
    assert our_layout == their_layout
    if ours[0].dtype == np.uint8:
        assert_batches_equal(ours, theirs)
        return
    # OpenCV (DALI's CPU filter) may add the float32 products in another order (its SIMD lanes):
    # sums of 16-bit values then round a last bit apart, one unit of the integer outputs.
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=1e-6,
                                   atol=1 if a.dtype.kind in "iu" else 1e-6)


def _reference_filter(image, kernel, anchor, pad_mode, fill=0):
    """A float64 correlation of an HWC image with numpy's padding."""
    r, s = kernel.shape
    a, b = anchor
    pad = ((a, r - 1 - a), (b, s - 1 - b), (0, 0))
    kw = dict(constant_values=fill) if pad_mode == "constant" else {}
    padded = np.pad(image.astype(np.float64), pad, mode=pad_mode, **kw)
    out = np.zeros(image.shape)
    for i in range(r):
        for j in range(s):
            out += kernel[i, j] * padded[i:i + image.shape[0], j:j + image.shape[1]]
    return out


@pytest.mark.parametrize("border, pad_mode", [("reflect_101", "reflect"), ("reflect_1001", "symmetric"),
                                              ("wrap", "wrap"), ("clamp", "edge"), ("constant", "constant")])
def test_filter_against_reference(border, pad_mode):
    """Float32 output, filters wider than the images (borders applied more than once)."""
    ims = [(im / 255).astype(np.float32) for im in HWC]
    got, _ = run_operator(torchdali, "filter", ims, inputs=[WIDE, [np.float32(0.5)] * 4], border=border,
                          anchor=[3, 2])
    for im, w, g in zip(ims, WIDE, got):
        expected = _reference_filter(im, w, (3, 2), pad_mode, 0.5)
        np.testing.assert_allclose(g, expected, atol=1e-5)


def test_filter_per_frame_filters():
    """fn.per_frame filters: one per frame of each sequence."""
    per_frame = [RNG.normal(size=(3, 3, 3)).astype(np.float32) for _ in SEQ]

    @torchdali.pipeline_def(batch_size=len(SEQ), num_threads=1, device_id=None)
    def pipe():
        x = fn.external_source(constant_source(SEQ), layout="FHWC")
        f = fn.per_frame(fn.external_source(constant_source(per_frame)))
        return fn.filter(x, f)

    p = pipe()
    p.build()
    out = p.run()[0]
    for i, (seq, filters) in enumerate(zip(SEQ, per_frame)):
        for k in range(len(seq)):
            frame, _ = run_operator(torchdali, "filter", [seq[k]], inputs=[[filters[k]]])
            np.testing.assert_array_equal(np.array(out.at(i))[k], frame[0])


def test_filter_deprecated_name():
    ours, _ = run_operator(torchdali, "filter", HWC, inputs=[FILTERS])
    with pytest.warns(Warning):
        old, _ = _run_experimental_filter()
    assert_batches_equal(old, ours)
    assert torchdali.ops.Filter is not None and torchdali.ops.Laplacian is not None


def _run_experimental_filter():
    @torchdali.pipeline_def(batch_size=len(HWC), num_threads=1, device_id=None)
    def pipe():
        x = fn.external_source(constant_source(HWC), layout="HWC")
        return fn.experimental.filter(x, fn.external_source(constant_source(FILTERS)))

    p = pipe()
    p.build()
    out = p.run()[0]
    return [np.array(out.at(i)) for i in range(len(out))], out.layout()


def test_filter_empty_samples():
    """An image with no rows or no channels filters to an empty image of its shape (DALI's CPU
    variant refuses them; its GPU one does not)."""
    ims = [np.zeros((0, 5, 3), np.uint8), np.zeros((4, 5, 0), np.uint8), np.full((1, 1, 3), 9, np.uint8)]
    got, _ = run_operator(torchdali, "filter", ims, inputs=[[np.ones((3, 3), np.float32)] * 3])
    assert [g.shape for g in got] == [(0, 5, 3), (4, 5, 0), (1, 1, 3)]
    np.testing.assert_array_equal(got[2], np.full((1, 1, 3), 81, np.uint8))  # 9 x 9 taps reading the pixel


ONES = [np.ones((3, 3), np.float32)]
IMG = [np.zeros((5, 6, 3), np.uint8)]


@pytest.mark.parametrize("ims, extra, kwargs, cls, match", [
    (IMG, [[np.ones((3, 3), np.float64)]], {}, TypeError, "filter 0 has type .*FLOAT64; filters must be FLOAT"),
    (IMG, [[np.ones(3, np.float32)]], {}, ValueError, "filter 0 has 1 dims, the samples 2 spatial dims"),
    (IMG, [[np.ones((0, 3), np.float32)]], {}, ValueError, "non-empty filter"),
    (IMG, [ONES], dict(anchor=[3, 0]), ValueError, "'anchor' = \\[3, 0\\] must lie within the filter"),
    (IMG, [ONES], dict(anchor=[1, 1, 1]), ValueError, "'anchor' = \\[1, 1, 1\\] must have 1 or 2 values"),
    (IMG, [ONES, [np.float32(3)]], dict(border="constant"), TypeError,
     "fill_value 0 is .*FLOAT of shape \\(\\); give a scalar of the data's type"),
    (IMG, [ONES, [np.array([3], np.uint8)]], dict(border="constant"), TypeError, "give a scalar"),
    (IMG, [ONES], dict(dtype=types.INT16), ValueError, "'dtype' = .*INT16.* input's .* or FLOAT"),
    (IMG, [[np.ones((7, 3), np.float32)]], dict(mode="valid"), ValueError, "larger than sample 0"),
    ([np.zeros((5, 6, 3), np.int32)], [ONES], {}, TypeError, "input type .*INT32 is not supported on the cpu"),
    ([np.zeros((5, 6, 3), np.float16)], [ONES], {}, TypeError, "input type .*FLOAT16 is not supported on the cpu"),
    ([np.zeros((5, 6, 3), np.uint8)], [ONES], dict(layout=""), ValueError, "filter 0 has 2 dims, the samples 3"),
])
def test_filter_errors(ims, extra, kwargs, cls, match):
    layout = kwargs.pop("layout", "HWC")
    with pytest.raises(cls, match="filter.*" + match):
        run_operator(torchdali, "filter", ims, layout=layout, inputs=extra, **kwargs)


@pytest.mark.parametrize("kwargs, match", [(dict(border="replicate"), "'border' = 'replicate': is not one of"),
                                           (dict(mode="full"), "'mode' = 'full': is not 'same' or 'valid'")])
def test_filter_bad_constant_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fn.filter(fn.external_source(constant_source(IMG)), fn.external_source(constant_source(ONES)), **kwargs)


# ---------------------------------------------------------------------------------------------
# laplacian

VOLUMES = [RNG.integers(0, 256, (d, h, w, 1)).astype(np.uint8) for d, h, w in ((4, 6, 5), (2, 3, 3), (5, 1, 7))]
LAPLACIAN_CASES = {
    "default": (HWC, "HWC", None, {}),
    "to_float": (HWC, "HWC", None, dict(dtype=types.FLOAT)),
    "per_axis": (HWC, "HWC", None, dict(window_size=[5, 7], smoothing_size=[1, 9], dtype=types.FLOAT)),
    "widest_normalized": (HWC, "HWC", None, dict(window_size=31, normalized_kernel=True, dtype=types.FLOAT)),
    "normalized": (HWC, "HWC", None, dict(window_size=[3, 5], smoothing_size=7, normalized_kernel=True)),
    "scale": (HWC, "HWC", None, dict(window_size=5, scale=[0.5, 2.0])),
    "int8": (images(np.int8, lo=-128, hi=128), "HWC", None, {}),
    "int16": (images(np.int16, lo=-3000, hi=3000), "HWC", None, dict(window_size=5)),
    "uint16": (images(np.uint16, hi=65536), "HWC", None, {}),
    "int32": (images(np.int32, lo=-10 ** 6, hi=10 ** 6), "HWC", None, dict(window_size=7)),
    "float16": ([(im / 255).astype(np.float16) for im in HWC], "HWC", None, {}),
    "float32": ([(im / 255).astype(np.float32) for im in HWC], "HWC", None, dict(window_size=7)),
    "chw": ([np.ascontiguousarray(im.transpose(2, 0, 1)) for im in HWC], "CHW", None, dict(smoothing_size=1)),
    "no_layout": ([im[..., 0].copy() for im in HWC], "", None, {}),
    "dense": (images(sizes=((6, 7),) * 3), "HWC", None, dict(window_size=5)),
    "sequence": (SEQ, "FHWC", None, dict(dtype=types.FLOAT)),
    "volume": (VOLUMES, "DHWC", None, dict(window_size=[3, 5, 3], smoothing_size=[5, 1, 3], dtype=types.FLOAT)),
    "volume_uint8": (VOLUMES, "DHWC", None, dict(scale=[1.0, 0.5, 0.25])),
    "per_sample": (HWC, "HWC", {"window_size": [np.array(v, np.int32) for v in ([3, 5], [7, 3], [5, 5], [9, 11])],
                                "scale": [np.array(v, np.float32) for v in ([1, 2], [0.5, 0.5], [3, 1], [1, 1])]},
                   dict(dtype=types.FLOAT)),
    "per_sample_smoothing": (HWC, "HWC", {"smoothing_size": [np.array(v, np.int32) for v in (1, 3, 5, 7)]},
                             dict(normalized_kernel=True)),
}


def _laplacian_run(lib, case, device="cpu"):
    ims, layout, named, kwargs = LAPLACIAN_CASES[case]
    return run_operator(lib, "laplacian", ims, layout=layout, device=device, arg_inputs=named, **kwargs)


@pytest.mark.parametrize("case", list(LAPLACIAN_CASES))
def test_laplacian_against_dali(case):
    nvidia_dali = dali_or_skip()
    ours, our_layout = _laplacian_run(torchdali, case)
    theirs, their_layout = _laplacian_run(nvidia_dali, case)
    assert our_layout == their_layout
    if ours[0].dtype != np.float16:
        assert_batches_equal(ours, theirs)
        return
    # DALI's float16 path rounds some intermediate to float16; ours stays float32 to the output:
    # a few float16 units apart (2^-8 of a result of magnitude <= 4).
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), atol=2 ** -7)


def test_laplacian_windows():
    """OpenCV's windows: binomial smoothing, the derivative [1, -2, 1] smoothed."""
    assert smoothing_window(1).tolist() == [1] and smoothing_window(5).tolist() == [1, 4, 6, 4, 1]
    assert derivative_window(3).tolist() == [1, -2, 1]
    assert derivative_window(5).tolist() == [1, 0, -2, 0, 1]
    assert smoothing_window(31).dtype == np.float32 and derivative_window(31).sum() == 0


def test_laplacian_of_a_paraboloid():
    """x^2 + 2 y^2 has Laplacian 6 everywhere away from the borders (3-tap windows, no smoothing)."""
    y, x = np.mgrid[0:9, 0:11].astype(np.float32)
    image = (x * x + 2 * y * y)[..., None]
    got, _ = run_operator(torchdali, "laplacian", [image], smoothing_size=1)
    np.testing.assert_array_equal(got[0][1:-1, 1:-1], 6)


@pytest.mark.parametrize("kwargs, match", [
    (dict(window_size=1), "'window_size' = \\[1\\]: must be odd and from 3 to 31"),
    (dict(window_size=4), "'window_size' = \\[4\\]: must be odd"),
    (dict(window_size=33), "'window_size' = \\[33\\]: must be odd and from 3 to 31"),
    (dict(smoothing_size=0), "'smoothing_size' = \\[0\\]: must be odd and from 1 to 31"),
])
def test_laplacian_bad_constant_arguments(kwargs, match):
    with pytest.raises(ValueError, match="laplacian.*" + match):
        fn.laplacian(fn.external_source(constant_source(IMG)), **kwargs)


@pytest.mark.parametrize("kwargs, cls, match", [
    (dict(normalized_kernel=True, scale=1.0), ValueError, "'scale' cannot be given when 'normalized_kernel'"),
    (dict(scale=[1.0, 2.0, 3.0]), ValueError, "'scale' = \\[1.0, 2.0, 3.0\\] must have 1 or 2 values"),
    (dict(window_size=[3, 5, 7]), ValueError, "'window_size' = \\[3, 5, 7\\] must have 1 or 2 values"),
    (dict(dtype=types.INT16), ValueError, "'dtype' = .*INT16.*: the output type must be"),
    (dict(layout="HCW"), ValueError, "only channel-first or channel-last"),
])
def test_laplacian_errors(kwargs, cls, match):
    layout = kwargs.pop("layout", "HWC")
    with pytest.raises(cls, match="laplacian.*" + match):
        run_operator(torchdali, "laplacian", IMG, layout=layout, **kwargs)


def test_laplacian_bad_type_and_empty_samples():
    with pytest.raises(TypeError, match="laplacian.*input type .*FLOAT64 is not supported"):
        run_operator(torchdali, "laplacian", [np.zeros((3, 4, 1))])
    got, _ = run_operator(torchdali, "laplacian", [np.zeros((0, 4, 3), np.uint8), np.ones((1, 1, 3), np.uint8)])
    assert got[0].shape == (0, 4, 3)
    np.testing.assert_array_equal(got[1], 0)  # a constant image has no curvature


# ---------------------------------------------------------------------------------------------
# median_blur, dilate, erode (no DALI CPU variant: NumPy references of OpenCV's rules)

_NP_PAD = {"constant": "constant", "replicate": "edge", "reflect": "symmetric", "reflect_101": "reflect",
           "wrap": "wrap"}


def _windows(hw, size, anchor, pad_mode, fill=0):
    """[H, W, kh, kw] windows of an HW image: (width, height) size, (x, y) anchor."""
    (kw, kh), (ax, ay) = size, anchor
    kwargs = dict(constant_values=fill) if pad_mode == "constant" else {}
    padded = np.pad(hw, ((ay, kh - 1 - ay), (ax, kw - 1 - ax)), mode=pad_mode, **kwargs)
    return sliding_window_view(padded, (kh, kw))


def reference(op, image, layout, size, anchor=None, border="replicate", iterations=1):
    """OpenCV's medianBlur (replicated borders) / dilate / erode of an HW, HWC or CHW image."""
    anchor = [s // 2 for s in size] if anchor is None or anchor[0] == -1 else anchor
    planes = image[None] if layout == "HW" else np.moveaxis(image, -1, 0) if layout == "HWC" else image
    out = []
    for plane in planes.astype(np.float64):
        for _ in range(iterations):
            if op == "median":
                plane = np.median(_windows(plane, size, anchor, "edge"), axis=(2, 3))
            else:
                neutral = -np.inf if op == "dilate" else np.inf
                win = _windows(plane, size, anchor, _NP_PAD[border], neutral)
                plane = win.max(axis=(2, 3)) if op == "dilate" else win.min(axis=(2, 3))
        out.append(plane)
    out = np.stack(out)
    out = out[0] if layout == "HW" else np.moveaxis(out, 0, -1) if layout == "HWC" else out
    return out.astype(image.dtype)


CV_INPUTS = {
    "HWC": HWC,
    "HWC_uint16": images(np.uint16, hi=65536),
    "HWC_int16": images(np.int16, lo=-30000, hi=30000),
    "HWC_float": [RNG.random((h, w, 3), np.float32) for h, w in SIZES],
    "CHW": [np.ascontiguousarray(im.transpose(2, 0, 1)) for im in HWC],
    "HW": [im[..., 0].copy() for im in HWC],
    "HWC_dense": images(sizes=((8, 10),) * 3, c=1),
}


def run_cv(op, ims, **kwargs):
    """run_operator for fn.experimental.<op> (run_operator looks up one name in fn)."""
    lib_fn = SimpleNamespace(external_source=fn.external_source)
    setattr(lib_fn, op, getattr(fn.experimental, op))
    return run_operator(SimpleNamespace(pipeline_def=torchdali.pipeline_def, fn=lib_fn), op, ims, **kwargs)


def _layout(name):
    return name.split("_")[0]


@pytest.mark.parametrize("name", list(CV_INPUTS))
@pytest.mark.parametrize("size", [[3, 3], [5, 3], [1, 7]])
def test_median_blur_against_reference(name, size):
    got, layout = run_cv("median_blur", CV_INPUTS[name], layout=_layout(name),
                               window_size=size)
    assert layout == _layout(name)
    assert_batches_equal(got, [reference("median", im, _layout(name), size) for im in CV_INPUTS[name]])


MORPH_CASES = {
    "default": ({}, None),
    "even_mask": (dict(mask_size=[4, 2]), None),
    "anchor": (dict(mask_size=[3, 5], anchor=[0, 4]), None),
    "iterations": (dict(mask_size=[3, 2], iterations=3), None),
    **{f"border_{b}": (dict(mask_size=[5, 4], anchor=[4, 0], border_mode=b), None)
       for b in ("replicate", "reflect", "reflect_101", "wrap")},
    "per_sample": ({}, {"mask_size": [np.array(v, np.int32) for v in ([3, 3], [5, 1], [2, 6], [7, 7])],
                        "anchor": [np.array(v, np.int32) for v in ([0, 0], [-1, -1], [1, 5], [6, 0])]}),
}


@pytest.mark.parametrize("op", ["dilate", "erode"])
@pytest.mark.parametrize("case", list(MORPH_CASES))
@pytest.mark.parametrize("name", ["HWC", "HWC_uint16", "HWC_float", "CHW", "HW", "HWC_dense"])
def test_morphology_against_reference(op, case, name):
    kwargs, named = MORPH_CASES[case]
    ims = CV_INPUTS[name]
    if named is not None and len(ims) != 4:
        pytest.skip("per-sample arguments for the 4-sample batches")
    got, _ = run_cv(op, ims, layout=_layout(name), arg_inputs=named, **kwargs)
    expected = []
    for i, im in enumerate(ims):
        size = list(named["mask_size"][i]) if named else kwargs.get("mask_size", [3, 3])
        anchor = list(named["anchor"][i]) if named else kwargs.get("anchor")
        expected.append(reference(op, im, _layout(name), size, anchor, kwargs.get("border_mode", "constant"),
                                  kwargs.get("iterations", 1)))
    assert_batches_equal(got, expected)


@pytest.mark.parametrize("op", ["dilate", "erode"])
def test_iterations_grow_the_mask(op):
    """DALI's documented rule: each further iteration grows the mask by (width - 1, height - 1)
    (with the default constant border)."""
    twice, _ = run_cv(op, HWC, mask_size=[3, 4], iterations=3)
    grown, _ = run_cv(op, HWC, mask_size=[7, 10], anchor=[3, 6])
    assert_batches_equal(twice, grown)


def test_neighbourhood_sequences_and_empty_samples():
    for op, kwargs in (("median_blur", dict(window_size=3)), ("dilate", {}), ("erode", dict(mask_size=2))):
        seq, layout = run_cv(op, SEQ, layout="FHWC", **kwargs)
        assert layout == "FHWC"
        for s, out in zip(SEQ, seq):
            frames, _ = run_cv(op, list(s), **kwargs)
            np.testing.assert_array_equal(out, np.stack(frames))
        empty, _ = run_cv(op, [np.zeros((0, 4, 3), np.uint8), HWC[1]], **kwargs)
        assert empty[0].shape == (0, 4, 3)
        np.testing.assert_array_equal(empty[1], HWC[1])  # one pixel: its own median, maximum, minimum


@pytest.mark.parametrize("op, kwargs, match", [
    ("median_blur", dict(window_size=[4, 3]), "'window_size' = \\[4, 3\\] must be odd and positive"),
    ("median_blur", dict(window_size=[3, 3, 3]), "'window_size' = \\[3, 3, 3\\] must have 1 or 2 values"),
    ("dilate", dict(mask_size=[0, 3]), "'mask_size' = \\[0, 3\\] must be positive"),
    ("erode", dict(anchor=[3, 0]), "'anchor' = \\[3, 0\\] must lie within the mask \\[3, 3\\]"),
    ("dilate", dict(layout="HCW"), "input layout 'HCW' with samples of 3 dims is not supported"),
])
def test_neighbourhood_errors(op, kwargs, match):
    layout = kwargs.pop("layout", "HWC")
    with pytest.raises(ValueError, match=f"{op}.*" + match):
        run_cv(op, IMG, layout=layout, **kwargs)


@pytest.mark.parametrize("op, kwargs, match", [
    ("dilate", dict(iterations=0), "'iterations' = 0: must be >= 1"),
    ("erode", dict(border_mode="clamp"), "'border_mode' = 'clamp': is not one of"),
])
def test_neighbourhood_bad_constant_arguments(op, kwargs, match):
    with pytest.raises(ValueError, match=match):
        getattr(fn.experimental, op)(fn.external_source(constant_source(IMG)), **kwargs)


def test_neighbourhood_bad_type():
    with pytest.raises(TypeError, match="median_blur.*input type .*INT32 is not supported"):
        run_cv("median_blur", [np.zeros((3, 4, 1), np.int32)])


# ---------------------------------------------------------------------------------------------
# GPU: the same results as the CPU


@requires_cuda
@pytest.mark.parametrize("case", list(FILTER_CASES))
def test_filter_gpu_matches_cpu(case):
    assert_batches_equal(_filter_run(torchdali, case, "gpu")[0], _filter_run(torchdali, case)[0])


@requires_cuda
@pytest.mark.parametrize("case", list(LAPLACIAN_CASES))
def test_laplacian_gpu_matches_cpu(case):
    cpu, gpu = _laplacian_run(torchdali, case)[0], _laplacian_run(torchdali, case, "gpu")[0]
    for a, b in zip(cpu, gpu):  # the separable_conv kernel's GPU sums may round the last float32 bit apart
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(b.astype(np.float64), a.astype(np.float64), rtol=1e-5, atol=1)


@requires_cuda
@pytest.mark.parametrize("op, kwargs", [("median_blur", dict(window_size=[5, 3])),
                                        ("dilate", dict(mask_size=[4, 3], border_mode="reflect")),
                                        ("erode", dict(iterations=2, border_mode="wrap"))])
@pytest.mark.parametrize("name", list(CV_INPUTS))
def test_neighbourhood_gpu_matches_cpu(op, kwargs, name):
    args = dict(layout=_layout(name), **kwargs)
    cpu, _ = run_cv(op, CV_INPUTS[name], **args)
    gpu, _ = run_cv(op, CV_INPUTS[name], device="gpu", **args)
    assert_batches_equal(gpu, cpu)
