"""fn.warp_affine and fn.rotate in a pipeline: against NumPy references and, where installed,
NVIDIA DALI (CPU) on the same inputs: rotate's output shapes exactly, pixels closely (the
kernels compute each source coordinate directly, DALI's CPU kernel accumulates it along a
row, so pixels at exact ties - frequent for NN at 45 degrees on even sizes - can pick the
neighbour). The test images are smooth with some noise, like photographs, so the mean
difference measures agreement rather than the contrast of noise."""
import math

import numpy as np
import pytest

import torchdali
from torchdali import types
from torchdali.operators.warp import rotated_canvas

from conftest import as_numpy_batch, constant_source, dali_or_skip, requires_cuda, run_operator

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(0)
SIZES = ((17, 23), (1, 1), (31, 5), (12, 12), (64, 97), (100, 75))


def smooth_image(h, w):
    y, x = np.mgrid[:h, :w]
    base = [128 + 100 * np.sin(x / 5 + k) * np.cos(y / 7 - k) for k in range(3)]
    noisy = np.stack(base, -1) + RNG.uniform(-10, 10, (h, w, 3))
    return np.clip(noisy, 0, 255).astype(np.uint8)


IMAGES = [smooth_image(h, w) for h, w in SIZES]


def run(lib, op, images=IMAGES, **kwargs):
    return run_operator(lib, op, images, **kwargs)


ANGLES = (0, 90, 180, -90, 270, -45, 45, 30.5, 1, 135, -160, 89.9, 0.001, 753.3)
# (argument, value) pairs run against DALI: interpolation, fill, sizes.
VARIANTS = [
    {},
    dict(interp_type=types.INTERP_NN),
    dict(fill_value=17.0),
    dict(fill_value=300.0, interp_type=types.INTERP_NN),
    dict(keep_size=True),
    dict(size=[40.5, 21.0]),
]
MATRICES = [
    [1.0, 0.0, 2.0, 0.0, 1.0, -1.0],
    [0.9, 0.2, -3.0, -0.15, 1.1, 4.5],
    [0.8660254, -0.5, 20.0, 0.5, 0.8660254, -10.0],
    [1.5, 0.3, 0.0, 0.1, 0.7, 2.0],
]


def mean_abs_diff(a, b):
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).mean())


def assert_close_to_dali(got, expected, max_mean):
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape and g.dtype == e.dtype, f"sample {i}: {g.shape} vs {e.shape}"
        assert mean_abs_diff(g, e) < max_mean, f"sample {i}: mean |diff| {mean_abs_diff(g, e)}"


# --- NumPy references ---

@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR])
def test_rotate_multiples_of_90_are_numpy_rotations(interp):
    for angle, k in ((90, 1), (180, 2), (-90, 3), (270, 3), (0, 0)):
        got, layout = run(torchdali, "rotate", angle=angle, interp_type=interp)
        assert layout == "HWC"
        for g, im in zip(got, IMAGES):  # counter-clockwise, as np.rot90
            expected = np.rot90(im, k)
            assert g.shape == expected.shape
            assert np.abs(g.astype(int) - expected).max() <= (0 if interp == types.INTERP_NN else 1)


def test_warp_affine_integer_shift_is_numpy_slicing():
    got, _ = run(torchdali, "warp_affine", matrix=[1, 0, 3, 0, 1, 2], fill_value=9)
    for g, im in zip(got, IMAGES):
        expected = np.full_like(im, 9)
        h, w = im.shape[:2]
        expected[: max(h - 2, 0), : max(w - 3, 0)] = im[2:, 3:]
        np.testing.assert_array_equal(g, expected)


def test_warp_affine_inverse_map_false_inverts_the_matrix():
    forward = [0.9, 0.2, -3.0, -0.15, 1.1, 4.5]
    inverse = np.linalg.inv(np.vstack([np.reshape(forward, (2, 3)), [0, 0, 1]]))[:2].ravel()
    got, _ = run(torchdali, "warp_affine", matrix=forward, inverse_map=False)
    expected, _ = run(torchdali, "warp_affine", matrix=inverse.tolist())
    for g, e in zip(got, expected):
        assert np.abs(g.astype(int) - e).max() <= 1


