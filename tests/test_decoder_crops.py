"""decoders.image_crop, image_random_crop and image_slice: against decoders.image followed
by a NumPy crop, against DALI's CPU decoders where installed (bit-exact windows), and the
decoder's error and skip behaviour."""
import math
import re

import numpy as np
import pytest
from PIL import Image

import torchdali
from torchdali import schema

from conftest import as_numpy_batch, constant_source, dali_or_skip, requires_cuda

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")
pytestmark = pytest.mark.usefixtures("cpu_jpeg_decoder")  # every test with either CPU JPEG path

# (height, width, EXIF orientation, format): odd sizes, a rotated JPEG (the window must be
# taken on the upright image), a PNG whose pixels encode their coordinates.
FILES = [(37, 50, 1, "jpg"), (40, 29, 6, "jpg"), (61, 45, 1, "png"), (23, 64, 8, "jpg"), (48, 48, 1, "jpg")]


def coordinates_image(h, w):
    """Pixels (x, y, x ^ y): lossless formats tell where each pixel came from."""
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([xx, yy, xx ^ yy], -1).astype(np.uint8)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoder_crops")
    paths = []
    for k, (h, w, orientation, fmt) in enumerate(FILES):
        img = Image.fromarray(coordinates_image(h, w))
        path = str(root / f"img{k}.{fmt}")
        exif = Image.Exif()
        if orientation != 1:
            exif[0x0112] = orientation
        img.save(path, quality=95, exif=exif) if fmt == "jpg" else img.save(path)
        paths.append(path)
    (root / "broken.jpg").write_bytes(open(paths[0], "rb").read()[:200])
    return paths, str(root / "broken.jpg")


def run(lib, op, paths, inputs=(), arg_inputs=None, device="cpu", with_full=False, seed=7, **kwargs):
    """One iteration of fn.decoders.<op> over `paths` (and decoders.image if with_full)."""
    @lib.pipeline_def(batch_size=len(paths), num_threads=2, device_id=None if device == "cpu" else 0,
                      seed=seed)
    def pipe():
        data, _ = lib.fn.readers.file(files=list(paths))
        extra = [lib.fn.external_source(constant_source(v)) for v in inputs]
        named = {k: lib.fn.external_source(constant_source(v)) for k, v in (arg_inputs or {}).items()}
        out = getattr(lib.fn.decoders, op)(data, *extra, device=device, **kwargs, **named)
        return (out, lib.fn.decoders.image(data, device=device)) if with_full else out

    p = pipe()
    p.build()
    outs = p.run()
    return [as_numpy_batch(o) for o in outs]


def assert_batches_equal(got, expected):
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape and g.dtype == e.dtype, f"sample {i}: {g.shape} {g.dtype} vs {e.shape} {e.dtype}"
        np.testing.assert_array_equal(g, e, err_msg=f"sample {i}")


def round_half_away(v):
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def numpy_crop(img, ch, cw, px=0.5, py=0.5, rounding="round"):
    h, w = img.shape[:2]
    ch, cw = int(ch), int(cw)
    r = round_half_away if rounding == "round" else math.trunc
    # DALI takes the position as a float32: 0.53 * 50 is 26.5, float32(0.53) * 50 is 26.4999988.
    y, x = r(float(F32(py)) * (h - ch)), r(float(F32(px)) * (w - cw))
    return img[y:y + ch, x:x + cw]


F32 = np.float32
POS_X = [F32(v) for v in (0.0, 0.3, 1.0, 0.5, 0.75)]
POS_Y = [F32(v) for v in (0.9, 0.5, 0.2, 0.0, 1.0)]
TIES_X = [F32(v) for v in (0.9, 0.9, 0.35, 0.5, 0.7)]
TIES_Y = [F32(v) for v in (0.5, 0.5, 0.53, 0.5, 0.5)]
CROP_CASES = [
    # name, kwargs, argument inputs, expected window as (crop_h, crop_w, pos_x, pos_y, rounding) per sample
    ("center", dict(crop=(20, 11)), {}, lambda i: (20, 11, 0.5, 0.5, "round")),
    ("positions", dict(crop=(20, 11), crop_pos_x=0.3, crop_pos_y=0.8), {}, lambda i: (20, 11, 0.3, 0.8, "round")),
    ("fractional_size", dict(crop=(20.7, 11.5), crop_pos_x=0.3), {}, lambda i: (20, 11, 0.3, 0.5, "round")),
    ("crop_h_w", dict(crop_h=15, crop_w=22), {}, lambda i: (15, 22, 0.5, 0.5, "round")),
    ("truncate", dict(crop=(20, 11), crop_pos_x=0.3, crop_pos_y=0.8, rounding="truncate"), {},
     lambda i: (20, 11, 0.3, 0.8, "truncate")),
    ("per_sample", dict(crop=(21, 13)), dict(crop_pos_x=POS_X, crop_pos_y=POS_Y),
     lambda i: (21, 13, POS_X[i], POS_Y[i], "round")),
    # Anchors on a float64 tie: sample 2's 0.53 * 50 and sample 0's 0.9 * 45 are 26.5 and
    # 40.5, but a float32 position makes them 26 and 40 (float64 would give 27 and 41).
    ("float32_anchor_ties", dict(crop=(11, 5), crop_pos_x=0.9, crop_pos_y=0.53), {},
     lambda i: (11, 5, 0.9, 0.53, "round")),
    ("float32_anchor_ties_per_sample", dict(crop=(11, 5)), dict(crop_pos_x=TIES_X, crop_pos_y=TIES_Y),
     lambda i: (11, 5, TIES_X[i], TIES_Y[i], "round")),
]


