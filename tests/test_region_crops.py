"""roi_random_crop (windows that hold the region of interest, or lie in it, and stay in the
data; every allowed anchor drawn; ranges and means as DALI's) and random_crop_generator
(windows in the image with the asked area and aspect ratio; statistics as DALI's), exact
where DALI's result is decided; types as DALI's (skipped without it); bad arguments named."""
import numpy as np
import pytest

import torchdali

from conftest import assert_batches_equal, dali_or_skip


def feed(lib, values):
    return lib.fn.external_source(source=lambda: values, batch=True)


def anchors(lib, batch_size=3, iterations=1, data=None, arg_inputs=None, seed=2, **kwargs):
    """[iterations, batch, ndim] anchors of roi_random_crop; `arg_inputs`: per-sample values."""
    @lib.pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, seed=seed)
    def pipe():
        named = {k: feed(lib, v) for k, v in (arg_inputs or {}).items()}
        inputs = [] if data is None else [feed(lib, data)]
        return lib.fn.roi_random_crop(*inputs, **kwargs, **named)

    p = pipe()
    p.build()
    out = []
    for _ in range(iterations):
        (a,) = p.run()
        out.append(np.stack([np.array(a[i]) for i in range(batch_size)]))
    return np.stack(out)


def per_sample(*rows):
    return [np.array(r, np.int32) for r in rows]


# Sample 0: a window larger than the region in both dims; 1: smaller in both; 2: larger in
# one, smaller in the other; 3: as large as the region.
CROP = per_sample([20, 30], [5, 4], [12, 3], [6, 7])
START = per_sample([10, 40], [3, 8], [0, 25], [9, 2])
END = per_sample([18, 52], [20, 30], [6, 33], [15, 9])
IN_SHAPE = per_sample([40, 60], [25, 40], [20, 33], [30, 30])


def check_windows(a, crop, start, end, shape=None):
    """The windows `a` [iterations, n, ndim] hold the region where it fits, else lie in it,
    and lie in `shape` where given."""
    crop, start, end = (np.stack(v)[None] for v in (crop, start, end))
    fits = crop >= end - start
    assert np.where(fits, (a <= start) & (a + crop >= end), (a >= start) & (a + crop <= end)).all()
    if shape is not None:
        assert ((a >= 0) & (a + crop <= np.stack(shape)[None])).all()


@pytest.mark.parametrize("bounded", [False, True])
def test_roi_random_crop_windows_hold_the_region_and_every_anchor_comes(bounded):
    extra = {"in_shape": IN_SHAPE} if bounded else {}
    a = anchors(torchdali, 4, 300, arg_inputs=dict(crop_shape=CROP, roi_start=START, roi_end=END, **extra))
    assert a.dtype == np.int64 and a.shape == (300, 4, 2)
    check_windows(a, CROP, START, END, IN_SHAPE if bounded else None)
    for i in range(4):
        for d in range(2):
            lo, hi = sorted([START[i][d], END[i][d] - CROP[i][d]])
            if bounded:
                lo, hi = max(lo, 0), min(hi, IN_SHAPE[i][d] - CROP[i][d])
            values, counts = np.unique(a[:, i, d], return_counts=True)
            np.testing.assert_array_equal(values, np.arange(lo, hi + 1))  # every anchor, uniformly
            assert counts.min() > 300 / len(values) / 3


def test_roi_random_crop_follows_dali():
    """DALI's ranges of anchors, its means, and its anchors where there is only one."""
    dali = dali_or_skip()
    for extra in ({}, {"in_shape": IN_SHAPE}):
        args = dict(crop_shape=CROP, roi_start=START, roi_end=END, **extra)
        ours, theirs = anchors(torchdali, 4, 400, arg_inputs=args), anchors(dali, 4, 400, arg_inputs=args)
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        np.testing.assert_array_equal(ours.min(0), theirs.min(0))
        np.testing.assert_array_equal(ours.max(0), theirs.max(0))
        spread = theirs.max(0) - theirs.min(0)
        assert (np.abs(ours.mean(0) - theirs.mean(0)) <= 0.15 * spread + 1e-9).all()
        np.testing.assert_array_equal(ours[:, 3], theirs[:, 3])  # as large as the region: its start


def test_roi_random_crop_with_the_data_as_input_equals_in_shape():
    data = [np.zeros((40, 60, 3), np.uint8), np.zeros((25, 40, 1), np.uint8), np.zeros((20, 33, 3), np.uint8)]
    args = dict(crop_shape=CROP[:3], roi_start=START[:3], roi_shape=[e - s for s, e in zip(START, END)][:3])
    a = anchors(torchdali, 3, 100, data=data, arg_inputs=args)
    b = anchors(torchdali, 3, 100, arg_inputs=dict(args, in_shape=IN_SHAPE[:3]))
    np.testing.assert_array_equal(a, b)  # the same draws: roi_shape, and the input's first dims
    check_windows(a, CROP[:3], START[:3], END[:3], IN_SHAPE[:3])


def test_roi_random_crop_constants_broadcast_and_match_dali_types():
    dali = dali_or_skip()
    kwargs = dict(crop_shape=[4, 4, 4], roi_start=2, roi_shape=[4, 4, 4], in_shape=[10, 10, 10])
    ours, theirs = anchors(torchdali, 2, **kwargs), anchors(dali, 2, **kwargs)
    assert_batches_equal(list(ours[0]), list(theirs[0]))  # one place only: the region's start
    np.testing.assert_array_equal(ours[0], [[2, 2, 2]] * 2)


