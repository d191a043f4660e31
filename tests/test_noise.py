"""noise.gaussian, noise.salt_and_pepper and noise.shot against DALI 2.4 on the CPU. The random
numbers cannot be DALI's: statistics are compared (with tolerances of several standard errors
of the estimates), and results are exact where the noise is not random (stddev 0, prob 0 or 1,
factor 0), as are types, shapes, layouts, saturation and the salt and pepper values."""
import numpy as np
import pytest

import torchdali
from conftest import assert_batches_equal, as_numpy_batch, constant_source, dali_or_skip, requires_cuda


def run_noise(lib, op, images, layout="HWC", device="cpu", arg_inputs=None, seed=1, iterations=1, **kwargs):
    """Outputs (NumPy arrays) of `lib.fn.noise.<op>` after `iterations` runs, and the layout."""
    images = [np.ascontiguousarray(im) for im in images]

    @lib.pipeline_def(batch_size=len(images), num_threads=2, device_id=None if device == "cpu" else 0, seed=seed)
    def pipe():
        x = lib.fn.external_source(constant_source(images), layout=layout)
        x = x.gpu() if device == "gpu" else x
        named = {name: lib.fn.external_source(constant_source(v)) for name, v in (arg_inputs or {}).items()}
        return getattr(lib.fn.noise, op)(x, **kwargs, **named)

    p = pipe()
    p.build()
    for _ in range(iterations):
        out = p.run()[0]
    return as_numpy_batch(out), out.layout()


def both(op, images, **kwargs):
    """(ours, DALI's) outputs; same number of samples, shapes, types and layout."""
    dali = dali_or_skip()
    ours, our_layout = run_noise(torchdali, op, images, **kwargs)
    theirs, their_layout = run_noise(dali, op, images, **kwargs)
    assert our_layout == their_layout
    assert [(o.shape, o.dtype) for o in ours] == [(t.shape, t.dtype) for t in theirs]
    return ours, theirs


def exact(op, images, **kwargs):
    ours, theirs = both(op, images, **kwargs)
    assert_batches_equal(ours, theirs)
    return ours


def close(ours, theirs, tol):
    assert abs(ours - theirs) <= tol, (ours, theirs, tol)


def refused(op, images, match, dali_too=True, **kwargs):
    if dali_too:
        dali = dali_or_skip()
        with pytest.raises(Exception):
            run_noise(dali, op, images, **kwargs)
    with pytest.raises((ValueError, TypeError), match=match) as info:
        run_noise(torchdali, op, images, **kwargs)
    assert f"noise.{op}" in str(info.value)


def flat_image(value, dtype, shape=(120, 150, 3)):
    return np.full(shape, value, dtype)


ALL_TYPES = [np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64, np.float32]


# --- gaussian ---

@pytest.mark.parametrize("dtype,mean,stddev,value", [
    (np.uint8, 0.0, 10.0, 100), (np.uint8, 3.5, 25.0, 128), (np.int16, -20.0, 300.0, 500),
    (np.int32, 0.0, 1000.0, -40), (np.float32, 1.5, 0.25, 0.5), (np.uint64, 0.0, 40.0, 1000),
])
def test_gaussian_statistics(dtype, mean, stddev, value):
    ours, theirs = both("gaussian", [flat_image(value, dtype)] * 2, mean=mean, stddev=stddev)
    n = ours[0].size
    for o, t in zip(ours, theirs):
        d_o, d_t = o.astype(np.float64) - value, t.astype(np.float64) - value
        close(d_o.mean(), d_t.mean(), 8 * stddev / np.sqrt(n) + 0.01)
        close(d_o.std(), d_t.std(), 8 * stddev / np.sqrt(2 * n) + 0.01)
    assert not np.array_equal(ours[0], ours[1])  # each sample its own noise


@pytest.mark.parametrize("dtype,value,stddev", [(np.uint8, 245, 20.0), (np.int8, -120, 15.0), (np.uint16, 10, 30.0)])
def test_gaussian_saturates_as_dali(dtype, value, stddev):
    """Integer results are clamped to the type: the fraction at the limit matches DALI's."""
    ours, theirs = both("gaussian", [flat_image(value, dtype)], stddev=stddev)
    info = np.iinfo(dtype)
    for limit in (info.min, info.max):
        close((ours[0] == limit).mean(), (theirs[0] == limit).mean(), 0.01)
    assert ours[0].min() >= info.min and ours[0].max() <= info.max


