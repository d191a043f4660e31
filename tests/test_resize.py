"""fn.resize and fn.random_resized_crop in a pipeline: output sizes and pixels against NVIDIA
DALI on the same images."""
import numpy as np
import pytest

import torchdali
from torchdali import fn, types

from conftest import as_numpy_batch, assert_one_buffer, dali_or_skip, requires_cuda

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(0)
SHAPES = ((17, 23), (31, 5), (1, 1), (40, 64), (9, 100), (64, 48), (333, 500), (7, 7))
IMAGES = [RNG.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in SHAPES]

SIZE_CASES = {
    "size": dict(size=(13, 37)),
    "size_up": dict(size=(70, 91)),
    "size_one_zero": dict(size=(0, 30)),
    "resize_x": dict(resize_x=19),
    "resize_y": dict(resize_y=21.5),
    "resize_xy": dict(resize_x=15, resize_y=44),
    "shorter": dict(resize_shorter=24),
    "shorter_max": dict(resize_shorter=30, max_size=45),
    "longer": dict(resize_longer=33),
    "not_larger": dict(size=(20, 40), mode="not_larger"),
    "not_smaller": dict(size=(20, 40), mode="not_smaller", max_size=[50, 70]),
    "stretch": dict(resize_x=25, mode="stretch"),
    "default_max": dict(size=(0, 60), max_size=[40, 60]),
    "no_subpixel": dict(resize_shorter=17, subpixel_scale=False),
    "roi_relative": dict(size=(11, 13), roi_start=(0.1, 0.25), roi_end=(0.7, 0.95), roi_relative=True),
    "roi_relative_flip": dict(size=(10, 12), roi_start=(0.9, 0.1), roi_end=(0.2, 0.8), roi_relative=True),
    "flip_negative": dict(resize_x=-12, resize_y=9),
}
FILTERS = {
    "linear_aa": dict(interp_type=types.INTERP_LINEAR),
    "linear": dict(interp_type=types.INTERP_LINEAR, antialias=False),
    "nn": dict(interp_type=types.INTERP_NN),
    "triangular": dict(interp_type=types.INTERP_TRIANGULAR),
    "cubic_aa": dict(interp_type=types.INTERP_CUBIC),
    "cubic": dict(interp_type=types.INTERP_CUBIC, antialias=False),
    "lanczos_aa": dict(interp_type=types.INTERP_LANCZOS3),
    "lanczos": dict(interp_type=types.INTERP_LANCZOS3, antialias=False),
    "min_mag": dict(min_filter=types.INTERP_NN, mag_filter=types.INTERP_CUBIC),
}


def run(lib, kwargs, images=IMAGES, op="resize", layout="HWC", batch=False):
    """`op`'s outputs as NumPy arrays (or, with `batch`, the TensorList)."""
    if layout == "CHW":
        images = [np.ascontiguousarray(im.transpose(2, 0, 1)) for im in images]

    @lib.pipeline_def(batch_size=len(images), num_threads=2, device_id=None, seed=1)
    def pipe():
        x = lib.fn.external_source(lambda: images, layout=layout)
        return getattr(lib.fn, op)(x, **kwargs)

    p = pipe()
    p.build()
    out = p.run()[0]
    return out if batch else as_numpy_batch(out)


def compare(kwargs, images=IMAGES, tol=1.0, op="resize"):
    dali = dali_or_skip()
    ref = run(dali, kwargs, images, op)
    got = run(torchdali, kwargs, images, op)
    for i, (r, g) in enumerate(zip(ref, got)):
        assert g.shape == r.shape, (i, images[i].shape, kwargs)
        assert g.dtype == r.dtype
        mad = np.abs(g.astype(np.float64) - r.astype(np.float64)).mean()
        assert mad < tol, (i, mad, kwargs)


@pytest.mark.parametrize("case", list(SIZE_CASES))
def test_sizes_and_pixels_vs_dali(case):
    compare(SIZE_CASES[case])


@pytest.mark.parametrize("flt", list(FILTERS))
@pytest.mark.parametrize("size", [(13, 37), (70, 91), (5, 200)])
def test_filters_vs_dali(flt, size):
    compare(dict(size=size, **FILTERS[flt]))


def test_output_sizes_many_inputs_vs_dali():
    rng = np.random.default_rng(1)
    images = [np.zeros((int(h), int(w), 1), np.uint8) for h, w in rng.integers(1, 300, (24, 2))]
    for kwargs in (dict(resize_shorter=224), dict(resize_longer=97), dict(resize_x=33.3),
                   dict(size=(0, 51)), dict(size=(128, 128), mode="not_larger"),
                   dict(resize_shorter=100, max_size=150)):
        compare(kwargs, images)


def test_absolute_roi_vs_dali():
    # DALI itself crashes on an absolute ROI outside a 1x1 image: only images that hold it.
    images = [im for im in IMAGES if im.shape[0] >= 9 and im.shape[1] >= 21]
    compare(dict(size=(11, 13), roi_start=(2.5, 3), roi_end=(9, 20.25)), images)
    compare(dict(resize_shorter=20, roi_start=(8.5, 20), roi_end=(1, 3.5)), images)