@pytest.mark.parametrize("case", CROP_CASES, ids=[c[0] for c in CROP_CASES])
def test_image_crop_is_decode_then_crop(files, case):
    _, kwargs, arg_inputs, window = case
    got, full = run(torchdali, "image_crop", files[0], arg_inputs=arg_inputs, with_full=True, **kwargs)
    expected = [numpy_crop(im, *window(i)) for i, im in enumerate(full)]
    assert_batches_equal(got, expected)
    assert full[1].shape == (29, 40, 3)  # EXIF 6: the window was cut from the upright image


@pytest.mark.parametrize("case", CROP_CASES, ids=[c[0] for c in CROP_CASES])
def test_image_crop_matches_dali(files, case):
    dali = dali_or_skip()
    _, kwargs, arg_inputs, _ = case
    expected = run(dali, "image_crop", files[0], arg_inputs=arg_inputs, **kwargs)[0]
    got = run(torchdali, "image_crop", files[0], arg_inputs=arg_inputs, **kwargs)[0]
    assert_batches_equal(got, expected)


REL_START = [np.array(v, F32) for v in ((0.1, 0.2), (0.35, 0.15), (0.0, 0.5), (0.25, 0.45), (0.5, 0.5))]
REL_SHAPE = [np.array(v, F32) for v in ((0.5, 0.4), (0.5, 0.7), (1.0, 0.5), (0.7, 0.5), (0.25, 0.5))]
SLICE_CASES = [
    ("rel_args", (), {}, dict(rel_start=(0.1, 0.2), rel_shape=(0.5, 0.4))),
    ("start_end", (), {}, dict(start=(3, 2), end=(20, 22))),
    ("axes_h", (), {}, dict(start=[3], shape=[10], axes=[0])),
    ("axis_names_hw", (), {}, dict(rel_start=(0.2, 0.1), rel_end=(0.8, 0.45), axis_names="HW")),
    ("positional", (REL_START, REL_SHAPE), {}, {}),
    ("positional_absolute", ([np.array((3, 2), np.int32)] * 5, [np.array((11, 7), np.int32)] * 5), {}, {}),
    ("argument_inputs", (), dict(rel_start=REL_START, rel_shape=REL_SHAPE), {}),
]


@pytest.mark.parametrize("case", SLICE_CASES, ids=[c[0] for c in SLICE_CASES])
def test_image_slice_is_decode_then_slice(files, case):
    _, inputs, arg_inputs, kwargs = case
    got, full = run(torchdali, "image_slice", files[0], inputs=inputs, arg_inputs=arg_inputs, with_full=True,
                    **kwargs)

    @torchdali.pipeline_def(batch_size=len(full), num_threads=1, device_id=None)
    def pipe():
        x = torchdali.fn.external_source(constant_source(full), layout="HWC")
        extra = [torchdali.fn.external_source(constant_source(v)) for v in inputs]
        named = {k: torchdali.fn.external_source(constant_source(v)) for k, v in arg_inputs.items()}
        return torchdali.fn.slice(x, *extra, **kwargs, **named)

    p = pipe()
    p.build()
    assert_batches_equal(got, as_numpy_batch(p.run()[0]))


@pytest.mark.parametrize("case", SLICE_CASES, ids=[c[0] for c in SLICE_CASES])
def test_image_slice_matches_dali(files, case):
    dali = dali_or_skip()
    _, inputs, arg_inputs, kwargs = case
    expected = run(dali, "image_slice", files[0], inputs=inputs, arg_inputs=arg_inputs, **kwargs)[0]
    got = run(torchdali, "image_slice", files[0], inputs=inputs, arg_inputs=arg_inputs, **kwargs)[0]
    assert_batches_equal(got, expected)


