"""segmentation.*: random_mask_pixel (foreground pixels only, by threshold or value, uniformly;
any pixel where asked or where a mask has no foreground), random_object_bbox (equal to DALI
where its draw is decided, else a box of a connected region found by a flood fill, with the
weights, k_largest, threshold and foreground_prob honoured) and select_masks (equal to DALI);
types and shapes as DALI's, bad arguments named."""
import collections

import numpy as np
import pytest

import torchdali

from conftest import assert_batches_equal, dali_or_skip

RNG = np.random.default_rng(4)


def draws(lib, masks, iterations=1, **kwargs):
    """[iterations][sample] coordinates chosen in `masks`."""
    @lib.pipeline_def(batch_size=len(masks), num_threads=1, device_id=None, seed=9)
    def pipe():
        x = lib.fn.external_source(source=lambda: masks, batch=True)
        return lib.fn.segmentation.random_mask_pixel(x, **kwargs)

    p = pipe()
    p.build()
    out = []
    for _ in range(iterations):
        (c,) = p.run()
        out.append([np.array(c[i]) for i in range(len(masks))])
    return out


MASKS = [(RNG.random((13, 17, 1)) < 0.05).astype(np.uint8) * RNG.integers(1, 4, (13, 17, 1)).astype(np.uint8),
         np.zeros((6, 5, 1), np.uint8),  # no foreground
         (RNG.random((20, 9, 1)) < 0.5).astype(np.uint8) * 2]


@pytest.mark.parametrize("kwargs,is_foreground", [
    (dict(foreground=1), lambda v: v > 0),
    (dict(foreground=1, threshold=1.5), lambda v: v > 1.5),
    (dict(foreground=1, value=2), lambda v: v == 2),
])
def test_foreground_pixels_only_and_any_pixel_without_foreground(kwargs, is_foreground):
    for batch in draws(torchdali, MASKS, iterations=20, **kwargs):
        for mask, c in zip(MASKS, batch):
            assert c.dtype == np.int64 and c.shape == (3,) and (c >= 0).all() and (c < mask.shape).all()
            if is_foreground(mask).any():
                assert is_foreground(mask[tuple(c)])


def test_choices_are_uniform_and_per_sample_foreground_flags_hold():
    mask = np.zeros((4, 6, 1), np.uint8)
    mask[1, 2], mask[3, 5], mask[0, 0] = 1, 1, 1
    masks = [mask, mask]
    seen = collections.Counter()
    anywhere = set()
    flags = [np.int32(1), np.int32(0)]

    @torchdali.pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=3)
    def pipe():
        x = torchdali.fn.external_source(source=lambda: masks, batch=True)
        f = torchdali.fn.external_source(source=lambda: flags, batch=True)
        return torchdali.fn.segmentation.random_mask_pixel(x, foreground=f)

    p = pipe()
    p.build()
    for _ in range(600):
        (c,) = p.run()
        seen[tuple(np.array(c[0]))] += 1
        anywhere.add(tuple(np.array(c[1])))
    assert set(seen) == {(1, 2, 0), (3, 5, 0), (0, 0, 0)} and min(seen.values()) > 150
    assert len(anywhere) > 12  # sample 1 draws from all 24 pixels


def test_types_and_shapes_match_dali():
    dali = dali_or_skip()
    ours, theirs = draws(torchdali, MASKS, foreground=1)[0], draws(dali, MASKS, foreground=1)[0]
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape


def test_an_empty_mask_is_named():
    with pytest.raises(ValueError, match=r"random_mask_pixel.*sample 1 is empty \(0, 5, 1\)"):
        draws(torchdali, [MASKS[0], np.zeros((0, 5, 1), np.uint8)], foreground=1)


# --- segmentation.random_object_bbox ---------------------------------------------------------

def object_boxes(mask, background=0):
    """{(label, lo, hi)} of the mask's connected regions of one label (neighbours along the
    axes), the background left out: a flood fill, the reference."""
    seen = np.zeros(mask.shape, bool)
    found = set()
    for start in zip(*np.nonzero(mask != background)):
        if seen[start]:
            continue
        label, stack, pixels = mask[start], [start], []
        seen[start] = True
        while stack:
            p = stack.pop()
            pixels.append(p)
            for d in range(mask.ndim):
                for step in (-1, 1):
                    q = p[:d] + (p[d] + step,) + p[d + 1:]
                    if 0 <= q[d] < mask.shape[d] and not seen[q] and mask[q] == label:
                        seen[q] = True
                        stack.append(q)
        pixels = np.array(pixels)
        found.add((int(label), tuple(pixels.min(0).tolist()), tuple((pixels.max(0) + 1).tolist())))
    return found


