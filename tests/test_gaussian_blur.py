"""gaussian_blur in a pipeline: against a float64 NumPy reference (Gaussian windows, reflect-101
borders) and, where installed, NVIDIA DALI on the same inputs."""
import math

import numpy as np
import pytest

import torchdali
from torchdali import fn, types
from torchdali.operators.filters import gaussian_windows, sigmas_for, window_sizes_for

from conftest import as_numpy_batch, dali_or_skip, reflect101, requires_cuda

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(0)
SIZES = ((17, 23), (1, 1), (2, 3), (31, 5), (12, 12))
HWC = [RNG.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in SIZES]
INPUTS = {
    "HWC": HWC,
    "HWC_same": [RNG.integers(0, 256, (9, 11, 3), dtype=np.uint8) for _ in range(3)],
    "HWC_float": [(im / 255.0).astype(np.float32) for im in HWC],
    "HWC_half": [(im / 255.0).astype(np.float16) for im in HWC],
    "CHW": [np.ascontiguousarray(im.transpose(2, 0, 1)) for im in HWC],
    "FHWC": [RNG.integers(0, 256, (3, h, w, 2), dtype=np.uint8) for h, w in SIZES[:3]],
    "DHWC": [RNG.integers(0, 256, (4, h, w, 1), dtype=np.uint8) for h, w in SIZES[:3]],
    "HW": [RNG.integers(0, 256, (h, w), dtype=np.uint8) for h, w in SIZES],
}
LAYOUTS = {"HWC_same": "HWC", "HWC_float": "HWC", "HWC_half": "HWC", "HW": ""}
PER_SAMPLE = {  # argument inputs: one array per sample (of 5; shorter inputs use the first)
    "sigma": [np.float32(v) for v in (0.5, 1.0, 2.0, 3.0, 0.8)],
    "window_size": [np.array(v, np.int32) for v in ([3, 5], [1, 7], [9, 3], [5, 5], [11, 1])],
}

# (input, constant kwargs, names of per-sample argument inputs)
CASES = {
    "sigma": ("HWC", dict(sigma=1.5), ()),
    "window_size": ("HWC", dict(window_size=5), ()),
    "sigma_and_window": ("HWC", dict(sigma=2.0, window_size=3), ()),
    "per_axis": ("HWC_same", dict(sigma=[0.7, 2.0]), ()),
    "to_float": ("HWC_same", dict(sigma=2.0, dtype=types.FLOAT), ()),
    "float": ("HWC_float", dict(sigma=1.2), ()),
    "half": ("HWC_half", dict(sigma=0.9), ()),
    "chw": ("CHW", dict(sigma=1.1), ()),
    "sequence": ("FHWC", dict(sigma=1.0), ()),
    "volume": ("DHWC", dict(sigma=[0.6, 1.0, 1.4]), ()),
    "no_layout": ("HW", dict(sigma=1.3), ()),
    "per_sample_sigma": ("HWC", {}, ("sigma",)),
    "per_sample_window": ("HWC", {}, ("window_size",)),
    # Windows wider than the images, folded onto them (a Gaussian flat over the image, or not).
    "wide_sigma": ("HWC", dict(sigma=40.0), ()),
    "wide_window": ("HWC", dict(sigma=1.0, window_size=61), ()),
}


def reference_window(sigma, size):
    x = np.arange(size) - (size - 1) // 2
    w = np.exp(-x * x / (2.0 * sigma * sigma))
    return w / w.sum()