def test_rotate_chw_equals_hwc_and_dense_batches():
    images = [RNG.integers(0, 256, (15, 21, 3), dtype=np.uint8) for _ in range(3)]
    hwc, _ = run(torchdali, "rotate", images, angle=33.0)
    chw, layout = run(torchdali, "rotate", [im.transpose(2, 0, 1) for im in images],
                      layout="CHW", angle=33.0)
    assert layout == "CHW"
    for a, b in zip(hwc, chw):
        np.testing.assert_array_equal(a, b.transpose(1, 2, 0))


def test_rotate_dtype_float_keeps_fractions():
    got, _ = run(torchdali, "rotate", IMAGES[:1], angle=30.0, dtype=types.FLOAT)
    as_u8, _ = run(torchdali, "rotate", IMAGES[:1], angle=30.0)
    assert got[0].dtype == np.float32
    assert np.abs(np.round(got[0]) - as_u8[0]).max() <= 1
    assert np.any(got[0] != np.round(got[0]))


# --- against DALI ---

def test_rotate_output_shapes_equal_dalis_over_many_angles_and_sizes():
    dali = dali_or_skip()
    rng = np.random.default_rng(1)
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 60, (24, 2))] + [(1, 2), (2, 1), (3, 3)]
    images = [np.zeros((h, w, 1), np.uint8) for h, w in sizes]
    angles = list(ANGLES) + [float(a) for a in rng.uniform(-400, 400, 20)] + [26.565, 63.435, -135]
    for angle in angles:
        ours, _ = run(torchdali, "rotate", images, angle=angle)
        theirs, _ = run(dali, "rotate", images, angle=angle)
        for (h, w), o, t in zip(sizes, ours, theirs):
            assert o.shape == t.shape, f"angle {angle}, input {h}x{w}"
        assert rotated_canvas(np.array(sizes), np.full(len(sizes), angle)).tolist() == \
            [list(o.shape[:2]) for o in ours]


@pytest.mark.parametrize("variant", VARIANTS, ids=[str(v) for v in VARIANTS])
def test_rotate_matches_dali(variant):
    dali = dali_or_skip()
    for angle in ANGLES:
        ours, _ = run(torchdali, "rotate", angle=angle, **variant)
        theirs, _ = run(dali, "rotate", angle=angle, **variant)
        assert_close_to_dali(ours, theirs, 3.0)


@pytest.mark.parametrize("variant", VARIANTS[:4] + [dict(size=[30, 41]), dict(dtype=types.FLOAT),
                                                    dict(inverse_map=False)],
                         ids=[str(v) for v in VARIANTS[:4]] + ["size", "float", "inverse"])
def test_warp_affine_matches_dali(variant):
    dali = dali_or_skip()
    for m in MATRICES:
        ours, _ = run(torchdali, "warp_affine", matrix=m, **variant)
        theirs, _ = run(dali, "warp_affine", matrix=m, **variant)
        assert_close_to_dali(ours, theirs, 3.0)


LABEL_IMAGES = {dtype: [(im.astype(np.int64) * 97 - 9000).astype(dtype) for im in IMAGES]
                for dtype in (np.int16, np.int32)}


@pytest.mark.parametrize("dtype", [np.int16, np.int32], ids=["int16", "int32"])
@pytest.mark.parametrize("op,kwargs", [("rotate", dict(angle=33.0)), ("rotate", dict(angle=-60, fill_value=-5000.0)),
                                       ("warp_affine", dict(matrix=MATRICES[1])),
                                       ("warp_affine", dict(matrix=MATRICES[2], dtype=types.FLOAT))])