def test_float_output_and_input_vs_dali():
    compare(dict(size=(13, 29), dtype=types.FLOAT))
    compare(dict(size=(19, 8)), [im.astype(np.float32) for im in IMAGES], tol=1e-2)


def test_per_sample_size_argument():
    sizes = [np.array([5 + i, 7 + 2 * i], np.float32) for i in range(len(IMAGES))]

    @torchdali.pipeline_def(batch_size=len(IMAGES), num_threads=1, device_id=None)
    def pipe():
        x = torchdali.fn.external_source(lambda: IMAGES, layout="HWC")
        s = torchdali.fn.external_source(lambda: sizes)
        return torchdali.fn.resize(x, size=s)

    p = pipe()
    p.build()
    out = as_numpy_batch(p.run()[0])
    assert [o.shape[:2] for o in out] == [(5 + i, 7 + 2 * i) for i in range(len(IMAGES))]


@pytest.mark.parametrize("kwargs", [dict(), dict(size=(3, 3), resize_x=4),
                                    dict(resize_shorter=3, mode="stretch"),
                                    dict(size=(3, 3), roi_start=(0, 0))])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError, match="resize"):
        run(torchdali, kwargs)


def test_random_resized_crop_full_window_vs_dali():
    # random_area=[1, 1] with every aspect ratio in range: the window is the whole image in
    # DALI and here, whatever the random draws, so the pixels must agree.
    images = [im for im in IMAGES if 0.75 <= im.shape[1] / im.shape[0] <= 4 / 3 and im.size > 3]
    for interp in (types.INTERP_LINEAR, types.INTERP_NN, types.INTERP_CUBIC):
        compare(dict(size=(24, 31), random_area=[1.0, 1.0], interp_type=interp), images,
                op="random_resized_crop")


def test_random_resized_crop_windows():
    from torchdali.operators.windows import random_crop_windows

    rng = np.random.default_rng(0)
    for h, w in ((480, 640), (17, 23), (1, 1), (5, 300), (300, 5)):
        hw = np.array([[h, w]] * 200)
        y, x, ch, cw = random_crop_windows(rng, hw, (0.08, 1.0), (0.75, 4 / 3), 10).T
        assert (0 <= y).all() and (y + ch <= h).all() and (0 <= x).all() and (x + cw <= w).all()
        assert (ch >= 1).all() and (cw >= 1).all()
        if (h, w) == (480, 640):
            assert (0.08 * h * w * 0.95 <= ch * cw).all() and (ch * cw <= h * w).all()
            assert (0.74 <= cw / ch).all() and (cw / ch <= 1.34).all()
            assert len(set(zip(y, x, ch, cw))) > 150  # a window of its own for each sample
    # Too wide an image: DALI's early exit takes the full height and the widest allowed width.
    wide = random_crop_windows(rng, np.array([[10, 100]]), (0.5, 1.0), (0.75, 4 / 3), 10)
    assert tuple(wide[0, 2:]) == (10, 13)

    class Upper:  # draws the top of every range: a 4:3 window of the full area never fits
        def uniform(self, a, b, size):
            return np.full(size, b)

        def integers(self, a, b):
            return np.asarray(a) + np.zeros_like(b)

    # No attempt fits: DALI's fallback, the whole image shrunk to the largest allowed area;
    # a sample beside it that fits at once keeps its own window.
    out = random_crop_windows(Upper(), np.array([[10, 10], [30, 40]]), (0.9, 1.0), (0.75, 4 / 3), 3)
    assert tuple(out[0]) == (0, 0, 10, 10)
    assert tuple(out[1]) == (0, 0, 30, 40)  # area 1200 at 4:3 is exactly 30 x 40


def test_random_resized_crop_deterministic_and_shapes():
    def outputs(seed):
        @torchdali.pipeline_def(batch_size=len(IMAGES), num_threads=1, device_id=None, seed=seed)
        def pipe():
            x = torchdali.fn.external_source(lambda: IMAGES, layout="HWC")
            return torchdali.fn.random_resized_crop(x, size=[16, 12])

        p = pipe()
        p.build()
        return [as_numpy_batch(p.run()[0]) for _ in range(2)]

    a, b = outputs(5), outputs(5)
    for x, y in zip(a, b):
        assert all(np.array_equal(u, v) for u, v in zip(x, y))
    assert all(o.shape == (16, 12, 3) and o.dtype == np.uint8 for o in a[0])
    assert not all(np.array_equal(u, v) for u, v in zip(a[0], a[1]))


@pytest.mark.parametrize("kwargs", [dict(size=[0, 3]), dict(size=[4], random_area=[0.5, 0.1]),
                                    dict(size=[4], random_area=[0.1, 0.2, 0.3]),
                                    dict(size=[4], random_aspect_ratio=[2.0, 1.0]),
                                    dict(size=[4], num_attempts=0)])