# --- random crop ------------------------------------------------------------------------

def check_random_window(crop, full, area=(0.08, 1.0), aspect=(0.75, 4 / 3)):
    """The crop is a window of `full` whose area and aspect ratio DALI's generator allows
    (up to the rounding of the sides), or its fallback: the whole image shrunk to the
    largest allowed area within the aspect range."""
    h, w = full.shape[:2]
    ch, cw = crop.shape[:2]
    assert 1 <= ch <= h and 1 <= cw <= w
    fallback_ok = abs(cw / ch - w / h) < 0.15 or ch == h or cw == w
    frac, ratio = ch * cw / (h * w), cw / ch
    slack_area = (ch + cw + 1) / (h * w)  # one pixel of rounding on each side
    slack_ratio = ratio * (1 / min(ch, cw))
    in_range = (area[0] - slack_area <= frac <= area[1] + slack_area and
                aspect[0] - slack_ratio <= ratio <= aspect[1] + slack_ratio)
    assert in_range or fallback_ok, (crop.shape, full.shape)
    return in_range


def test_the_usual_batch_comes_out_in_one_buffer(files, cpu_jpeg_decoder):
    """Upright JPEGs, all decoded by our engine: the batch is its one output buffer, which
    flat() gives back without a copy (decoded one by one and cut, it is a list of crops)."""
    paths = [p for p, (_, _, orientation, fmt) in zip(files[0], FILES) if fmt == "jpg" and orientation == 1]

    @torchdali.pipeline_def(batch_size=len(paths), num_threads=2, device_id=None, seed=3)
    def pipe():
        data, _ = torchdali.fn.readers.file(files=paths)
        return torchdali.fn.decoders.image_random_crop(data), torchdali.fn.decoders.image(data)

    crops, full = pipe().run()
    flat, shapes = crops.flat()
    assert (flat.data_ptr() == crops.as_torch_list()[0].data_ptr()) == (cpu_jpeg_decoder == "batched")
    assert shapes.tolist() == crops.shape()
    for crop, img in zip(as_numpy_batch(crops), as_numpy_batch(full)):
        check_random_window(crop, img)
    assert [crops[i].source_info() for i in range(len(paths))] == paths


@pytest.mark.parametrize("area, aspect", [((0.08, 1.0), (0.75, 4 / 3)), ((0.5, 0.5), (1.0, 1.0)),
                                          ((0.2, 0.6), (0.5, 2.0))])
def test_image_random_crop_windows(files, area, aspect):
    paths = files[0] * 4
    got, full = run(torchdali, "image_random_crop", paths, with_full=True, random_area=list(area),
                    random_aspect_ratio=list(aspect))
    in_range = [check_random_window(crop, img, area, aspect) for crop, img in zip(got, full)]
    assert sum(in_range) >= len(in_range) // 2  # the fallback is the exception
    png = [(c, f) for c, f, p in zip(got, full, paths) if p.endswith(".png")]
    for crop, img in png:  # lossless: the pixel values say where the window is
        x, y = int(crop[0, 0, 0]), int(crop[0, 0, 1])
        np.testing.assert_array_equal(crop, img[y:y + crop.shape[0], x:x + crop.shape[1]])
    try:
        dali = dali_or_skip()
    except pytest.skip.Exception:
        return
    theirs, full = run(dali, "image_random_crop", paths, with_full=True, random_area=list(area),
                       random_aspect_ratio=list(aspect))
    for crop, img in zip(theirs, full):  # the checker accepts DALI's own windows
        check_random_window(crop, img, area, aspect)


def test_image_random_crop_is_deterministic_by_seed(files):
    paths = files[0] * 3
    a = run(torchdali, "image_random_crop", paths, seed=11)[0]
    b = run(torchdali, "image_random_crop", paths, seed=11)[0]
    c = run(torchdali, "image_random_crop", paths, seed=12)[0]
    assert_batches_equal(a, b)
    assert [x.shape for x in a] != [x.shape for x in c]


# --- arguments, aliases, errors -----------------------------------------------------------