@pytest.mark.parametrize("kwargs,data,match", [
    (dict(crop_shape=[4, 4], roi_start=[0, 0]), None, r"give the region's end as `roi_end` or `roi_shape`"),
    (dict(crop_shape=[4, 4], roi_start=[0, 0], roi_end=[2, 2], roi_shape=[2, 2]), None, r"one of them"),
    (dict(crop_shape=[4, 4], roi_start=[0, 0], roi_end=[2, 2], in_shape=[9, 9]), [np.zeros((9, 9))] * 3,
     r"`in_shape` cannot be given with an input"),
    (dict(crop_shape=[4, 4], roi_start=[0, 0, 0], roi_end=[2, 2]), None,
     r"'roi_start' has 3 values; `crop_shape` has 2"),
    (dict(crop_shape=[4, 12], roi_start=[0, 0], roi_end=[2, 2], in_shape=[9, 9]), None,
     r"sample 0, dim 1: `crop_shape` must fit in the shape"),
    (dict(crop_shape=[4, 4], roi_start=[0, 5], roi_end=[2, 10], in_shape=[9, 9]), None,
     r"sample 0, dim 1: the region of interest must lie in the shape"),
    (dict(crop_shape=[4, -1], roi_start=[0, 0], roi_end=[2, 2], in_shape=[9, 9]), None,
     r"sample 0, dim 1: `crop_shape` must not be negative"),
    (dict(crop_shape=[4, 4], roi_start=[0, 0], roi_end=[2, 2]), [np.zeros(9)] * 3, r"the input has 1 dims"),
])
def test_roi_random_crop_bad_arguments_are_named(kwargs, data, match):
    with pytest.raises(ValueError, match=r"roi_random_crop.*" + match):
        anchors(torchdali, data=data, **kwargs)


# --- random_crop_generator ----------------------------------------------------------------

def windows(lib, shapes, iterations=1, **kwargs):
    """(anchors, shapes) [iterations, N, 2] of random_crop_generator over `shapes`."""
    @lib.pipeline_def(batch_size=len(shapes), num_threads=1, device_id=None, seed=6)
    def pipe():
        return tuple(lib.fn.random_crop_generator(feed(lib, shapes), **kwargs))

    p = pipe()
    p.build()
    out = [[np.stack([np.array(o[i]) for i in range(len(shapes))]) for o in p.run()] for _ in range(iterations)]
    return np.stack([o[0] for o in out]), np.stack([o[1] for o in out])


SHAPES = [np.array(s, np.int64) for s in ([100, 200, 3], [480, 640, 3], [37, 23, 1], [300, 300])]


def test_random_crop_generator_windows_lie_in_the_image_with_the_asked_area_and_ratio():
    anchor, shape = windows(torchdali, SHAPES[:3], 100, random_area=[0.2, 0.6], random_aspect_ratio=[0.5, 2.0])
    assert anchor.dtype == shape.dtype == np.int32 and anchor.shape == shape.shape == (100, 3, 2)
    hw = np.stack([s[:2] for s in SHAPES[:3]])[None]
    assert ((anchor >= 0) & (shape >= 1) & (anchor + shape <= hw)).all()
    area = shape.prod(-1) / hw.prod(-1)
    ratio = shape[..., 1] / shape[..., 0]
    small = hw.prod(-1) < 1000  # where rounding to whole pixels moves the area and ratio most
    assert (area > 0.2 - np.where(small, 0.05, 0.01)).all() and (area < 0.6 + np.where(small, 0.05, 0.01)).all()
    assert (ratio > 0.5 * np.where(small, 0.85, 0.97)).all() and (ratio < 2.0 / np.where(small, 0.85, 0.97)).all()


def test_random_crop_generator_statistics_follow_dali():
    dali = dali_or_skip()
    shapes = [SHAPES[0]] * 16
    stats = []
    for lib in (torchdali, dali):
        anchor, shape = windows(lib, shapes, 25)
        area = shape.prod(-1) / 20000
        place = anchor / (SHAPES[0][:2] - shape + 1)  # where in the room left the window lies
        stats.append((area.mean(), np.log(shape[..., 1] / shape[..., 0]).mean(), place.mean()))
    (a0, r0, p0), (a1, r1, p1) = stats
    assert abs(a0 - a1) < 0.05 and abs(r0 - r1) < 0.05 and abs(p0 - p1) < 0.05


def test_random_crop_generator_equals_dali_where_decided():
    """A fixed area and ratio decide the shape; an empty image gives an empty window."""
    dali = dali_or_skip()
    shapes = [np.array(s, np.int32) for s in ([100, 100], [0, 50], [64, 64, 3], [-3, 10])]
    kwargs = dict(random_area=[0.5, 0.5], random_aspect_ratio=[1.0, 1.0])
    ours, theirs = windows(torchdali, shapes, **kwargs), windows(dali, shapes, **kwargs)
    assert_batches_equal(list(ours[1][0]), list(theirs[1][0]))
    np.testing.assert_array_equal(ours[1][0], [[71, 71], [0, 0], [45, 45], [0, 0]])
    np.testing.assert_array_equal(ours[0][0][[1, 3]], theirs[0][0][[1, 3]])


@pytest.mark.parametrize("shapes,kwargs,match", [
    ([np.array([10.0, 20.0], np.float32)], {}, r"sample 0 is \(2,\) torch.float32; expected the image's shape"),
    ([np.array([10, 20, 3, 1])], {}, r"sample 0 is \(4,\)"),
    ([np.array([[10, 20]])], {}, r"sample 0 is \(1, 2\)"),
    ([np.array([10, 20])], dict(random_area=[0.5, 0.4]), r"argument 'random_area'"),
    ([np.array([10, 20])], dict(num_attempts=0), r"argument 'num_attempts'"),
])
def test_random_crop_generator_bad_arguments_are_named(shapes, kwargs, match):
    with pytest.raises(ValueError, match=r"random_crop_generator.*" + match):
        windows(torchdali, shapes, **kwargs)