@pytest.mark.parametrize("dtype", ALL_TYPES)
@pytest.mark.parametrize("mean", [0.5, -0.5, 1.5, -2.5, 0.49999997, 1e10, -1e10, float("nan")])
def test_gaussian_without_noise_is_exact(dtype, mean):
    """stddev 0: in + mean, rounded half away from zero and saturated (NaN to 0), as DALI."""
    g = np.random.default_rng(3)
    info = np.iinfo(dtype) if np.dtype(dtype).kind != "f" else None
    lo, hi = (-1e6, 1e6) if info is None else (max(info.min, -1000), min(info.max, 1000))
    ims = [g.uniform(lo, hi, s).astype(dtype) for s in ((7, 9, 3), (5, 4, 3))]
    if info is not None:
        ims.append(np.array([info.min, info.max, 0, 1, info.max - 1], dtype))
        ims[-1] = np.resize(ims[-1], (5, 4, 3))
    exact("gaussian", ims, mean=mean, stddev=0.0)


def test_gaussian_per_sample_arguments():
    ims = [flat_image(100, np.float32, (60, 70, 3))] * 3
    means, stddevs = [np.float32(m) for m in (0, 50, -20)], [np.float32(s) for s in (1, 10, 0)]
    ours, theirs = both("gaussian", ims, arg_inputs={"mean": means, "stddev": stddevs})
    for o, t, m, s in zip(ours, theirs, means, stddevs):
        close(o.mean(), t.mean(), 8 * s / np.sqrt(o.size) + 1e-3)
        close(o.std(), t.std(), 8 * s / np.sqrt(o.size) + 1e-3)
        close(o.mean(), 100 + m, 8 * s / np.sqrt(o.size) + 1e-3)
    np.testing.assert_array_equal(ours[2], theirs[2])  # stddev 0: exact


def test_gaussian_edge_samples():
    ims = [np.zeros((0, 5, 3), np.uint8), np.full((1, 1, 1), 7, np.uint8), np.zeros((4, 0, 3), np.uint8)]
    exact("gaussian", ims, mean=1.5, stddev=0.0)
    exact("gaussian", [np.array(5, np.uint8), np.array(250, np.uint8)], layout="", mean=7.5, stddev=0.0)
    exact("gaussian", [np.arange(10, dtype=np.int16).reshape(2, 5)] * 2, layout="", mean=-3.0, stddev=0.0)


@pytest.mark.parametrize("op,kwargs", [("gaussian", {}), ("shot", {}), ("salt_and_pepper", {})])
@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.bool_])
def test_unsupported_types(op, kwargs, dtype):
    refused(op, [np.zeros((4, 5, 3), dtype)], "is not supported; give one of UINT8", **kwargs)


# --- shot ---

@pytest.mark.parametrize("dtype,value,factor", [
    (np.uint8, 100, 20.0), (np.uint8, 100, None), (np.int16, 3000, 50.0), (np.float32, 37.0, 0.5),
    (np.int32, 5000, 3.0), (np.float32, 4.0, 0.01),
])
def test_shot_statistics(dtype, value, factor):
    """Mean in, variance factor * in, values multiples of factor; DALI's effective default is 12."""
    kwargs = {} if factor is None else {"factor": factor}
    ours, theirs = both("shot", [flat_image(value, dtype)], **kwargs)
    o, t = ours[0].astype(np.float64), theirs[0].astype(np.float64)
    f = 12.0 if factor is None else factor
    var = f * value
    close(o.mean(), t.mean(), 8 * np.sqrt(var / o.size) + 1e-3)
    close(o.var(), t.var(), 0.05 * var + 1e-3)
    close(o.var(), var, 0.05 * var + 1e-3)
    if np.dtype(dtype).kind != "f" or f >= 0.5:
        inside = o[o < np.iinfo(dtype).max] if np.dtype(dtype).kind != "f" else o  # not saturated
        np.testing.assert_allclose(inside / f, np.round(inside / f), atol=1e-4)  # whole numbers of events


def test_shot_saturates():
    ours, theirs = both("shot", [flat_image(250, np.uint8)], factor=30.0)
    close((ours[0] == 255).mean(), (theirs[0] == 255).mean(), 0.02)