@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR], ids=["nn", "linear"])
def test_label_types_match_dali(dtype, op, kwargs, interp):
    """int16 and int32 images (label maps, masks) as DALI takes them: to their own type or
    FLOAT; nearest neighbour keeps the label values."""
    dali = dali_or_skip()
    images = LABEL_IMAGES[dtype]
    ours, _ = run(torchdali, op, images, interp_type=interp, **kwargs)
    theirs, _ = run(dali, op, images, interp_type=interp, **kwargs)
    for o, t, im in zip(ours, theirs, images):
        assert o.shape == t.shape and o.dtype == t.dtype
        if interp == types.INTERP_NN and o.dtype == dtype:  # every value is an input value (or the fill)
            assert np.isin(o, np.append(im.ravel(), kwargs.get("fill_value", im.flat[0]))).all()
    assert_close_to_dali(ours, theirs, 3.0 * 97)  # the ties that NN breaks differently (see the module)


def test_label_type_conversions_dali_refuses_are_errors():
    with pytest.raises(TypeError, match=r"rotate \('.*'\): cannot warp INT32 images to UINT8"):
        run(torchdali, "rotate", LABEL_IMAGES[np.int32], angle=10, dtype=types.UINT8)
    with pytest.raises(TypeError, match=r"warp_affine \('.*'\): cannot warp UINT8 images to INT16"):
        run(torchdali, "warp_affine", IMAGES, matrix=MATRICES[0], dtype=types.INT16)


def test_per_sample_angle_size_and_matrix_match_dali():
    dali = dali_or_skip()
    angles = [np.float32(a) for a in (10, -33.3, 90, 181, 7.5, 0)]
    sizes = [np.array(s, np.float32) for s in ((20, 30), (7, 9), (31, 5), (12.9, 12), (40, 40), (3, 50))]
    mats = [np.array(m, np.float32).reshape(2, 3) for m in MATRICES + MATRICES[:2]]
    for op, kwargs, arg_inputs, inputs in (
        ("rotate", {}, dict(angle=angles), ()),
        ("rotate", {}, dict(angle=angles, size=sizes), ()),
        ("warp_affine", {}, dict(matrix=mats), ()),
        ("warp_affine", dict(size=[25, 26]), {}, (mats,)),
    ):
        ours, _ = run(torchdali, op, arg_inputs=arg_inputs, inputs=inputs, **kwargs)
        theirs, _ = run(dali, op, arg_inputs=arg_inputs, inputs=inputs, **kwargs)
        assert_close_to_dali(ours, theirs, 3.0)


# --- per-sample arguments from other operators ---

def test_angle_from_random_uniform_matches_constant_angles():
    @torchdali.pipeline_def(batch_size=len(IMAGES), num_threads=2, device_id=None, seed=5)
    def pipe():
        x = torchdali.fn.external_source(constant_source(IMAGES), layout="HWC")
        angle = torchdali.fn.random.uniform(range=(-180.0, 180.0))
        return torchdali.fn.rotate(x, angle=angle, fill_value=0), angle

    p = pipe()
    p.build()
    out, angles = (as_numpy_batch(t) for t in p.run())
    for i, (im, a) in enumerate(zip(IMAGES, angles)):
        single, _ = run(torchdali, "rotate", [im], angle=float(a), fill_value=0)
        np.testing.assert_array_equal(out[i], single[0])


def test_matrix_input_equals_matrix_argument():
    mats = [np.array(m, np.float32).reshape(2, 3) for m in MATRICES + MATRICES[:2]]
    by_input, _ = run(torchdali, "warp_affine", inputs=(mats,))
    by_arg, _ = run(torchdali, "warp_affine", arg_inputs=dict(matrix=mats))
    for a, b, im, m in zip(by_input, by_arg, IMAGES, mats):
        np.testing.assert_array_equal(a, b)
        single, _ = run(torchdali, "warp_affine", [im], matrix=m.ravel().tolist())
        np.testing.assert_array_equal(a, single[0])


# --- errors ---