def random_masks(shapes, labels=3, density=0.3, dtype=np.uint8, seed=0):
    rng = np.random.default_rng(seed)
    return [((rng.random(s) < density) * rng.integers(1, labels + 1, s)).astype(dtype) for s in shapes]


def object_bbox(lib, masks, iterations=1, **kwargs):
    """[iterations][output][sample] of random_object_bbox on `masks` (one batch)."""
    @lib.pipeline_def(batch_size=len(masks), num_threads=1, device_id=None, seed=5)
    def pipe():
        x = lib.fn.external_source(source=lambda: masks, batch=True)
        out = lib.fn.segmentation.random_object_bbox(x, **kwargs)
        return tuple(out) if isinstance(out, (list, tuple)) else (out,)

    p = pipe()
    p.build()
    return [[[np.array(o[i]) for i in range(len(masks))] for o in p.run()] for _ in range(iterations)]


def one_object_masks():
    """Masks with at most one object of each label, of 1 to 3 dims and several types, one
    without any object and an empty one."""
    masks = []
    for k, shape in enumerate([(9,), (12, 15), (6, 7, 5), (20, 3), (1, 4), (13, 11)]):
        m = np.zeros(shape, np.int32)
        lo = [k % s for s in shape]
        m[tuple(slice(a, min(a + 3, s)) for a, s in zip(lo, shape))] = 2
        if len(shape) == 2 and shape[0] > 10:
            m[-2:, -4:] = 1
        masks.append(m)
    masks.append(np.zeros((4, 5), np.int32))  # no object
    masks.append(np.zeros((0, 6), np.int32))  # empty
    return masks


DETERMINISTIC = {
    "k_largest=1, one class": dict(k_largest=1, classes=[1]),
    "k_largest=1, box and class": dict(k_largest=1, classes=[2], format="box", output_class=True),
    "k_largest=1, ignoring classes": dict(k_largest=1, ignore_class=True, format="start_end"),
    "k_largest=1, a threshold": dict(k_largest=1, classes=[1], threshold=[2], output_class=True),
    "classes with 0, no foreground": dict(classes=[0, 1], foreground_prob=0.0, output_class=True),
    "weights without classes": dict(class_weights=[0.0, 1.0], background=0, k_largest=1, output_class=True),
}


@pytest.mark.parametrize("setting", DETERMINISTIC)
@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.bool_])
def test_random_object_bbox_equals_dali_where_it_is_deterministic(setting, dtype):
    dali = dali_or_skip()
    masks = random_masks([(17, 23), (9, 31), (30, 30), (1, 40), (5, 5)], labels=1 if dtype == np.bool_ else 2,
                         density=0.45, dtype=dtype, seed=1) + [np.zeros((6, 4), dtype)]
    kwargs = DETERMINISTIC[setting]
    for got, expected in zip(object_bbox(torchdali, masks, **kwargs)[0], object_bbox(dali, masks, **kwargs)[0]):
        assert_batches_equal(got, expected)


def test_random_object_bbox_equals_dali_on_masks_of_one_object_per_label():
    dali = dali_or_skip()
    masks = one_object_masks()
    for ndim in (1, 2, 3):  # a batch has one number of dims
        batch = [m for m in masks if m.ndim == ndim]
        for kwargs in (dict(classes=[2], output_class=True), dict(ignore_class=True, background=1, k_largest=1),
                       dict(class_weights=[0, 0, 3], format="box")):
            for got, expected in zip(object_bbox(torchdali, batch, **kwargs)[0], object_bbox(dali, batch, **kwargs)[0]):
                assert_batches_equal(got, expected)


