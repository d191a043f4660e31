"""fn.flip, fn.crop, fn.transpose and fn.pad in a pipeline: against NumPy references and,
where installed, NVIDIA DALI on the same inputs."""
import numpy as np
import pytest

import torchdali
from torchdali import types

from conftest import as_numpy_batch, assert_batches_equal, assert_one_buffer, dali_or_skip, requires_cuda, run_operator

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(0)
SIZES = ((17, 23), (1, 1), (31, 5), (12, 12))
IMAGES = [RNG.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in SIZES]
FLAGS = [np.int32(k % 2) for k in range(len(IMAGES))]
FLAGS2 = [np.int32(k // 2 % 2) for k in range(len(IMAGES))]


def run(lib, op, images=IMAGES, **kwargs):
    return run_operator(lib, op, images, **kwargs)


def as_type(images, dtype):
    return [im.astype(dtype) * (1 if dtype == np.uint8 else 0.5) for im in images]


# --- flip ---

def test_flip_per_sample_flags_hwc_and_chw():
    got, layout = run(torchdali, "flip", arg_inputs=dict(horizontal=FLAGS, vertical=FLAGS2))
    expected = [im[::-1] if v else im for im, v in zip(IMAGES, FLAGS2)]
    expected = [im[:, ::-1] if h else im for im, h in zip(expected, FLAGS)]
    assert layout == "HWC"
    assert_batches_equal(got, expected)
    chw = [im.transpose(2, 0, 1) for im in IMAGES]
    got, layout = run(torchdali, "flip", chw, layout="CHW", horizontal=1, vertical=1)
    assert layout == "CHW"
    assert_batches_equal(got, [im[:, ::-1, ::-1] for im in chw])


def test_flip_default_and_volumes():
    got, _ = run(torchdali, "flip", as_type(IMAGES, np.float32))  # horizontal=1 by default
    assert_batches_equal(got, [im[:, ::-1] for im in as_type(IMAGES, np.float32)])
    vols = [RNG.random((d, 4, 5, 2), dtype=np.float32) for d in (3, 1, 6)]
    got, layout = run(torchdali, "flip", vols, layout="DHWC", horizontal=0,
                      arg_inputs=dict(depthwise=[np.int32(1), np.int32(0), np.int32(1)]))
    assert layout == "DHWC"
    assert_batches_equal(got, [vols[0][::-1], vols[1], vols[2][::-1]])
    seqs = [RNG.integers(0, 9, (2, 4, 5, 3), dtype=np.uint8)]
    got, _ = run(torchdali, "flip", seqs, layout="FHWC", vertical=1, depthwise=1)  # no D: ignored
    assert_batches_equal(got, [seqs[0][:, ::-1, ::-1]])


def test_flip_legacy_ops_class():
    @torchdali.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        x = torchdali.fn.external_source(lambda: IMAGES[:2], layout="HWC")
        return torchdali.ops.Flip(horizontal=0, vertical=1)(x)

    p = pipe()
    p.build()
    assert_batches_equal(as_numpy_batch(p.run()[0]), [im[::-1] for im in IMAGES[:2]])


def test_flip_bad_layout():
    with pytest.raises(ValueError, match="H axis right before the W axis"):
        run(torchdali, "flip", [im.transpose(1, 0, 2) for im in IMAGES], layout="WHC")


# --- crop ---

def crop_reference(img, crop, pos=(0.5, 0.5), policy="error", fill=(0.0,), rounding="round",
                   dtype=None):
    h, w, c = img.shape
    ch, cw = crop
    conv = (lambda v: np.floor(v + 0.5) if v >= 0 else -np.floor(-v + 0.5)) if rounding == "round" else np.trunc
    # The position as a float32, as DALI takes it: truncate(0.7 * 10) is 7, but 6 this way.
    y, x = int(conv(float(np.float32(pos[0])) * (h - ch))), int(conv(float(np.float32(pos[1])) * (w - cw)))
    if policy == "trim_to_shape":
        y0, x0 = max(y, 0), max(x, 0)
        ch, cw, y, x = min(y + ch, h) - y0, min(x + cw, w) - x0, y0, x0
    out_type = dtype or img.dtype
    out = np.empty((ch, cw, c), out_type)
    out[:] = np.trunc(np.asarray(fill, np.float64)) if np.issubdtype(out_type, np.integer) else fill
    ys, xs = slice(max(y, 0), min(y + ch, h)), slice(max(x, 0), min(x + cw, w))
    out[ys.start - y:ys.stop - y, xs.start - x:xs.stop - x] = img[ys, xs]
    return out


CROP_CASES = {
    "center": (dict(crop=(1, 1)), dict(crop=(1, 1))),
    "pos_truncate": (dict(crop=(1, 1), crop_pos_x=0.3, crop_pos_y=0.7, rounding="truncate"),
                     dict(crop=(1, 1), pos=(0.7, 0.3), rounding="truncate")),
    "pad": (dict(crop_h=20, crop_w=30, out_of_bounds_policy="pad", fill_values=[3.7, 7.0, 250.0]),
            dict(crop=(20, 30), policy="pad", fill=(3.7, 7.0, 250.0))),
    "trim": (dict(crop=(20, 30), out_of_bounds_policy="trim_to_shape", crop_pos_x=1.0),
             dict(crop=(20, 30), policy="trim_to_shape", pos=(0.5, 1.0))),
    "float_out": (dict(crop=(4.6, 5.5), out_of_bounds_policy="pad", dtype=types.FLOAT),
                  dict(crop=(4, 5), policy="pad", dtype=np.float32)),
}


@pytest.mark.parametrize("case", list(CROP_CASES))
def test_crop_against_reference(case):
    kwargs, ref = CROP_CASES[case]
    got, layout = run(torchdali, "crop", **kwargs)
    assert layout == "HWC"
    assert_batches_equal(got, [crop_reference(im, **ref) for im in IMAGES])


def test_crop_per_sample_sizes_chw_and_types():
    hs = [np.float32(v) for v in (3, 1, 9, 3)]
    got, _ = run(torchdali, "crop", arg_inputs=dict(crop_h=hs), crop_w=1.0)
    assert_batches_equal(got, [crop_reference(im, (int(h), 1)) for im, h in zip(IMAGES, hs)])
    for dtype in (np.float16, np.float32):
        images = as_type(IMAGES, dtype)
        chw = [im.transpose(2, 0, 1) for im in images]
        got, layout = run(torchdali, "crop", chw, layout="CHW", crop=(1, 1))
        assert layout == "CHW"
        assert_batches_equal(got, [crop_reference(im, (1, 1)).transpose(2, 0, 1) for im in images])


def test_crop_errors():
    with pytest.raises(ValueError, match="outside"):
        run(torchdali, "crop", crop=(5, 5))
    with pytest.raises(TypeError, match="not supported"):
        run(torchdali, "crop", [im.astype(np.float64) for im in IMAGES], crop=(1, 1))
    with pytest.raises(ValueError, match="rounding"):
        run(torchdali, "crop", crop=(1, 1), rounding="floor")


LABELS = [RNG.integers(-5, 2 ** 20, (h, w, 2)).astype(np.int64) for h, w in SIZES]


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
@pytest.mark.parametrize("case", ["center", "pad", "trim", "float_out"])
def test_crop_label_maps_of_any_integer_type(dtype, case):
    """Masks and label maps (integer images) are cut as they are: every value kept, HWC and
    CHW, one size or several, inside the images or padded."""
    kwargs, ref = CROP_CASES[case]
    kwargs = {k: v for k, v in kwargs.items() if k != "fill_values"}
    ref = {k: v for k, v in ref.items() if k != "fill"}
    labels = [im.astype(dtype) for im in LABELS]
    got, _ = run(torchdali, "crop", labels, **kwargs)
    assert_batches_equal(got, [crop_reference(im, **ref) for im in labels])
    chw = [im.transpose(2, 0, 1) for im in labels]
    got, layout = run(torchdali, "crop", chw, layout="CHW", **kwargs)
    assert layout == "CHW"
    assert_batches_equal(got, [crop_reference(im, **ref).transpose(2, 0, 1) for im in labels])
    same = [labels[0]] * 3  # a dense batch: one gather
    got, _ = run(torchdali, "crop", same, **kwargs)
    assert_batches_equal(got, [crop_reference(im, **ref) for im in same])


@requires_cuda
def test_crop_label_maps_on_the_gpu_equal_the_cpu():
    labels = [im.astype(np.int32) for im in LABELS]
    for kwargs in (dict(crop=(3, 4), out_of_bounds_policy="trim_to_shape"),
                   dict(crop=(20, 30), out_of_bounds_policy="pad", fill_values=[9, -3])):
        assert_batches_equal(run_operator(torchdali, "crop", labels, device="gpu", **kwargs)[0],
                             run(torchdali, "crop", labels, **kwargs)[0])


def test_crop_label_maps_match_dali():
    dali = dali_or_skip()
    for dtype in (np.int16, np.int32, np.int64):
        labels = [im.astype(dtype) for im in LABELS]
        for kwargs in (dict(crop=(3, 4), crop_pos_x=0.3, out_of_bounds_policy="trim_to_shape"),
                       dict(crop=(20, 30), out_of_bounds_policy="pad", fill_values=[9, -3])):
            ours, _ = run(torchdali, "crop", labels, **kwargs)
            theirs, _ = run(dali, "crop", labels, **kwargs)
            assert_batches_equal(ours, theirs)


# --- transpose ---

def test_transpose_layouts():
    got, layout = run(torchdali, "transpose", perm=[2, 0, 1])
    assert layout == "CHW"
    assert_batches_equal(got, [im.transpose(2, 0, 1) for im in IMAGES])
    got, layout = run(torchdali, "transpose")  # reversed dims
    assert layout == "CWH"
    assert_batches_equal(got, [im.transpose(2, 1, 0) for im in IMAGES])
    assert run(torchdali, "transpose", perm=[1, 0, 2], transpose_layout=False)[1] == "HWC"
    assert run(torchdali, "transpose", perm=[1, 0, 2], output_layout="ABC")[1] == "ABC"
    floats = as_type(IMAGES, np.float16)
    got, _ = run(torchdali, "transpose", floats, perm=[1, 2, 0])
    assert_batches_equal(got, [im.transpose(1, 2, 0) for im in floats])


def test_transpose_bad_perm():
    with pytest.raises(ValueError, match="permutation"):
        run(torchdali, "transpose", perm=[0, 1])
    with pytest.raises(ValueError, match="permutation"):
        run(torchdali, "transpose", perm=[0, 1, 1])


# --- pad ---

ROWS = [np.array([3, 4, 2, 5, 4], np.int32), np.array([2, 2], np.int32), np.array([3, 199, 5], np.int32)]


def test_pad_dali_documented_examples():
    got, _ = run(torchdali, "pad", ROWS, layout="", fill_value=-1, axes=(0,))
    assert [g.tolist() for g in got] == [[3, 4, 2, 5, 4], [2, 2, -1, -1, -1], [3, 199, 5, -1, -1]]
    got, _ = run(torchdali, "pad", ROWS, layout="", fill_value=-1, axes=(0,), align=(4,))
    assert [len(g) for g in got] == [8, 8, 8]
    got, _ = run(torchdali, "pad", ROWS, layout="", fill_value=-1, axes=(0,), shape=(1,), align=(2,))
    assert [g.tolist() for g in got] == [[3, 4, 2, 5, 4, -1], [2, 2], [3, 199, 5, -1]]
    mats = [np.array([[1, 2, 3], [4, 5, 6]], np.int32), np.array([[1, 2], [4, 5], [6, 7]], np.int32)]
    got, _ = run(torchdali, "pad", mats, layout="", axes=(0, 1), align=(1, 2), shape=(4, -1))
    assert [g.tolist() for g in got] == [[[1, 2, 3, 0], [4, 5, 6, 0], [0] * 4, [0] * 4],
                                         [[1, 2, 0, 0], [4, 5, 0, 0], [6, 7, 0, 0], [0] * 4]]


def test_pad_images_dense_and_fill():
    got, layout = run(torchdali, "pad", fill_value=2.5)
    assert layout == "HWC"
    for g, im in zip(got, IMAGES):
        assert g.shape == (31, 23, 3)
        np.testing.assert_array_equal(g[:im.shape[0], :im.shape[1]], im)
        assert (g[im.shape[0]:] == 2).all() and (g[:, im.shape[1]:] == 2).all()
    got, _ = run(torchdali, "pad", axis_names="W", arg_inputs=dict(fill_value=[np.float32(k) for k in range(4)]))
    for k, (g, im) in enumerate(zip(got, IMAGES)):
        assert g.shape == (im.shape[0], 23, 3) and (g[:, im.shape[1]:] == k).all()


def test_pad_per_sample_shape_and_align_and_a_dense_batch():
    """shape/align as argument inputs (one row per sample), and a batch of one shape padded
    as a whole."""
    same = [np.full((2, 3, 1), k + 1, np.uint8) for k in range(3)]
    shapes = [np.int32([4, -1]), np.int32([1, 5]), np.int32([3, 3])]
    got, _ = run(torchdali, "pad", same, axes=(0, 1), arg_inputs=dict(shape=shapes))
    assert [g.shape for g in got] == [(4, 3, 1), (2, 5, 1), (3, 3, 1)]
    got, _ = run(torchdali, "pad", same, axes=(0, 1), align=(3, 2),
                 arg_inputs=dict(shape=[np.int32([4, 4])] * 3))
    assert [g.shape for g in got] == [(6, 4, 1)] * 3
    for k, g in enumerate(got):
        assert (g[:2, :3] == k + 1).all() and g.sum() == 6 * (k + 1)
    got, _ = run(torchdali, "pad", same, axes=(1,), shape=(5,), fill_value=9)
    assert all(g.shape == (2, 5, 1) and (g[:, 3:] == 9).all() and (g[:, :3] == k + 1).all()
               for k, g in enumerate(got))


def test_pad_errors():
    with pytest.raises(ValueError, match="out of range"):
        run(torchdali, "pad", axes=[3])
    with pytest.raises(ValueError, match="not both"):
        run(torchdali, "pad", axes=[0], axis_names="H")
    with pytest.raises(ValueError, match="not in the input layout"):
        run(torchdali, "pad", axis_names="D")
    with pytest.raises(ValueError, match="positive"):
        run(torchdali, "pad", align=[0])
    with pytest.raises(ValueError, match="shape"):
        run(torchdali, "pad", axes=[0, 1], shape=[4])


# --- against NVIDIA DALI ---

DALI_CASES = [
    ("flip", {}, dict(arg_inputs=dict(horizontal=FLAGS, vertical=FLAGS2))),
    ("flip_chw", {}, dict(layout="CHW", horizontal=0, vertical=1)),
    ("flip_float", {"dtype": np.float32}, dict(vertical=1)),
    ("crop", {}, dict(crop=(1, 1), crop_pos_x=0.3)),
    ("crop_pad", {}, dict(crop=(20, 30), out_of_bounds_policy="pad", fill_values=[3.7, 7.0, 250.0])),
    ("crop_trim", {}, dict(crop=(20, 30), out_of_bounds_policy="trim_to_shape", rounding="truncate",
                           crop_pos_y=0.3)),
    ("crop_sizes", {}, dict(crop=(4.6, 5.5), out_of_bounds_policy="pad", dtype=types.FLOAT)),
    # Anchors on float64 ties: 0.7 * 15 rows is 10.5 (11), and 0.7 * 30 rows truncates to 21, but
    # DALI takes the position as a float32: row 10, row 20.
    ("crop_ties", {}, dict(crop=(2, 2), crop_pos_x=0.7, crop_pos_y=0.7, out_of_bounds_policy="pad")),
    ("crop_ties_truncate", {}, dict(crop=(1, 1), crop_pos_x=0.7, crop_pos_y=0.7, rounding="truncate")),
    ("crop_chw_f16", {"dtype": np.float16}, dict(layout="CHW", crop=(3, 1), out_of_bounds_policy="pad")),
    ("transpose", {}, dict(perm=[2, 0, 1])),
    ("transpose_default", {"dtype": np.float32}, dict()),
    ("pad", {}, dict(fill_value=2.5)),
    ("pad_w_align", {}, dict(axis_names="W", shape=[4], align=[4])),
    ("pad_per_sample", {}, dict(axes=[0], arg_inputs=dict(
        shape=[np.array([v], np.int32) for v in (40, 3, 1, 20)],
        align=[np.array([v], np.int32) for v in (4, 3, 1, 7)]))),
]


@pytest.mark.parametrize("name, data, kwargs", DALI_CASES, ids=[c[0] for c in DALI_CASES])
def test_against_dali(name, data, kwargs):
    dali = dali_or_skip()
    images = as_type(IMAGES, data["dtype"]) if "dtype" in data else IMAGES
    if kwargs.get("layout") == "CHW":
        images = [im.transpose(2, 0, 1) for im in images]
    op = name.split("_")[0]
    got, got_layout = run(torchdali, op, images, **kwargs)
    want, want_layout = run(dali, op, images, **kwargs)
    assert got_layout == want_layout
    assert_batches_equal(got, want)


@requires_cuda
@pytest.mark.parametrize("name, data, kwargs", DALI_CASES, ids=[c[0] for c in DALI_CASES])
def test_gpu_matches_cpu(name, data, kwargs):
    images = as_type(IMAGES, data["dtype"]) if "dtype" in data else IMAGES
    if kwargs.get("layout") == "CHW":
        images = [im.transpose(2, 0, 1) for im in images]
    op = name.split("_")[0]
    got, got_layout = run(torchdali, op, images, device="gpu", **kwargs)
    want, want_layout = run(torchdali, op, images, **kwargs)
    assert got_layout == want_layout
    assert_batches_equal(got, want)


def test_pad_fill_value_cast_as_dali():
    """Out-of-range fills wrap the way DALI's cast does (-3.7 -> 253, 300 -> 44 in uint8)."""
    images = [np.ones((2, 3, 1), np.uint8), np.ones((3, 2, 1), np.uint8)]
    for fill, expected in ((-3.7, 253), (300.0, 44), (7.9, 7)):
        got, _ = run(torchdali, "pad", images, fill_value=fill)
        assert (got[0][2] == expected).all() and (got[0][:2] == 1).all()


@pytest.mark.parametrize("op, kwargs", [("flip", dict(horizontal=1, vertical=1)),
                                        ("transpose", dict(perm=[2, 0, 1])),
                                        ("brightness_contrast", dict(brightness=1.5, contrast=0.7))])
def test_dense_batch_stays_one_tensor(op, kwargs):
    """A dense input batch gives a dense output batch (no stacking copy later), with the
    values of the per-sample path."""
    dense = RNG.integers(0, 256, (4, 9, 14, 3), dtype=np.uint8)

    @torchdali.pipeline_def(batch_size=4, num_threads=2, device_id=None)
    def pipe():
        x = torchdali.fn.external_source(lambda: dense, layout="HWC")
        return getattr(torchdali.fn, op)(x, **kwargs)

    p = pipe()
    p.build()
    out = p.run()[0]
    assert_one_buffer(out)
    listed, _ = run(torchdali, op, list(dense), **kwargs)
    assert_batches_equal(as_numpy_batch(out), listed)