def test_random_resized_crop_bad_arguments(kwargs):
    with pytest.raises(ValueError, match="random_resized_crop"):
        run(torchdali, kwargs, op="random_resized_crop")


@pytest.mark.parametrize("kwargs, message", [
    (dict(random_aspect_ratio=[0.5, float("inf")]), r"'random_aspect_ratio' = \[0.5, inf\]: must be finite"),
    (dict(random_area=[0.5, float("nan")]), r"'random_area' = \[0.5, nan\]: must be finite"),
    (dict(random_aspect_ratio=[0.0, 2.0]), r"'random_aspect_ratio' = \[0.0, 2.0\]: must be > 0")])
def test_random_resized_crop_ranges_must_be_drawable(kwargs, message):
    """A ratio is drawn on a log scale, a range uniformly: an infinite bound, or a ratio of 0,
    is refused where the graph is defined, not with an OverflowError in the draw."""
    with pytest.raises(ValueError, match="random_resized_crop: argument " + message):
        fn.random_resized_crop(fn.random.uniform(shape=[4, 4, 3]), size=[4], **kwargs)


@pytest.mark.parametrize("kwargs", [dict(random_area=[0.08, 1.25]), dict(random_area=0.5),
                                    dict(random_aspect_ratio=[1.0])])
def test_random_resized_crop_accepts_what_dali_accepts(kwargs):
    # DALI checks only that a range is one value or [min, max] with min <= max; seed 003's
    # HybridTrainPipe builds random_area=[0.08, 1.25].
    images = [im for im in IMAGES if im.size > 3]
    for lib in (dali_or_skip(), torchdali):
        out = run(lib, dict(size=(8, 6), **kwargs), images, op="random_resized_crop")
        assert [o.shape for o in out] == [(8, 6, 3)] * len(images)


def test_bad_mode_and_layout():
    with pytest.raises((ValueError, TypeError), match="mode"):
        run(torchdali, dict(size=(3, 3), mode="bogus"))
    volumes = [np.zeros((2, 3, 4, 1), np.uint8)]  # DHWC and CDHW volumes are resized: tests/test_resize_volumes.py
    with pytest.raises(ValueError, match="resize.*layout 'HWCD' is not supported; give HWC or CHW images, FHWC or "
                                         "FCHW sequences, DHWC or CDHW volumes, or FDHWC or FCDHW sequences of "
                                         "volumes"):
        run(torchdali, dict(size=(3, 3)), volumes, layout="HWCD")


@pytest.mark.parametrize("kwargs", [dict(size=(float("nan"), 4)), dict(resize_shorter=float("nan")),
                                    dict(resize_x=float("inf"))])
def test_non_finite_sizes_are_errors(kwargs):
    with pytest.raises(ValueError, match="resize.*(size|resize_)"):
        run(torchdali, kwargs)


@pytest.mark.parametrize("op, kwargs", [
    ("resize", dict(resize_shorter=21, interp_type=types.INTERP_CUBIC)),
    ("resize", dict(size=(30, 17), roi_start=(0.9, 0.1), roi_end=(0.2, 0.8), roi_relative=True)),
    ("random_resized_crop", dict(size=(24, 20)))])
def test_chw_input_gives_the_hwc_result(op, kwargs):
    hwc = run(torchdali, kwargs, op=op)
    chw = run(torchdali, kwargs, op=op, layout="CHW", batch=True)
    assert chw.layout() == "CHW"
    for h, c in zip(hwc, as_numpy_batch(chw)):
        np.testing.assert_array_equal(c, h.transpose(2, 0, 1))


@pytest.mark.parametrize("op, kwargs", [("resize", dict(size=(13, 21))),
                                        ("random_resized_crop", dict(size=(24, 20)))])
@pytest.mark.parametrize("layout", ["HWC", "CHW"])
def test_one_output_size_is_a_dense_batch(op, kwargs, layout):
    """The kernel writes one [N, ...] tensor: the samples are views of one buffer."""
    assert_one_buffer(run(torchdali, kwargs, op=op, layout=layout, batch=True))


@requires_cuda
@pytest.mark.parametrize("op, kwargs", [("resize", dict(resize_shorter=21, interp_type=types.INTERP_CUBIC)),
                                        ("resize", dict(size=(30, 17), roi_start=(0.9, 0.1), roi_end=(0.2, 0.8),
                                                        roi_relative=True)),
                                        ("random_resized_crop", dict(size=(24, 24)))])
def test_gpu_matches_cpu(op, kwargs):
    def outputs(device):
        @torchdali.pipeline_def(batch_size=len(IMAGES), num_threads=1, device_id=0, seed=3)
        def pipe():
            x = torchdali.fn.external_source(lambda: IMAGES, layout="HWC")
            return getattr(torchdali.fn, op)(x.gpu() if device == "gpu" else x, **kwargs)

        p = pipe()
        p.build()
        return as_numpy_batch(p.run()[0])

    for c, g in zip(outputs("cpu"), outputs("gpu")):
        assert c.shape == g.shape
        assert np.abs(c.astype(float) - g.astype(float)).max() <= 1
