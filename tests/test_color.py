"""Colour operators in a pipeline (brightness_contrast, brightness, contrast, hsv, hue,
saturation, color_twist): against a NumPy reference of DALI's formulas and, where
installed, NVIDIA DALI on the same images."""
import numpy as np
import pytest

import torchdali
from torchdali import fn, types

from conftest import as_numpy_batch, dali_or_skip, requires_cuda

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(0)
SIZES = ((17, 23), (1, 1), (31, 5), (12, 12))
IMAGES = {
    np.uint8: [RNG.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in SIZES],
    np.float32: [RNG.random((h, w, 3), dtype=np.float32) for h, w in SIZES],
}
PER_SAMPLE = {  # argument inputs: one value per sample
    "brightness": [0.5, 1.3, 2.0, 0.9], "brightness_shift": [0.0, 0.1, -0.2, 0.05],
    "contrast": [1.5, 0.0, 0.7, 1.2], "contrast_center": [100.0, 30.0, 0.2, 128.0],
    "hue": [30.0, -75.0, 200.0, 0.0], "saturation": [0.5, 1.5, 0.0, 1.0], "value": [1.2, 0.8, 1.0, 0.55],
}

# (operator, constant kwargs, names of per-sample argument inputs, input dtype)
CASES = {
    "bc_uint8": ("brightness_contrast", dict(brightness=1.2, contrast=1.5), (), np.uint8),
    "bc_per_sample": ("brightness_contrast", {}, ("brightness", "brightness_shift", "contrast"), np.uint8),
    "bc_center_int16_out": ("brightness_contrast", dict(contrast=0.5, brightness_shift=0.01,
                                                        contrast_center=90.0, dtype=types.INT16), (), np.uint8),
    "bc_float_to_uint8": ("brightness_contrast", dict(brightness=200.0, dtype=types.UINT8), (), np.float32),
    "bc_float": ("brightness_contrast", dict(contrast=2.0, brightness_shift=0.1), ("contrast_center",), np.float32),
    "bc_uint8_to_float": ("brightness_contrast", dict(contrast=1.5, dtype=types.FLOAT), (), np.uint8),
    "brightness": ("brightness", dict(brightness_shift=0.2), ("brightness",), np.uint8),
    "contrast": ("contrast", {}, ("contrast",), np.uint8),
    "contrast_float": ("contrast", dict(contrast=0.3), (), np.float32),
    "hsv_uint8": ("hsv", dict(hue=30.0, saturation=0.5, value=1.2), (), np.uint8),
    "hsv_per_sample": ("hsv", {}, ("hue", "saturation", "value"), np.uint8),
    "hsv_float_default_dtype": ("hsv", dict(hue=20.0), (), np.float32),
    "hsv_float": ("hsv", dict(saturation=2.0, dtype=types.FLOAT), ("hue",), np.float32),
    "hue": ("hue", {}, ("hue",), np.uint8),
    "hue_float": ("hue", dict(hue=45.0, image_type=types.RGB), (), np.float32),
    "saturation": ("saturation", {}, ("saturation",), np.uint8),
    "color_twist": ("color_twist", dict(brightness=1.1, contrast=0.8, hue=20.0, saturation=1.3), (), np.uint8),
    "color_twist_per_sample": ("color_twist", {}, ("brightness", "contrast", "hue", "saturation"), np.uint8),
    "color_twist_float": ("color_twist", dict(contrast=0.7, hue=-40.0), (), np.float32),
    "color_twist_int32_out": ("color_twist", dict(contrast=1.4, dtype=types.INT32), ("hue",), np.uint8),
}

RGB2YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])


def yiq(hue=0.0, sat=1.0, value=1.0):
    h = np.deg2rad(hue)
    rot = np.array([[1, 0, 0], [0, np.cos(h), np.sin(h)], [0, -np.sin(h), np.cos(h)]])
    return np.linalg.inv(RGB2YIQ) @ rot @ np.diag([value, value * sat, value * sat]) @ RGB2YIQ


def reference(op, img, kw):
    """DALI's formulas, in float64."""
    x = img.astype(np.float64)
    in_float = img.dtype.kind == "f"
    dtype = kw.get("dtype", types.UINT8 if op == "hsv" else None)
    out_type = img.dtype if dtype is None else np.dtype(types.to_numpy_type(dtype))
    g = lambda name, d: kw.get(name, d)  # noqa: E731
    if op in ("brightness_contrast", "brightness", "contrast"):
        center = g("contrast_center", 0.5 if in_float else 128.0)
        rng = 1.0 if out_type.kind == "f" else np.iinfo(out_type).max
        out = g("brightness_shift", 0.0) * rng + g("brightness", 1.0) * (
            center + g("contrast", 1.0) * (x - center))
    elif op in ("hsv", "hue", "saturation"):
        out = x @ yiq(g("hue", 0.0), g("saturation", 1.0), g("value", 1.0)).T
    else:
        half = 0.5 if in_float else 128.0
        b, c = g("brightness", 1.0), g("contrast", 1.0)
        out = b * c * (x @ yiq(g("hue", 0.0), g("saturation", 1.0)).T) + (half - half * c) * b
    if out_type.kind in "iu":
        info = np.iinfo(out_type)
        out = np.clip(np.where(out >= 0, np.floor(out + 0.5), np.ceil(out - 0.5)), info.min, info.max)
    return out.astype(out_type)


