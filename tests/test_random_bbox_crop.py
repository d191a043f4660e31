"""random_bbox_crop: windows within the image and the asked ranges, the chosen threshold
reached, boxes kept by center (or by area) and mapped into the window, labels and indices
following them; fixed windows; outputs typed and shaped as DALI's (skipped without it);
bad inputs named. Its numbers are drawn by our generator, not DALI's."""
import numpy as np
import pytest

import torchdali

from conftest import dali_or_skip

BATCH = 6
RNG = np.random.default_rng(8)


def random_boxes(k):
    lo = RNG.uniform(0, 0.7, (k, 2))
    return np.concatenate([lo, lo + RNG.uniform(0.05, 0.3, (k, 2))], 1).astype(np.float32)


BOXES = [random_boxes(k) for k in (3, 1, 0, 7, 2, 5)]
LABELS = [RNG.integers(0, 90, (len(b), 1)).astype(np.int32) for b in BOXES]


def run(lib, iterations=1, boxes=BOXES, labels=LABELS, **kwargs):
    @lib.pipeline_def(batch_size=len(boxes), num_threads=1, device_id=None, seed=12)
    def pipe():
        b = lib.fn.external_source(source=lambda: boxes, batch=True)
        inputs = [b] if labels is None else [b, lib.fn.external_source(source=lambda: labels, batch=True)]
        return tuple(lib.fn.random_bbox_crop(*inputs, **kwargs))

    p = pipe()
    p.build()
    return [[[np.array(o[i]) for i in range(len(boxes))] for o in p.run()] for _ in range(iterations)]


def iou_part(window, box):
    """The part of `box` inside `window` (both l, t, r, b)."""
    inter = np.clip(np.minimum(window[2:], box[2:]) - np.maximum(window[:2], box[:2]), 0, None).prod()
    return inter / (box[2:] - box[:2]).prod()


def test_windows_reach_the_threshold_and_boxes_follow_them():
    settings = dict(thresholds=[0.5, 0.9], threshold_type="overlap", scaling=[0.3, 1.0], aspect_ratio=[0.5, 2.0],
                    num_attempts=30, allow_no_crop=False, output_bbox_indices=True)
    for anchor, shape, boxes, labels, indices in run(torchdali, iterations=20, **settings):
        for i in range(BATCH):
            a, s = anchor[i], shape[i]
            assert a.dtype == s.dtype == np.float32 and (a >= 0).all() and (a + s <= 1 + 1e-6).all()
            assert (s >= 0.3 - 1e-6).all() and (s <= 1).all() and 0.5 - 1e-6 <= s[0] / s[1] <= 2 + 1e-6
            window = np.concatenate([a, a + s])
            if len(BOXES[i]):  # at least half of every box is inside (the lower threshold)
                inside_part = [iou_part(window, b) for b in BOXES[i]]
                assert min(inside_part) >= 0.5 - 1e-6, inside_part
            centers = (BOXES[i][:, :2] + BOXES[i][:, 2:]) / 2
            inside = np.flatnonzero(((centers >= a) & (centers <= a + s)).all(1))
            np.testing.assert_array_equal(indices[i], inside)
            np.testing.assert_array_equal(labels[i], LABELS[i][inside])
            expected = np.clip((BOXES[i][inside].reshape(-1, 2, 2) - a) / s, 0, 1).reshape(-1, 4)
            np.testing.assert_allclose(boxes[i], expected, atol=1e-5)


def test_no_crop_keeps_everything_and_is_one_of_the_choices():
    outcomes = set()
    for anchor, shape, boxes, labels in run(torchdali, iterations=30, thresholds=[0.9], scaling=[0.3, 0.5],
                                            num_attempts=1, total_num_attempts=4, quiet=True):
        for i in range(BATCH):
            whole = (anchor[i] == 0).all() and (shape[i] == 1).all()
            outcomes.add(bool(whole))
            if whole:
                np.testing.assert_array_equal(boxes[i], BOXES[i])
            else:  # the default aspect ratio 1: as wide as high, relative to the image
                assert abs(shape[i][0] - shape[i][1]) < 1e-6
    assert outcomes == {True, False}