@pytest.mark.parametrize("dtype", ALL_TYPES)
def test_shot_without_noise_is_exact(dtype):
    """factor 0 gives zeros (DALI 2.4's result, though documented as the identity); a negative
    factor on non-negative values, or an infinite one, gives 0 events."""
    ims = [np.random.default_rng(1).integers(0, 100, (7, 9, 3)).astype(dtype), np.zeros((2, 3, 3), dtype)]
    assert not exact("shot", ims, factor=0.0)[0].any()
    exact("shot", ims, factor=-3.0)
    exact("shot", ims, factor=float("inf"))  # 0 events times infinity: NaN, converted as DALI does


def test_shot_float_negative_and_nan_inputs():
    """max(0, in / factor) is the expected count: negative and NaN inputs give 0."""
    im = np.array([[[-5.0, np.nan, -0.5]]], np.float32)
    assert not exact("shot", [im], factor=2.0)[0].any()


def test_shot_per_sample_factor():
    ims = [flat_image(200, np.float32, (80, 90, 3))] * 3
    factors = [np.float32(f) for f in (1.0, 10.0, 0.0)]
    ours, theirs = both("shot", ims, arg_inputs={"factor": factors})
    for o, t, f in zip(ours[:2], theirs[:2], factors):
        close(o.var(), t.var(), 0.05 * f * 200)
    np.testing.assert_array_equal(ours[2], theirs[2])


# --- salt and pepper ---

def fractions(out, src, salt, pepper):
    return np.array([(out == salt).mean(), (out == pepper).mean(), (out == src).mean()])


@pytest.mark.parametrize("dtype,kwargs,salt,pepper", [
    (np.uint8, {}, 255, 0),
    (np.uint8, dict(prob=0.3, salt_vs_pepper=0.2), 255, 0),
    (np.float32, dict(prob=0.3), 1.0, -1.0),
    (np.int8, dict(prob=0.3), 127, -128),
    (np.int64, dict(prob=0.2), np.iinfo(np.int64).max, np.iinfo(np.int64).min),
    (np.uint8, dict(prob=0.3, salt_val=300, pepper_val=-5), 44, 251),  # C++ casts, as DALI
    (np.uint8, dict(prob=0.3, salt_val=2.7, pepper_val=-2.7), 2, 254),
    (np.uint32, dict(prob=0.3, salt_val=-3, pepper_val=1e10), 2 ** 32 - 3, 1410065408),
    (np.uint64, dict(prob=0.3, salt_val=1e19, pepper_val=7), 9999999980506447872, 7),
    (np.float32, dict(prob=0.4, salt_val=1e10, pepper_val=-0.25), 1e10, -0.25),
])
def test_salt_and_pepper_fractions_and_values(dtype, kwargs, salt, pepper):
    src = np.random.default_rng(2).integers(1, 120, (100, 120, 3)).astype(dtype)
    ours, theirs = both("salt_and_pepper", [src], **kwargs)
    close_all = np.abs(fractions(ours[0], src, salt, pepper) - fractions(theirs[0], src, salt, pepper))
    assert (close_all < 0.01).all(), close_all
    prob, svp = kwargs.get("prob", 0.05), kwargs.get("salt_vs_pepper", 0.5)
    assert abs((ours[0] == salt).mean() - prob * svp) < 0.01
    assert set(np.unique(ours[0])) - set(np.unique(src)) <= {dtype(salt), dtype(pepper)}
    assert set(np.unique(theirs[0])) - set(np.unique(src)) <= {dtype(salt), dtype(pepper)}


@pytest.mark.parametrize("layout,per_channel", [("HWC", False), ("HWC", True), ("CHW", False), ("", False),
                                                ("HWX", True), ("HW", True)])
def test_salt_and_pepper_channels(layout, per_channel):
    """Without per_channel a pixel's channels are all kept, all salt or all pepper."""
    shape = {"CHW": (3, 90, 100), "HW": (90, 100)}.get(layout, (90, 100, 3))
    src = np.random.default_rng(4).integers(1, 250, shape).astype(np.uint8)
    ours, theirs = both("salt_and_pepper", [src], layout=layout, prob=0.4, per_channel=per_channel)
    if len(shape) == 2:
        close((ours[0] != src).mean(), (theirs[0] != src).mean(), 0.02)
        return
    axis = 0 if layout == "CHW" else -1
    for out in (ours[0], theirs[0]):
        salt_pixels = (out == 255).all(axis).mean()
        some_salt = (out == 255).any(axis).mean()
        if per_channel:
            assert some_salt - salt_pixels > 0.1
        else:
            assert salt_pixels == some_salt and abs(salt_pixels - 0.2) < 0.02