ERRORS = [
    ("rotate", dict(angle=math.nan), "rotate: argument 'angle' = nan: must be a finite number"),
    ("rotate", dict(angle=10, size=[-3, 4]), "rotate: argument 'size'.*must be 2 positive values"),
    ("rotate", dict(angle=10, size=[0, 4]), "rotate: argument 'size'.*must be 2 positive values"),
    ("rotate", dict(angle=10, interp_type=types.INTERP_CUBIC), "rotate: argument 'interp_type'.*INTERP_NN"),
    ("warp_affine", dict(matrix=[1, 0, 0, 0, 1]), "warp_affine: argument 'matrix'.*6 values"),
    ("warp_affine", dict(matrix=[1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0]),
     r"warp_affine \('.*'\): argument 'matrix' must have 6 values \(a 2x3 matrix\) for images, got 12"),
    ("warp_affine", dict(matrix=[1, 0, 0, 0, 1, 0], size=[3, 4, 5]),
     r"warp_affine \('.*'\): argument 'size' must have 2 values \(height, width\) for images"),
    ("warp_affine", dict(matrix=[1, 0, math.inf, 0, 1, 0]), "warp_affine: argument 'matrix'.*finite"),
    ("warp_affine", dict(matrix=[1, 0, 0, 0, 1, 0], size=[5]), "warp_affine: argument 'size'"),
    ("warp_affine", {}, "warp_affine: the argument 'matrix' must be given"),
    ("warp_affine", dict(matrix=[1, 2, 0, 2, 4, 0], inverse_map=False),
     r"warp_affine \('.*'\): argument 'matrix' of sample 0 is not invertible"),
]


@pytest.mark.parametrize("op,kwargs,match", ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_bad_arguments_name_operator_and_argument(op, kwargs, match):
    with pytest.raises(ValueError, match=match):
        run(torchdali, op, **kwargs)


def test_bad_per_sample_values_name_operator_and_argument():
    with pytest.raises(ValueError, match=r"rotate \('.*'\): argument input 'angle' sample 1 = nan"):
        run(torchdali, "rotate", arg_inputs=dict(angle=[np.float32(v) for v in (1, np.nan, 2, 3, 4, 5)]))
    with pytest.raises(ValueError, match=r"warp_affine \('.*'\): argument input 'matrix' sample 0.*6 values"):
        run(torchdali, "warp_affine", arg_inputs=dict(matrix=[np.ones(5, np.float32)] * len(IMAGES)))
    with pytest.raises(ValueError, match=r"warp_affine \('.*'\): input 1 \(mtx\) of sample 0 must have 6"):
        run(torchdali, "warp_affine", inputs=([np.ones(4, np.float32)] * len(IMAGES),))
    with pytest.raises(ValueError, match=r"rotate \('.*'\): argument input 'size' sample 0.*positive"):
        run(torchdali, "rotate", angle=3, arg_inputs=dict(size=[np.array([0, 5], np.float32)] * len(IMAGES)))


def test_images_ignore_the_axis_as_dali_does():  # volumes: tests/test_warp_volumes.py
    with_axis, _ = run(torchdali, "rotate", angle=30.5, axis=[1, 0, 0])
    without, _ = run(torchdali, "rotate", angle=30.5)
    for a, b in zip(with_axis, without):
        np.testing.assert_array_equal(a, b)


# --- GPU ---

@requires_cuda
@pytest.mark.parametrize("op,kwargs", [("rotate", dict(angle=30.5)), ("rotate", dict(angle=-45, fill_value=3)),
                                       ("warp_affine", dict(matrix=MATRICES[1], interp_type=types.INTERP_NN))])
def test_gpu_equals_cpu(op, kwargs):
    cpu, _ = run(torchdali, op, **kwargs)
    gpu, _ = run(torchdali, op, device="gpu", **kwargs)
    for c, g in zip(cpu, gpu):
        np.testing.assert_array_equal(c, g)