def reference(img, layout, sigma, window_size, dtype=None):
    """DALI's documented rules, in float64."""
    first = 0
    while first < 2 and layout[first:first + 1] in ("C", "F"):
        first += 1
    axes = list(range(first, img.ndim - (layout.endswith("C"))))
    sig = list(np.broadcast_to(sigma, len(axes)))
    win = list(np.broadcast_to(window_size, len(axes)))
    x = img.astype(np.float64)
    for k in reversed(range(len(axes))):
        s, w = float(sig[k]), int(win[k])
        w = w or 2 * math.ceil(3 * s) + 1
        s = s or ((w - 1) // 2 - 1) * 0.3 + 0.8
        weights, n, r = reference_window(s, w), x.shape[axes[k]], w // 2
        x = sum(weights[j] * np.take(x, reflect101(np.arange(n) + j - r, n), axis=axes[k])
                for j in range(w))
    out_type = np.dtype(types.to_numpy_type(dtype)) if dtype is not None else img.dtype
    if out_type == np.uint8:
        x = np.clip(np.floor(x + 0.5), 0, 255)
    return x.astype(out_type)


def _source(values):
    return lambda: values


def run(lib, case, device="cpu"):
    name, kwargs, per_sample = CASES[case]
    data = INPUTS[name]
    layout = LAYOUTS.get(name, name)

    @lib.pipeline_def(batch_size=len(data), num_threads=2, device_id=None if device == "cpu" else 0)
    def pipe():
        x = lib.fn.external_source(_source(data), layout=layout or None)
        if device == "gpu":
            x = x.gpu()
        arg_inputs = {a: lib.fn.external_source(_source(PER_SAMPLE[a][:len(data)])) for a in per_sample}
        return lib.fn.gaussian_blur(x, **kwargs, **arg_inputs)

    p = pipe()
    p.build()
    return as_numpy_batch(p.run()[0])


def sample_args(case, i):
    _, kwargs, per_sample = CASES[case]
    sigma = PER_SAMPLE["sigma"][i] if "sigma" in per_sample else kwargs.get("sigma", 0.0)
    window = PER_SAMPLE["window_size"][i] if "window_size" in per_sample else kwargs.get("window_size", 0)
    return sigma, window, kwargs.get("dtype")


def differences(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    return np.abs(a.astype(np.float64) - b.astype(np.float64))


@pytest.mark.parametrize("case", list(CASES))
def test_against_reference(case):
    name = CASES[case][0]
    for i, got in enumerate(run(torchdali, case)):
        sigma, window, dtype = sample_args(case, i)
        expected = reference(INPUTS[name][i], LAYOUTS.get(name, name), sigma, window, dtype)
        diff = differences(got, expected)
        if got.dtype == np.uint8:  # rounding: a value 0.5 away may go either way (one pixel of a tiny image)
            assert diff.max() <= 1 and (diff.mean() < 0.05 or (diff > 0).sum() <= 1), case
        else:
            rtol = 2e-3 if got.dtype == np.float16 else 1e-6
            assert diff.max() <= rtol * max(1.0, np.abs(expected).max()), case


@pytest.mark.parametrize("case", list(CASES))
def test_against_dali(case):
    dali_or_skip()
    import nvidia.dali as nvidia_dali
    import nvidia.dali.fn  # noqa: F401
    ours, theirs = run(torchdali, case), run(nvidia_dali, case)
    diff = np.concatenate([differences(a, b).ravel() for a, b in zip(ours, theirs)])
    if ours[0].dtype == np.uint8:
        assert diff.mean() < 1.0 and diff.max() <= 1, case
    else:
        scale = max(1.0, max(np.abs(b.astype(np.float64)).max() for b in theirs))
        assert diff.max() <= (1e-3 if ours[0].dtype == np.float16 else 1e-6) * scale, case


def test_a_huge_sigma_costs_what_the_image_does():
    """sigma 1e7 (a window of 60,000,001 taps) blurs to the images' reflect-101 mean at once,
    as sigma 1e3 does by the full-window reference."""
    (got,) = [as_numpy_batch(_run_one(HWC[:1], sigma=1e7)[0])]
    assert differences(got[0], reference(HWC[0], "HWC", 1e3, 0)).max() <= 1


def test_window_rules_and_weights():
    assert window_sizes_for([0.1, 1.0, 1.5, 2.0]).tolist() == [3, 7, 11, 13]
    np.testing.assert_allclose(sigmas_for([1, 5]), [0.5, 1.1], rtol=1e-6)
    pairs = [(1.5, 11), (0.3, 1), (2.0, 3), (4.1, 25), (1.5, 11)]
    w = gaussian_windows([p[0] for p in pairs], [p[1] for p in pairs])
    assert w.dtype == np.float32 and len(w) == sum(size for _, size in pairs)
    start = 0
    for sigma, size in pairs:  # each window as DALI computes one alone: float32, summed in order
        one = w[start:start + size]
        start += size
        assert one.sum() == pytest.approx(1.0, abs=1e-6)
        np.testing.assert_allclose(one, reference_window(sigma, size), rtol=1e-5)
        np.testing.assert_array_equal(one, _dali_window(sigma, size))


def _dali_window(sigma, size):
    """DALI's float32 arithmetic for one window, step by step."""
    r = (size - 1) // 2
    sigma = np.float32(sigma)
    exp_scale = np.float32(0.5) / (sigma * sigma)
    x = np.arange(-r, 0, dtype=np.float32)
    half = np.exp(-(x * x * exp_scale).astype(np.float64)).astype(np.float32)
    total = np.float32(0)
    for v in half:
        total = np.float32(total + v)
    scale = np.float32(1) / np.float32(total * np.float32(2) + np.float32(1))
    return np.concatenate([half * scale, [scale], (half * scale)[::-1]]).astype(np.float32)


def test_ops_class_names():
    assert torchdali.ops.GaussianBlur is not None


def _run_one(images, layout="HWC", **kwargs):
    @torchdali.pipeline_def(batch_size=len(images), num_threads=1, device_id=None)
    def pipe():
        x = fn.external_source(_source(images), layout=layout)
        return fn.gaussian_blur(x, **kwargs)

    p = pipe()
    p.build()
    return p.run()


IMG = [np.zeros((5, 6, 3), np.uint8)]


@pytest.mark.parametrize("kwargs, match", [
    (dict(sigma=-1.0), "gaussian_blur: argument 'sigma' = \\[-1.0\\]: must be >= 0"),
    (dict(sigma=float("nan")), "argument 'sigma' = \\[nan\\]: must be >= 0"),
    (dict(sigma=float("inf")), "argument 'sigma' = \\[inf\\]: must be >= 0 and finite"),
    (dict(window_size=4), "argument 'window_size' = \\[4\\]: must be odd"),
    (dict(window_size=-3), "argument 'window_size' = \\[-3\\]: must be odd"),
    (dict(dtype=types.FLOAT64), None),
])
def test_bad_constant_arguments(kwargs, match):
    if match is None:  # a type the operator cannot produce: checked when the batch's type is known
        with pytest.raises(ValueError, match="gaussian_blur.*'dtype'.*input's .* or FLOAT"):
            _run_one(IMG, **kwargs)
        return
    with pytest.raises(ValueError, match=match):
        fn.gaussian_blur(fn.external_source(_source(IMG)), **kwargs)


@pytest.mark.parametrize("images, layout, kwargs, cls, match", [
    (IMG, "HWC", {}, ValueError, "gaussian_blur.*sample 0, axis 0: give sigma or window_size"),
    (IMG, "HWC", dict(sigma=[1.0, 2.0, 3.0]), ValueError, "'sigma' = \\[1.0, 2.0, 3.0\\] must have 1 or 2"),
    (IMG, "HCW", dict(sigma=1.0), ValueError, "only channel-first or channel-last"),
    ([np.zeros((2, 2, 3, 4, 5, 1), np.uint8)], "FXDHWC", dict(sigma=1.0), ValueError, "4 data axes"),
    ([np.zeros((2, 3, 4, 5), np.uint8)], "", dict(sigma=1.0), ValueError, "without a layout"),
    ([np.zeros((5, 6, 3), np.int32)], "HWC", dict(sigma=1.0), TypeError, "input type torch.int32"),
])
def test_bad_inputs(images, layout, kwargs, cls, match):
    with pytest.raises(cls, match=match):
        _run_one(images, layout or None, **kwargs)


def test_bad_per_sample_argument():
    @torchdali.pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        sigma = fn.external_source(_source([np.float32(-2.0)]))
        return fn.gaussian_blur(fn.external_source(_source(IMG), layout="HWC"), sigma=sigma)

    p = pipe()
    p.build()
    with pytest.raises(ValueError, match=r"gaussian_blur \(.*\): argument input 'sigma' sample 0.*must be >= 0"):
        p.run()


@requires_cuda
@pytest.mark.parametrize("case", list(CASES))
def test_gpu_matches_cpu(case):
    for a, b in zip(run(torchdali, case), run(torchdali, case, device="gpu")):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