@pytest.mark.parametrize("dtype", ALL_TYPES)
@pytest.mark.parametrize("kwargs", [dict(prob=0.0), dict(prob=1.0, salt_vs_pepper=1.0),
                                    dict(prob=1.0, salt_vs_pepper=0.0),
                                    dict(prob=1.0, salt_vs_pepper=0.0, pepper_val=-7.5, per_channel=True)])
def test_salt_and_pepper_without_chance_is_exact(dtype, kwargs):
    src = [np.random.default_rng(5).integers(1, 100, (6, 7, 3)).astype(dtype), np.ones((1, 2, 3), dtype)]
    exact("salt_and_pepper", src, **kwargs)


def test_salt_and_pepper_per_sample_arguments():
    src = [np.full((60, 60, 3), 9, np.uint8)] * 3
    probs = [np.float32(p) for p in (0.0, 0.5, 1.0)]
    salts = [np.float32(s) for s in (200, 300, 100)]
    ours, theirs = both("salt_and_pepper", src, arg_inputs={"prob": probs, "salt_val": salts},
                        salt_vs_pepper=1.0)
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_array_equal(ours[2], theirs[2])
    close((ours[1] == 44).mean(), (theirs[1] == 44).mean(), 0.03)


def test_salt_and_pepper_ragged_and_edge_samples():
    src = [np.zeros((0, 5, 3), np.uint8), np.full((3, 4, 3), 9, np.uint8), np.full((9, 2, 1), 9, np.uint8)]
    exact("salt_and_pepper", src, prob=1.0, salt_vs_pepper=1.0)
    exact("salt_and_pepper", [np.array(3, np.uint8)], layout="", prob=1.0, salt_vs_pepper=0.0)


@pytest.mark.parametrize("kwargs,layout,match", [
    (dict(prob=1.5), "HWC", "'prob' = 1.5: must be in"),
    (dict(prob=-0.1), "HWC", "'prob' = -0.1: must be in"),
    (dict(salt_vs_pepper=-0.1), "HWC", "'salt_vs_pepper' = -0.1: must be in"),
    (dict(prob=0.2), "HCW", "'C' must be its first or last axis"),
    (dict(prob=0.2), "HWX", "'C' must be its first or last axis"),
])
def test_salt_and_pepper_errors(kwargs, layout, match):
    refused("salt_and_pepper", [np.zeros((4, 5, 3), np.uint8)], match, layout=layout, **kwargs)


def test_salt_and_pepper_per_sample_probability_checked():
    probs = [np.float32(p) for p in (0.5, 2.0)]
    refused("salt_and_pepper", [np.zeros((4, 5, 3), np.uint8)] * 2, "sample 1 = 2.0: must be in",
            arg_inputs={"prob": probs})


# --- determinism ---

@pytest.mark.parametrize("op,kwargs", [("gaussian", dict(stddev=5.0)), ("shot", dict(factor=4.0)),
                                       ("salt_and_pepper", dict(prob=0.3))])
def test_seeded_and_varying(op, kwargs):
    """A seed repeats the noise; iterations and seeds differ."""
    ims = [flat_image(100, np.uint8, (20, 30, 3)), flat_image(50, np.uint8, (11, 7, 3))]
    first, _ = run_noise(torchdali, op, ims, seed=3, **kwargs)
    again, _ = run_noise(torchdali, op, ims, seed=3, **kwargs)
    other, _ = run_noise(torchdali, op, ims, seed=4, **kwargs)
    later, _ = run_noise(torchdali, op, ims, seed=3, iterations=2, **kwargs)
    assert_batches_equal(first, again)
    assert not np.array_equal(first[0], other[0])
    assert not np.array_equal(first[0], later[0])


# --- gpu ---

@requires_cuda
@pytest.mark.parametrize("op,kwargs", [("gaussian", dict(mean=0.5, stddev=7.0)), ("shot", dict(factor=3.0)),
                                       ("salt_and_pepper", dict(prob=0.3, salt_val=300)),
                                       ("salt_and_pepper", dict(prob=0.3, per_channel=True))])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.int64, np.float32])
def test_gpu_matches_cpu(op, kwargs, dtype):
    for sizes in (((9, 11, 3), (9, 11, 3)), ((9, 11, 3), (6, 13, 3))):
        ims = [np.random.default_rng(6).integers(0, 200, s).astype(dtype) for s in sizes]
        cpu, _ = run_noise(torchdali, op, ims, **kwargs)
        gpu, _ = run_noise(torchdali, op, ims, device="gpu", **kwargs)
        assert_batches_equal(gpu, cpu)