def _values(name):
    """A source of the per-sample values of `name` (a callable of no arguments)."""
    return lambda: [np.float32(v) for v in PER_SAMPLE[name]]


def run(lib, case, device="cpu"):
    op, kwargs, per_sample, in_type = CASES[case]
    images = IMAGES[in_type]

    @lib.pipeline_def(batch_size=len(images), num_threads=2, device_id=None if device == "cpu" else 0, seed=1)
    def pipe():
        x = lib.fn.external_source(lambda: images, layout="HWC")
        if device == "gpu":
            x = x.gpu()
        arg_inputs = {name: lib.fn.external_source(_values(name)) for name in per_sample}
        return getattr(lib.fn, op)(x, **kwargs, **arg_inputs)

    p = pipe()
    p.build()
    return as_numpy_batch(p.run()[0])


def sample_kwargs(case, i):
    _, kwargs, per_sample, _ = CASES[case]
    return {**kwargs, **{name: PER_SAMPLE[name][i] for name in per_sample}}


def compare(a, b, case):
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    if a.dtype.kind == "f":
        scale = 1.0 if CASES[case][3] == np.float32 else 255.0
        assert diff.max() <= 1e-4 * scale + 1e-3 * np.abs(b).max(), case
    else:
        assert diff.max() <= 1 and diff.mean() < 0.05, case


@pytest.mark.parametrize("case", list(CASES))
def test_against_reference(case):
    op, _, _, in_type = CASES[case]
    for i, got in enumerate(run(torchdali, case)):
        compare(got, reference(op, IMAGES[in_type][i], sample_kwargs(case, i)), case)


@pytest.mark.parametrize("case", list(CASES))
def test_against_dali(case):
    dali_or_skip()
    import nvidia.dali as nvidia_dali
    import nvidia.dali.fn  # noqa: F401
    ours, theirs = run(torchdali, case), run(nvidia_dali, case)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        if a.dtype.kind == "f":
            assert diff.max() <= 1e-3 * max(1.0, np.abs(b).max()), case
        else:
            assert diff.mean() < 1.0 and diff.max() <= 1, case


def test_sequences_keep_their_layout():
    seq = [RNG.integers(0, 256, (2, 4, 5, 3), dtype=np.uint8)]

    @torchdali.pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        return fn.hsv(fn.external_source(lambda: seq, layout="FHWC"), hue=10.0)

    p = pipe()
    p.build()
    out = p.run()[0]
    assert out.layout() == "FHWC"
    np.testing.assert_allclose(np.array(out.at(0)), reference("hsv", seq[0], dict(hue=10.0)), atol=1)


def test_single_channel_brightness_contrast():
    gray = [RNG.integers(0, 256, (5, 7, 1), dtype=np.uint8)]

    @torchdali.pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        return fn.contrast(fn.external_source(lambda: gray, layout="HWC"), contrast=2.0)

    p = pipe()
    p.build()
    np.testing.assert_array_equal(np.array(p.run()[0].at(0)), reference("contrast", gray[0], dict(contrast=2.0)))


def test_ops_class_names():
    for name in ("BrightnessContrast", "Brightness", "Contrast", "Hsv", "Hue", "Saturation", "ColorTwist"):
        assert hasattr(torchdali.ops, name)


def _run_one(op, images, layout="HWC", **kwargs):
    @torchdali.pipeline_def(batch_size=len(images), num_threads=1, device_id=None)
    def pipe():
        return getattr(fn, op)(fn.external_source(lambda: images, layout=layout), **kwargs)

    p = pipe()
    p.build()
    return p.run()


def test_bad_arguments():
    with pytest.raises(ValueError, match="dtype.*not one of"):
        fn.brightness_contrast(fn.random.uniform(), dtype=types.INT8)
    with pytest.raises(TypeError, match="brightness_contrast: argument 'contrast'"):
        fn.brightness_contrast(fn.random.uniform(), contrast="high")
    with pytest.raises(TypeError, match="contrast: unknown argument 'brightness'"):
        fn.contrast(fn.random.uniform(), brightness=2.0)
    with pytest.raises(TypeError, match="hue: unknown argument 'saturation'"):
        fn.hue(fn.random.uniform(), saturation=2.0)
    with pytest.raises(ValueError, match="hsv.*sample 0 has 4 channels.*RGB"):
        _run_one("hsv", [np.zeros((3, 3, 4), np.uint8)])
    with pytest.raises(ValueError, match="color_twist.*layout 'CHW'"):
        _run_one("color_twist", [np.zeros((3, 3, 3), np.uint8)], layout="CHW")
    with pytest.raises(TypeError, match="brightness.*input type torch.int32"):
        _run_one("brightness", [np.zeros((3, 3, 3), np.int32)])
    with pytest.raises(ValueError, match="saturation.*sample 1 has shape"):
        _run_one("saturation", [np.zeros((3, 3, 3), np.uint8), np.zeros((3, 3, 1), np.uint8)])


@requires_cuda
@pytest.mark.parametrize("case", list(CASES))
def test_gpu_matches_cpu(case):
    for a, b in zip(run(torchdali, case), run(torchdali, case, device="gpu")):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), atol=1.0, rtol=1e-3)
