"""ssd_random_crop: each output image is a window of its input, the boxes whose centers it
holds are kept, mapped into it and clipped, with their labels; whole images keep everything
as given; a sample without boxes is never cropped. Our random numbers are not DALI's, so
DALI (skipped where absent) is compared by these invariants, which must hold for both
libraries, and by the distributions of many crops: how often an image stays whole, the
windows' areas, the least IoU of their boxes, the number of boxes kept. Then the exact
acceptance rules (float32 IoU, centers on an edge), types and layouts, determinism and
bad inputs."""
import numpy as np
import pytest

import torchdali
from torchdali.operators.ssd_crop import acceptable, holds_centers

from conftest import dali_or_skip

RNG = np.random.default_rng(11)


def coded_image(h, w):
    """An HWC uint8 image whose pixels name their places: (y % 256, x % 256, high bits)."""
    y, x = np.mgrid[:h, :w]
    return np.stack([y % 256, x % 256, y // 256 * 16 + x // 256], -1).astype(np.uint8)


def locate(window, image):
    """(y0, x0) of `window` in the coded `image`; fails where it is not a window of it."""
    y0 = int(window[0, 0, 0]) + 256 * (int(window[0, 0, 2]) // 16)
    x0 = int(window[0, 0, 1]) + 256 * (int(window[0, 0, 2]) % 16)
    h, w = window.shape[:2]
    assert h > 0 and w > 0 and np.array_equal(window, image[y0:y0 + h, x0:x0 + w])
    return y0, x0


def random_boxes(k):
    lo = RNG.uniform(0, 0.75, (k, 2))
    return np.concatenate([lo, lo + RNG.uniform(0.05, 0.25, (k, 2))], 1).astype(np.float32)


SIZES = [(150, 203), (121, 97), (64, 311), (233, 180), (99, 99)]
IMAGES = [coded_image(h, w) for h, w in SIZES]
BOXES = [random_boxes(k) for k in (3, 1, 5, 0, 2)]
LABELS = [np.arange(len(b), dtype=np.int32) for b in BOXES]  # a label names its box


def libraries():
    return [torchdali, pytest.param("dali", id="dali")]


def library(lib):
    return dali_or_skip() if lib == "dali" else lib


def always(batch):
    return lambda: batch


def run(lib, iterations=1, images=IMAGES, boxes=BOXES, labels=LABELS, seed=12, image_layout="HWC", **kwargs):
    """[iteration][output][sample] NumPy arrays, and the outputs' layouts."""
    @lib.pipeline_def(batch_size=len(images), num_threads=1, device_id=None, seed=seed)
    def pipe():
        feeds = [lib.fn.external_source(source=always(v), batch=True, layout=layout)
                 for v, layout in ((images, image_layout), (boxes, None), (labels, None))]
        return tuple(lib.fn.ssd_random_crop(*feeds, **kwargs))  # DALI warns that it is deprecated

    p = pipe()
    p.build()
    results, layouts = [], None
    for _ in range(iterations):
        outs = p.run()
        layouts = [o.layout() for o in outs]
        results.append([[np.array(o[i]) for i in range(len(images))] for o in outs])
    return results, layouts


def check_sample(image, boxes, labels, out_image, out_boxes, out_labels):
    """The invariants of one output sample; whether it is the whole image."""
    h, w = image.shape[:2]
    y0, x0 = locate(out_image, image)
    assert out_boxes.dtype == np.float32 and out_boxes.shape == (len(out_labels), 4)
    kept = out_labels.astype(np.int64)
    assert len(set(kept.tolist())) == len(kept) and (np.diff(kept) > 0).all()  # in the input's order
    if np.array_equal(out_boxes, boxes) and out_image.shape == image.shape:
        np.testing.assert_array_equal(out_labels, labels)
        return True
    assert len(boxes) and len(kept), "a crop keeps at least one box"
    # The window, to within the rounding of its ends to whole pixels.
    lo = np.array([x0 / w, y0 / h])
    size = np.array([out_image.shape[1] / w, out_image.shape[0] / h])
    tol = 1.0 / np.array([w, h])
    assert (size >= 0.3 - 2 * tol).all() and (size < 1 + tol).all()
    assert 0.5 - 0.05 <= size[0] / size[1] <= 2 + 0.05
    centers = (boxes[:, :2] + boxes[:, 2:]) / 2
    margin = np.minimum(np.abs(centers - lo), np.abs(centers - lo - size)).min(1)
    clear = margin > 2 * tol.max()  # centers not within a pixel or two of the window's edges
    inside = ((centers >= lo) & (centers <= lo + size)).all(1)
    np.testing.assert_array_equal(np.isin(np.flatnonzero(clear), kept), inside[clear])
    expected = np.clip((boxes[kept].reshape(-1, 2, 2) - lo) / size, 0, 1).reshape(-1, 4)
    np.testing.assert_allclose(out_boxes, expected, atol=8 * tol.max())
    assert (out_boxes >= 0).all() and (out_boxes <= 1).all()
    return False


@pytest.mark.parametrize("lib", libraries())
@pytest.mark.parametrize("num_attempts", [1, 7])
def test_outputs_are_windows_with_their_boxes_and_labels(lib, num_attempts):
    whole = []
    for images, boxes, labels in run(library(lib), iterations=40, num_attempts=num_attempts)[0]:
        for i in range(len(IMAGES)):
            whole.append(check_sample(IMAGES[i], BOXES[i], LABELS[i], images[i], boxes[i], labels[i]))
    whole = np.array(whole).reshape(40, len(IMAGES))
    assert whole[:, 3].all()  # no boxes: never cropped
    assert 0 < whole[:, [0, 1, 2, 4]].mean() < 1


def crop_statistics(results, image, boxes):
    """(how often the image stays whole, the crops' mean area, the share of crops whose least
    IoU with the boxes falls in each of [-1, 0.1), [0.1, 0.3), ... [0.9, 1], the mean number of
    boxes kept) over every sample of `results`."""
    h, w = image.shape[:2]
    whole, areas, least, kept = 0, [], [], []
    for out_images, out_boxes, out_labels in results:
        for im, bx, lb in zip(out_images, out_boxes, out_labels):
            if np.array_equal(bx, boxes) and im.shape == image.shape:
                whole += 1
                continue
            y0, x0 = locate(im, image)
            window = np.array([x0 / w, y0 / h, (x0 + im.shape[1]) / w, (y0 + im.shape[0]) / h])
            inter = np.clip(np.minimum(window[2:], boxes[:, 2:]) - np.maximum(window[:2], boxes[:, :2]), 0, None)
            inter = inter.prod(1)
            union = (boxes[:, 2:] - boxes[:, :2]).prod(1) + (window[2:] - window[:2]).prod() - inter
            least.append((inter / union).min())
            areas.append(im.shape[0] * im.shape[1] / (h * w))
            kept.append(len(lb))
    n = sum(len(r[0]) for r in results)
    shares = np.histogram(least, [-1, 0.1, 0.3, 0.5, 0.7, 0.9, 1.01])[0] / max(len(least), 1)
    return whole / n, np.mean(areas), shares, np.mean(kept)


SPREAD = np.array([[0.1, 0.2, 0.45, 0.5], [0.5, 0.55, 0.8, 0.95], [0.3, 0.3, 0.7, 0.6]], np.float32)
LARGE = np.array([[0.2, 0.15, 0.85, 0.9]], np.float32)


@pytest.mark.parametrize("boxes", [SPREAD, LARGE], ids=["three boxes", "one large box"])
@pytest.mark.parametrize("num_attempts", [1, 10])
def test_crops_are_distributed_as_dali_s(boxes, num_attempts):
    dali = dali_or_skip()
    image, n = coded_image(77, 103), 128
    feeds = dict(images=[image] * n, boxes=[boxes] * n, labels=[np.arange(len(boxes), dtype=np.int32)] * n)
    ours, theirs = (crop_statistics(run(lib, iterations=20, num_attempts=num_attempts, **feeds)[0], image, boxes)
                    for lib in (torchdali, dali))
    assert abs(ours[0] - theirs[0]) < 0.05, (ours, theirs)  # 2,560 samples each: 0.013 standard error
    assert abs(ours[1] - theirs[1]) < 0.03, (ours, theirs)
    np.testing.assert_allclose(ours[2], theirs[2], atol=0.05, err_msg=str((ours, theirs)))
    assert abs(ours[3] - theirs[3]) < 0.1, (ours, theirs)


@pytest.mark.parametrize("lib", libraries())
def test_each_of_seven_choices_is_taken_alike(lib):
    """A box filling the image: every least IoU is reached within 1,000 windows, so the image
    stays whole only when 'no crop' is chosen, one time in seven (not six), and the least IoUs
    of the crops spread over the six other choices."""
    image, n = coded_image(97, 131), 250
    feeds = dict(images=[image] * n, boxes=[np.array([[0, 0, 1, 1]], np.float32)] * n,
                 labels=[np.zeros(1, np.int32)] * n)
    results = run(library(lib), iterations=24, num_attempts=1000, **feeds)[0]
    whole, _, shares, _ = crop_statistics(results, image, feeds["boxes"][0])
    assert abs(whole - 1 / 7) < 0.018  # 6,000 samples: 0.0045 standard error
    assert shares[-1] > 0.1  # the choice of 0.9 (windows of 9/10 of each side and more)


def test_least_iou_is_float32_and_centers_on_an_edge_count():
    box = np.array([[[0.2, 0.2, 0.6, 0.6]]], np.float32)  # [samples, boxes, 4]
    valid = np.ones((1, 1), bool)
    window = np.array([[[0.2, 0.2, 0.3, 0.3]]], np.float32)  # [samples, windows, 4]: left, top, width, height
    f = np.float32
    right = f(np.float64(f(0.2)) + np.float64(f(0.3)))  # DALI: the window's right end in double, stored as float
    side, box_side = right - f(0.2), f(0.6) - f(0.2)
    inter = side * side  # the window lies in the box
    iou = inter / (box_side * box_side + side * side - inter)  # DALI's float32 IoU
    assert acceptable(window, box, valid, np.array([iou], np.float32))[0, 0]
    assert not acceptable(window, box, valid, np.array([np.nextafter(iou, np.float32(1))], np.float32))[0, 0]
    edge = np.array([[[0.4, 0.4, 0.3, 0.3]]], np.float32)  # the box's center on the window's corner
    assert holds_centers(box[0], edge[0, :, :2].astype(np.float64), np.array([[0.7, 0.7]]))[0, 0]
    assert acceptable(edge, box, valid, np.array([-1], np.float32))[0, 0]
    outside = np.array([[[0.41, 0.4, 0.3, 0.3]]], np.float32)
    assert not acceptable(outside, box, valid, np.array([-1], np.float32))[0, 0]
    unshaped = np.array([[[np.nan, 0.0, 0.9, 0.3]]], np.float32)  # drawn outside [0.5, 2] width / height
    assert not acceptable(unshaped, box, valid, np.array([-1], np.float32))[0, 0]


def test_types_shapes_and_layouts_match_dali():
    dali = dali_or_skip()
    (ours, our_layouts), (theirs, their_layouts) = (run(lib, iterations=3, seed=4) for lib in (torchdali, dali))
    assert our_layouts == their_layouts == ["HWC", "", ""]
    for a, b in zip(ours, theirs):
        for k, (x, y) in enumerate(zip(a, b)):  # each output; images: the channels, the others: a box's row
            for u, v in zip(x, y):  # each sample
                assert u.dtype == v.dtype and u.ndim == v.ndim and u.shape[1 + (k == 0):] == v.shape[1 + (k == 0):]
    assert ours[0][1][3].shape == (0, 4) and ours[0][2][3].shape == (0,)


def test_labels_of_shape_n_1_keep_their_rows():
    """DALI gives a cropped sample's labels as [kept] but a whole one's as [N, 1] (and fails
    on a batch holding both); torchdali keeps the rows: [kept, 1]."""
    labels = [np.arange(len(b), dtype=np.int32)[:, None] for b in BOXES]
    for _, _, out_labels in run(torchdali, iterations=10, labels=labels)[0]:
        for lb, b in zip(out_labels, BOXES):
            assert lb.ndim == 2 and lb.shape[1] == 1 and len(lb) <= len(b)
    dali = dali_or_skip()
    shapes = {lb[0].shape for _, _, lb in run(dali, iterations=30, images=IMAGES[:1], boxes=BOXES[:1],
                                              labels=labels[:1], num_attempts=3)[0]}
    assert (3, 1) in shapes and any(len(s) == 1 for s in shapes)


def test_a_seed_repeats_the_crops_and_another_changes_them():
    first, again, other = (run(torchdali, iterations=3, seed=s)[0] for s in (5, 5, 6))
    flat = [[x for outputs in r for batch in outputs for x in batch] for r in (first, again, other)]
    assert all(np.array_equal(a, b) for a, b in zip(flat[0], flat[1]))
    assert not all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(flat[0], flat[2]))


def test_many_attempts_and_boxes_the_crop_cannot_keep():
    """Boxes whose centers lie outside the image are never kept: DALI draws until 'no crop'."""
    far = [np.array([[1.2, 1.2, 1.4, 1.5]], np.float32)] * 2
    for images, boxes, labels in run(torchdali, iterations=3, images=IMAGES[:2], boxes=far,
                                     labels=[np.zeros(1, np.int32)] * 2, num_attempts=100_000)[0]:
        assert all(np.array_equal(a, b) for a, b in zip(images, IMAGES[:2]))
        assert all(np.array_equal(a, b) for a, b in zip(boxes, far))


@pytest.mark.parametrize("change,error,match", [
    (dict(num_attempts=0), ValueError, r"argument 'num_attempts'"),
    (dict(boxes=[b[:, :3] for b in BOXES]), ValueError, r"sample 0's boxes have shape \(3, 3\); expected \[boxes, 4\]"),
    (dict(boxes=[(b * 100).astype(np.int32) for b in BOXES]), TypeError, r"boxes of type torch.int32"),
    (dict(labels=[np.zeros(2, np.int32)] + LABELS[1:]), ValueError, r"sample 0 has 3 boxes and labels of shape \(2,\)"),
    (dict(images=[im[..., 0] for im in IMAGES], image_layout=None), ValueError, r"images of 2 dims are not supported"),
    (dict(images=[im.transpose(2, 0, 1) for im in IMAGES], image_layout="CHW"), ValueError,
     r"images of layout 'CHW' are not supported; give HWC images"),
])
def test_bad_inputs_are_named(change, error, match):
    with pytest.raises(error, match=r"ssd_random_crop.*" + match):
        run(torchdali, **change)