def test_area_pruning_keeps_boxes_mostly_inside():
    for anchor, shape, boxes, labels, indices in run(torchdali, iterations=10, thresholds=[0.0], scaling=[0.3, 0.6],
                                                     allow_no_crop=False, bbox_prune_threshold=0.5,
                                                     output_bbox_indices=True, num_attempts=5):
        for i in range(BATCH):
            a, hi = anchor[i], anchor[i] + shape[i]
            b = BOXES[i]
            inter = np.clip(np.minimum(b[:, 2:], hi) - np.maximum(b[:, :2], a), 0, None).prod(1)
            part = inter / (b[:, 2:] - b[:, :2]).prod(1)
            np.testing.assert_array_equal(indices[i], np.flatnonzero((part >= 0.5) & (inter > 0)))


def test_fixed_windows_are_absolute_and_whole_pixels():
    for anchor, shape, boxes in run(torchdali, iterations=10, labels=None, crop_shape=[100, 200],
                                    input_shape=[300, 400], shape_layout="HW", num_attempts=4):
        for i in range(BATCH):
            np.testing.assert_array_equal(shape[i], [200, 100])  # x, y order
            assert (anchor[i] == np.floor(anchor[i])).all() and (anchor[i] >= 0).all()
            assert (anchor[i] + shape[i] <= [400, 300]).all()


def test_xywh_layout_round_trips():
    xywh = [np.concatenate([b[:, :2], b[:, 2:] - b[:, :2]], 1) for b in BOXES]
    for anchor, shape, boxes, labels in run(torchdali, iterations=5, boxes=xywh, bbox_layout="xyWH", scaling=[0.5, 1]):
        for i in range(BATCH):
            if (shape[i] == 1).all():
                np.testing.assert_allclose(boxes[i], xywh[i], atol=1e-6)
            assert (boxes[i][:, 2:] >= 0).all() and (boxes[i][:, :2] + boxes[i][:, 2:] <= 1 + 1e-6).all()


def test_3d_boxes():
    boxes3 = [np.concatenate([lo, lo + 0.2], 1).astype(np.float32) for lo in (RNG.uniform(0, 0.8, (k, 3))
                                                                              for k in (2, 4, 1, 3, 1, 2))]
    for anchor, shape, boxes, indices in run(torchdali, iterations=5, boxes=boxes3, labels=None, thresholds=[0.2],
                                             threshold_type="overlap", scaling=[0.4, 1.0],
                                             aspect_ratio=[0.5, 2.0, 0.5, 2.0, 0.8, 1.25], num_attempts=20,
                                             allow_no_crop=False, output_bbox_indices=True):
        for i in range(len(boxes3)):
            a, s = anchor[i], shape[i]
            assert a.shape == (3,) and (a >= 0).all() and (a + s <= 1 + 1e-6).all()
            assert 0.8 - 1e-6 <= s[1] / s[2] <= 1.25 + 1e-6 and boxes[i].shape == (len(indices[i]), 6)


def test_types_and_shapes_match_dali():
    dali = dali_or_skip()
    settings = dict(thresholds=[0.1], scaling=[0.3, 1.0], num_attempts=10, output_bbox_indices=True)
    ours, theirs = run(torchdali, **settings)[0], run(dali, **settings)[0]
    for a, b in zip(ours, theirs):
        for x, y in zip(a, b):
            assert x.dtype == y.dtype and x.ndim == y.ndim and x.shape[1:] == y.shape[1:]


@pytest.mark.parametrize("kwargs,boxes,match", [
    (dict(), [np.array([[0.1, 0.1, 1.2, 0.5]], np.float32)] + BOXES[1:], r"sample 0, box 0: .* is not within \[0, 1\]"),
    (dict(), [b[:, :3] for b in BOXES], r"sample 0's boxes have shape \(3, 3\)"),
    (dict(crop_shape=[10, 10]), BOXES, r"give `crop_shape` and `input_shape` together"),
    (dict(crop_shape=[50, 10], input_shape=[40, 40]), BOXES, r"sample 0: `crop_shape` \[50, 10\] must .* fit"),
    (dict(bbox_layout="xyXW"), BOXES, r"'bbox_layout' is 'xyXW' for boxes of 4 coordinates"),
    (dict(thresholds=[1.5]), BOXES, r"argument 'thresholds'"),
])
def test_bad_inputs_are_named(kwargs, boxes, match):
    with pytest.raises(ValueError, match=r"random_bbox_crop.*" + match):
        run(torchdali, boxes=boxes, labels=None, **kwargs)


def test_no_valid_window_warns_and_uses_the_best():
    with pytest.warns(UserWarning, match=r"no valid window found for sample\(s\) \[0, 1, 3, 4, 5\]"):
        run(torchdali, thresholds=[1.0], scaling=[0.2, 0.3], allow_no_crop=False, total_num_attempts=3)