def test_random_object_bbox_per_sample_arguments_equal_dali():
    dali = dali_or_skip()
    m = np.zeros((10, 10), np.uint8)
    m[1:4, 1:3], m[6:9, 2:9], m[0, 9] = 1, 2, 3
    masks = [m, m + 1, m, m]
    per_sample = dict(classes=[np.array(c, np.int32) for c in ([2], [3], [3, 1, 2], [1])],
                      background=[np.int32(b) for b in (0, 1, 0, 3)],
                      threshold=[np.array(t, np.int32) for t in ([2, 2], [1, 1], [3, 3], [1, 1])])

    def run(lib):
        @lib.pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=1)
        def pipe():
            named = {k: lib.fn.external_source(source=(lambda v: lambda: v)(v), batch=True)
                     for k, v in per_sample.items()}
            x = lib.fn.external_source(source=lambda: masks, batch=True)
            return tuple(lib.fn.segmentation.random_object_bbox(x, k_largest=1, output_class=True, format="box",
                                                                **named))

        p = pipe()
        p.build()
        return [[np.array(o[i]) for i in range(4)] for o in p.run()]

    ours, theirs = run(torchdali), run(dali)
    for got, expected in zip(ours, theirs):
        assert_batches_equal(got, expected)
    np.testing.assert_array_equal(ours[1], [2, 3, 2, 1])  # sample 3: background 3, so class 1's box


def test_random_object_bbox_of_a_single_pixel_is_that_pixel():
    """DALI 2.4 gives an empty box at 0 for a one-element mask whose background is 0 (it
    numbers the object 1 there, and 0 elsewhere); the object's box is the pixel."""
    for mask in (np.array([[3]], np.uint8), np.array([7], np.int32)):
        (box,) = object_bbox(torchdali, [mask], format="box")[0]
        np.testing.assert_array_equal(box[0], [0] * mask.ndim + [1] * mask.ndim)


def test_random_object_bbox_draws_an_object_of_a_weighted_class():
    dali = dali_or_skip()
    masks = random_masks([(15, 20), (8, 8, 4), (25, 10), (6, 6)], labels=3, density=0.4, seed=2)
    masks = [np.ascontiguousarray(m[..., 0]) if m.ndim == 3 else m for m in masks]  # 2-D
    settings = dict(classes=[1, 3], class_weights=[1.0, 3.0], threshold=[2, 1], foreground_prob=0.8,
                    format="start_end", output_class=True)
    classes_seen = collections.Counter()
    for lib in (torchdali, dali):  # DALI's draws check the reference as ours are checked against it
        for lo, hi, label in object_bbox(lib, masks, iterations=40, **settings):
            for i, m in enumerate(masks):
                box = (int(label[i]), tuple(lo[i].tolist()), tuple(hi[i].tolist()))
                if box[0] == 0:  # not foreground, or nothing over the threshold
                    assert box[1:] == ((0, 0), m.shape)
                    continue
                assert box in object_boxes(m) and box[0] in (1, 3)
                assert hi[i][0] - lo[i][0] >= 2
                classes_seen[lib.__name__, box[0]] += 1
    for name in ("torchdali", "nvidia.dali"):
        assert 2 < classes_seen[name, 3] / classes_seen[name, 1] < 4.5  # weights 3 : 1


def test_random_object_bbox_k_largest_and_ignore_class():
    mask = np.zeros((12, 12), np.uint8)
    mask[0:5, 0:5] = 1  # 25
    mask[7:12, 0:4] = 2  # 20, another class
    mask[0:3, 7:12] = 1  # 15
    mask[10, 10] = 1  # 1
    seen = collections.Counter()
    for (box,) in object_bbox(torchdali, [mask], iterations=300, k_largest=2, ignore_class=True, format="box"):
        seen[tuple(box[0].tolist())] += 1
    assert set(seen) == {(0, 0, 5, 5), (7, 0, 12, 4)} and min(seen.values()) > 100
    seen.clear()
    for lo, shape in object_bbox(torchdali, [mask], iterations=300, classes=[1]):
        seen[tuple(lo[0].tolist()) + tuple(shape[0].tolist())] += 1
    assert set(seen) == {(0, 0, 5, 5), (0, 7, 3, 5), (10, 10, 1, 1)} and min(seen.values()) > 60


