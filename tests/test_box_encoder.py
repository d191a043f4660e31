"""box_encoder against DALI on the CPU (skipped without it) on random boxes, with empty
samples, degenerate boxes, boxes outside the image and repeated boxes; a small case worked
by hand; the GPU against the CPU; bad inputs named."""
import numpy as np
import pytest

import torchdali

from conftest import dali_or_skip, requires_cuda

BATCH = 5
RNG = np.random.default_rng(21)


def ssd_like_anchors(grid=6):
    """Two anchors per cell of a grid over [0, 1], l, t, r, b, flattened."""
    centers = (np.arange(grid) + 0.5) / grid
    out = []
    for cy in centers:
        for cx in centers:
            for w, h in ((0.2, 0.2), (0.3, 0.15)):
                out += [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]
    return [float(v) for v in out]


def random_boxes(count):
    lt = RNG.uniform(-0.1, 0.9, (count, 2))
    wh = RNG.uniform(0.0, 0.5, (count, 2))
    wh[::5] = 0.0  # degenerate boxes
    return np.concatenate([lt, lt + wh], 1).astype(np.float32)


BOXES = [random_boxes(k) for k in (7, 0, 1, 12, 3)]
BOXES[4][2] = BOXES[4][0]  # a repeated box: equal IoUs
LABELS = [RNG.integers(1, 80, (len(b), 1)).astype(np.int32) for b in BOXES]


def run(lib, feeds, device="cpu", **kwargs):
    @lib.pipeline_def(batch_size=BATCH, num_threads=1, device_id=0 if device == "gpu" else None)
    def pipe():
        boxes, labels = (lib.fn.external_source(source=(lambda f: lambda: f)(f), batch=True) for f in feeds)
        if device == "gpu":
            boxes, labels = boxes.gpu(), labels.gpu()
        return tuple(lib.fn.box_encoder(boxes, labels, device=device, **kwargs))

    p = pipe()
    p.build()
    out = p.run()
    out = [o.as_cpu() if device == "gpu" else o for o in out]
    return [[np.array(o[i]) for i in range(BATCH)] for o in out]


SETTINGS = {
    "boxes": dict(anchors=ssd_like_anchors()),
    "low criteria": dict(anchors=ssd_like_anchors(), criteria=0.1),
    "offsets": dict(anchors=ssd_like_anchors(), offset=True, scale=300.0, means=[0.1, -0.2, 0.0, 0.3],
                    stds=[0.1, 0.1, 0.2, 0.2]),
}


@pytest.mark.parametrize("setting", SETTINGS)
def test_matches_dali(setting):
    dali = dali_or_skip()
    ours = run(torchdali, [BOXES, LABELS], **SETTINGS[setting])
    theirs = run(dali, [BOXES, LABELS], **SETTINGS[setting])
    for a, b in zip(ours[0], theirs[0]):
        assert a.dtype == np.float32 and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    for a, b in zip(ours[1], theirs[1]):
        assert a.dtype == np.int32
        np.testing.assert_array_equal(a, b)


def test_a_small_case_by_hand():
    anchors = [0.0, 0.0, 0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 0.0, 0.5, 0.5, 1.0]
    boxes = [np.array([[0.0, 0.0, 0.4, 0.5], [0.05, 0.55, 0.45, 0.95]], np.float32)] * BATCH
    labels = [np.array([4, 9], np.int32)] * BATCH
    (encoded, *_), (classes, *_) = run(torchdali, [boxes, labels], anchors=anchors)
    np.testing.assert_allclose(encoded, [[0.2, 0.25, 0.4, 0.5], [0.75, 0.75, 0.5, 0.5], [0.25, 0.75, 0.4, 0.4]],
                               atol=1e-6)  # box 0 -> anchor 0, anchor 1 unmatched (itself), box 1 -> anchor 2
    np.testing.assert_array_equal(classes, [4, 0, 9])


@requires_cuda
@pytest.mark.parametrize("setting", SETTINGS)
def test_gpu_matches_cpu(setting):
    gpu = run(torchdali, [BOXES, LABELS], "gpu", **SETTINGS[setting])
    cpu = run(torchdali, [BOXES, LABELS], **SETTINGS[setting])
    for a, b in zip(gpu[0] + gpu[1], cpu[0] + cpu[1]):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("feeds,match,kind", [
    ([[b[:, :3] for b in BOXES], LABELS], r"box_encoder.*sample 0's boxes have shape \(7, 3\)", ValueError),
    ([BOXES, [l[:-1] for l in LABELS]], r"box_encoder.*sample 0 has 7 boxes and labels of shape \(6, 1\)", ValueError),
    ([BOXES, [l.astype(np.float32) for l in LABELS]], r"box_encoder.*boxes must be float and labels integers",
     TypeError),
])
def test_bad_inputs_are_named(feeds, match, kind):
    with pytest.raises(kind, match=match):
        run(torchdali, feeds, anchors=ssd_like_anchors())


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"box_encoder: argument 'anchors'.*4 values"):
        run(torchdali, [BOXES, LABELS], anchors=[0.0, 0.0, 1.0])
    with pytest.raises(ValueError, match=r"box_encoder: argument 'stds'.*must not be 0"):
        run(torchdali, [BOXES, LABELS], anchors=ssd_like_anchors(), stds=[1.0, 0.0, 1.0, 1.0])


def test_a_single_box_may_be_one_dimensional():
    anchors = ssd_like_anchors()
    one = [random_boxes(1) for _ in range(BATCH)]
    labels = [np.array([k + 1], np.int32) for k in range(BATCH)]
    flat = run(torchdali, [[b[0] for b in one], labels], anchors=anchors)  # [4] boxes, not [1, 4]
    for a, b in zip(flat, run(torchdali, [one, labels], anchors=anchors)):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