@pytest.mark.parametrize("name, dali_name, alias", [
    ("decoders.image_crop", "decoders__ImageCrop", "ImageDecoderCrop"),
    ("decoders.image_random_crop", "decoders__ImageRandomCrop", "ImageDecoderRandomCrop"),
    ("decoders.image_slice", "decoders__ImageSlice", "ImageDecoderSlice"),
])
def test_dali_arguments_and_legacy_names(files, name, dali_name, alias):
    sch = schema.get(name)
    assert alias in sch.class_names and sch.devices == ("cpu", "mixed")
    assert set(schema.get("decoders.image").args) <= set(sch.args)
    try:
        import nvidia.dali.backend as dali_backend
        names = set(dali_backend.GetSchema(dali_name).GetArgumentNames())
    except ImportError:
        names = set()
    assert not names - set(sch.args) - set(sch.deprecated_args)

    @torchdali.pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=3)
    def pipe():
        data, _ = torchdali.fn.readers.file(files=files[0][:2])
        kwargs = dict(crop=(10, 10)) if name.endswith("crop") and "random" not in name else \
            dict(rel_shape=(0.5, 0.5)) if name.endswith("slice") else {}
        return getattr(torchdali.ops, alias)(**kwargs)(data)

    p = pipe()
    p.build()
    assert len(p.run()[0]) == 2


@pytest.mark.parametrize("op, kwargs, words", [
    ("image_crop", dict(crop=(60, 11)), ["decoders.image_crop", "outside", "37x50"]),
    ("image_crop", dict(crop=(-1, 11)), ["decoders.image_crop", "'crop'", "positive"]),
    ("image_slice", dict(start=(-3, 2), shape=(10, 10)), ["decoders.image_slice", "outside"]),
    ("image_slice", dict(start=[1], shape=[1], axes=[2]), ["decoders.image_slice", "axes", "2 dims"]),
    ("image_slice", dict(rel_start=(0.1, float("nan")), rel_shape=(0.5, 0.5)), ["decoders.image_slice", "anchor"]),
    ("image_slice", dict(start=(1, 2, 3), shape=(1, 1, 1)), ["'start' has 3 values for 2 slice axes"]),
    ("image_slice", {}, ["decoders.image_slice", "anchor and shape inputs"]),
    ("image_random_crop", dict(random_area=(0.5, 0.1)), ["random_area", "min <= max"]),
])
def test_bad_arguments_name_the_operator(files, op, kwargs, words):
    with pytest.raises((ValueError, TypeError)) as info:
        run(torchdali, op, files[0], **kwargs)
    for w in words:
        assert w in str(info.value), f"{w!r} not in {info.value}"


@pytest.mark.parametrize("op, kwargs", [("image_crop", dict(crop=(10, 10))), ("image_random_crop", {}),
                                        ("image_slice", dict(rel_shape=(0.5, 0.5)))])
def test_bad_file_is_named_and_skip_keeps_arguments_aligned(files, op, kwargs):
    paths, broken = files
    batch = [paths[0], broken, paths[2]]
    with pytest.raises(RuntimeError, match=rf"decoders.{op} \('.*'\): cannot decode {re.escape(broken)}"):
        run(torchdali, op, batch, **kwargs)
    if op != "image_crop":
        return
    pos = [F32(0.0), F32(0.5), F32(1.0)]
    with pytest.warns(UserWarning, match=r"decoders.image_crop: skipped 1 undecodable sample"):
        got, = run(torchdali, op, batch, arg_inputs=dict(crop_pos_x=pos), on_error="skip", **kwargs)
    full = [run(torchdali, "image_crop", [p], crop=(10, 10), crop_pos_x=x)[0][0] for p, x in
            ((paths[0], 0.0), (paths[2], 1.0))]
    assert_batches_equal(got, full)  # sample 2 kept its own crop_pos_x after sample 1 left


# --- 'mixed': the fused operator equals decoders.image + the crop on the GPU -------------

@requires_cuda
@pytest.mark.parametrize("op, kwargs, inputs", [
    ("image_crop", dict(crop=(20, 11), crop_pos_x=0.3), ()),
    ("image_slice", {}, (REL_START, REL_SHAPE)),
])
def test_mixed_fusions_match_gpu_decode_then_crop(files, op, kwargs, inputs):
    got, full = run(torchdali, op, files[0], inputs=inputs, device="mixed", with_full=True, **kwargs)
    cpu_got, cpu_full = run(torchdali, op, files[0], inputs=inputs, with_full=True, **kwargs)
    assert [g.shape for g in got] == [g.shape for g in cpu_got]
    if op == "image_crop":
        # 'mixed' decodes only the window (where our GPU decoder is built): its chroma is
        # upsampled from the window's own samples, a level or two off at places.
        for g, want in zip(got, [numpy_crop(im, 20, 11, 0.3) for im in full]):
            diff = np.abs(g.astype(np.int64) - want)
            assert g.shape == want.shape and diff.max() <= 3 and diff.mean() <= 0.25


@requires_cuda
def test_mixed_random_crop_windows(files):
    got, full = run(torchdali, "image_random_crop", files[0], device="mixed", with_full=True)
    for crop, img in zip(got, full):
        check_random_window(crop, img)