def test_random_object_bbox_foreground_prob_and_per_sample_arguments():
    masks = [np.pad(np.ones((3, 4), np.uint8), 2)] * 2
    probs = [np.float32(0.5), np.float32(1.0)]

    @torchdali.pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=4)
    def pipe():
        x = torchdali.fn.external_source(source=lambda: masks, batch=True)
        p = torchdali.fn.external_source(source=lambda: probs, batch=True)
        return tuple(torchdali.fn.segmentation.random_object_bbox(x, foreground_prob=p, output_class=True))

    p = pipe()
    p.build()
    whole = collections.Counter()
    for _ in range(400):
        lo, shape, label = (np.array(o.as_tensor()) for o in p.run())
        for i in range(2):
            is_whole = (lo[i] == 0).all() and (shape[i] == [7, 8]).all()
            assert is_whole != bool(label[i]) and (is_whole or ((lo[i] == 2).all() and (shape[i] == [3, 4]).all()))
            whole[i] += is_whole
    assert 160 < whole[0] < 240 and whole[1] == 0


def test_random_object_bbox_finds_long_and_many_regions():
    """A snake (one region joined row by row, at alternate ends) in 2-D and in 3-D, and a
    checkerboard of 3 labels (each pixel its own region)."""
    snake = np.zeros((41, 37), np.uint8)
    snake[::2] = 1
    snake[1::4, -1] = snake[3::4, 0] = 1
    snake3 = np.zeros((5, 41, 37), np.uint8)
    snake3[::2], snake3[1::4, -1, -1], snake3[3::4, -1, 0] = snake, 1, 1
    checker = ((np.indices((30, 30)).sum(0) % 2) * (1 + np.arange(30) % 3)).astype(np.uint8)
    for mask in (snake, snake3, checker):
        expected = object_boxes(mask)
        assert len(expected) == (450 if mask is checker else 1)
        for lo, hi, label in object_bbox(torchdali, [mask], iterations=20, format="start_end", output_class=True):
            assert (int(label[0]), tuple(lo[0].tolist()), tuple(hi[0].tolist())) in expected


def test_random_object_bbox_types_and_layouts_match_dali():
    dali = dali_or_skip()
    masks = random_masks([(5, 6, 1), (7, 3, 1)], seed=3)

    def outputs(lib, **kwargs):
        @lib.pipeline_def(batch_size=2, num_threads=1, device_id=None)
        def pipe():
            x = lib.fn.external_source(source=lambda: masks, batch=True, layout="HWC")
            return tuple(lib.fn.segmentation.random_object_bbox(x, **kwargs))

        p = pipe()
        p.build()
        return p.run()

    for kwargs in (dict(), dict(format="box", output_class=True)):
        for x, y in zip(outputs(torchdali, **kwargs), outputs(dali, **kwargs)):
            assert x.layout() == y.layout() and np.array(x[0]).shape == np.array(y[0]).shape
            assert np.array(x[0]).dtype == np.array(y[0]).dtype


@pytest.mark.parametrize("kwargs,masks,error,match", [
    (dict(ignore_class=True, classes=[1]), None, ValueError, r"cannot be used with `ignore_class`"),
    (dict(ignore_class=True, output_class=True), None, ValueError, r"cannot be used with `ignore_class`"),
    (dict(classes=[0, 1], background=0), None, ValueError, r"sample 0: class 0 is also the `background`"),
    (dict(classes=[1, 2], class_weights=[1.0]), None, ValueError, r"`classes` has 2 values and `class_weights` 1"),
    (dict(class_weights=[1.0, -1.0]), None, ValueError, r"argument 'class_weights'.*must not be negative"),
    (dict(k_largest=0), None, ValueError, r"argument 'k_largest' = 0: must be at least 1"),
    (dict(threshold=[1, 2, 3]), None, ValueError, r"'threshold' has 3 values; the masks have 2 dims"),
    (dict(format="xywh"), None, ValueError, r"argument 'format'"),
    (dict(), [np.zeros((3, 3), np.float32)], TypeError, r"integer labels \(or bool\), got torch.float32"),
    (dict(), [np.zeros((1,) * 7, np.uint8)], ValueError, r"have 7 dims; 1 to 6"),
    (dict(), [np.uint8(1)], ValueError, r"have 0 dims; 1 to 6"),
])
def test_random_object_bbox_bad_arguments_are_named(kwargs, masks, error, match):
    with pytest.raises(error, match=r"random_object_bbox.*" + match):
        object_bbox(torchdali, masks or [np.eye(3, dtype=np.uint8)], **kwargs)


# --- segmentation.select_masks ----------------------------------------------------------------

def select_masks(lib, ids, polygons, vertices, **kwargs):
    @lib.pipeline_def(batch_size=len(ids), num_threads=1, device_id=None)
    def pipe():
        feeds = [lib.fn.external_source(source=(lambda f: lambda: f)(f), batch=True) for f in (ids, polygons, vertices)]
        return tuple(lib.fn.segmentation.select_masks(*feeds, **kwargs))

    p = pipe()
    p.build()
    return [[np.array(o[i]) for i in range(len(ids))] for o in p.run()]


def coco_like(masks, polygons_per_mask, width, dtype, seed):
    """(polygons int32 [P, 3], vertices [V, width]) of `masks` ids, some ids with several
    polygons, some polygons without vertices."""
    rng = np.random.default_rng(seed)
    ids = np.repeat(masks, polygons_per_mask)
    rng.shuffle(ids)
    sizes = rng.integers(0, 6, len(ids))
    ends = np.cumsum(sizes)
    polygons = np.stack([ids, ends - sizes, ends], 1).astype(np.int32).reshape(-1, 3)
    vertices = rng.uniform(-100, 100, (int(ends[-1]) if len(ends) else 0, width)).astype(dtype)
    return polygons, vertices


@pytest.mark.parametrize("reindex", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.int16, np.float64])
def test_select_masks_equals_dali(reindex, dtype):
    dali = dali_or_skip()
    data = [coco_like([0, 1, 2, 5], [1, 2, 1, 3], 2, dtype, 0), coco_like([3, 7], [2, 1], 2, dtype, 1),
            coco_like([4], [1], 3, dtype, 2), coco_like([0, 1, 2, 3, 4, 5], [1] * 6, 4, dtype, 3),
            (np.zeros((0, 3), np.int32), np.zeros((0, 2), dtype))]
    ids = [np.array(v, np.int32) for v in ([5, 0, 2], [7, 3], [4], [], [])]
    polygons, vertices = [d[0] for d in data], [d[1] for d in data]
    ours = select_masks(torchdali, ids, polygons, vertices, reindex_masks=reindex)
    theirs = select_masks(dali, ids, polygons, vertices, reindex_masks=reindex)
    for got, expected in zip(ours, theirs):
        assert_batches_equal(got, expected)


def test_select_masks_by_hand():
    vertices = [np.arange(20, dtype=np.float32).reshape(10, 2)]
    polygons = [np.array([[0, 0, 3], [1, 3, 7], [2, 7, 10]], np.int32)]
    (poly,), (vert,) = select_masks(torchdali, [np.array([1], np.int32)], polygons, vertices)
    np.testing.assert_array_equal(poly, [[1, 0, 4]])
    np.testing.assert_array_equal(vert, vertices[0][3:7])
    (poly,), (vert,) = select_masks(torchdali, [np.array([2, 0], np.int32)], polygons, vertices, reindex_masks=True)
    np.testing.assert_array_equal(poly, [[0, 0, 3], [1, 3, 6]])  # in the order of mask_ids
    np.testing.assert_array_equal(vert, np.concatenate([vertices[0][7:10], vertices[0][0:3]]))


@pytest.mark.parametrize("ids,polygons,match", [
    ([1, 1], [[1, 0, 2]], r"sample 0: mask id 1 is repeated"),
    ([4], [[1, 0, 2]], r"sample 0: mask id 4 has no polygon"),
    ([1], [[1, 0, 12]], r"sample 0: the polygon of mask 1 spans vertices \[0, 12\), not within the 10 vertices"),
    ([1], [[1, 3, 2]], r"sample 0: the polygon of mask 1 spans vertices \[3, 2\)"),
    ([1], [[1, 0]], r"input 'polygons' sample 0 has shape \(1, 2\)"),
])
def test_select_masks_bad_inputs_are_named(ids, polygons, match):
    with pytest.raises(ValueError, match=r"select_masks.*" + match):
        select_masks(torchdali, [np.array(ids, np.int32)], [np.array(polygons, np.int32)],
                     [np.zeros((10, 2), np.float32)])


def test_select_masks_wants_int32_ids_and_polygons():
    with pytest.raises(TypeError, match=r"select_masks.*input 'mask_ids' must be int32"):
        select_masks(torchdali, [np.array([1], np.int64)], [np.array([[1, 0, 2]], np.int32)], [np.zeros((3, 2))])
