"""constant, full/ones/zeros (and *_like), one_hot, cast_like, copy, get_property and peek_image_shape,
compared with DALI on the CPU."""
import io
import os
import warnings

import numpy as np
import pytest
from PIL import Image

import torchdali
from torchdali import types
from conftest import as_numpy_batch, assert_batches_equal, constant_source, dali_or_skip, requires_cuda

RNG = np.random.default_rng(7)


def outputs(lib, graph, batch_size=3, device="cpu"):
    """One iteration of a pipeline whose graph is graph(lib, source): source(samples, layout="") feeds
    a per-sample list through external_source (moved to the GPU for device="gpu"). Returns the outputs
    as (list of NumPy samples, layout) pairs."""
    def source(samples, layout=""):
        samples = [np.require(s, requirements="C") for s in samples]  # keeps 0-d samples 0-d
        node = lib.fn.external_source(constant_source(samples), layout=layout)
        return node.gpu() if device == "gpu" else node

    @lib.pipeline_def(batch_size=batch_size, num_threads=2, device_id=None if device == "cpu" else 0, seed=3)
    def pipe():
        out = graph(lib, source)
        return out if isinstance(out, tuple) else (out,)

    p = pipe()
    p.build()
    return [(as_numpy_batch(o), o.layout()) for o in p.run()]


def assert_same_as_dali(graph, batch_size=3):
    dali = dali_or_skip()
    ours, theirs = outputs(torchdali, graph, batch_size), outputs(dali, graph, batch_size)
    assert len(ours) == len(theirs)
    for (got, got_layout), (expected, expected_layout) in zip(ours, theirs):
        assert_batches_equal(got, expected)
        assert got_layout == expected_layout
    return ours


def assert_both_refuse(graph, message, batch_size=3):
    """DALI refuses the graph, and so do we, with `message` and the operator's name."""
    dali = dali_or_skip()
    with pytest.raises(Exception):
        outputs(dali, graph, batch_size)
    with pytest.raises(Exception, match=message) as info:
        outputs(torchdali, graph, batch_size)
    return info.value


# --- full, zeros, ones and their *_like forms ----------------------------------------------

@pytest.mark.parametrize("fill, shape", [
    (np.float32(2.5), None), (np.float32(-1.25), [3, 5]), (np.array([1, 2, 3], np.int16), [2, 3]),
    (np.array([1, 2, 3], np.int16), None), (np.array([[1], [2]], np.uint8), [2, 3]),
    (np.array([1, 2, 3], np.int64), [2, 1]), (np.array([1, 2, 3], np.int32), [4, 1, 3]),
    (np.arange(6, dtype=np.float64).reshape(2, 3), [1, 3]), (np.arange(6, dtype=np.uint16).reshape(2, 3), [2, 1]),
    (np.arange(6, dtype=np.int8).reshape(2, 3), [3, 2, 3]), (np.array([[[4, 5, 6]]], np.int32), [2, 3]),
    (np.array([[1], [2]], np.int16), [2, 1, 3]), (np.array([[1], [2]], np.int16), [3]),
    (np.float32(7), [2, 0]), (np.zeros(0, np.int16), [2, 0]), (np.array([True, False]), [3, 2]),
    (np.array([0.5, np.inf, -7.5], np.float16), [2, 3])])
def test_full_broadcasts_as_dali(fill, shape):
    kwargs = {} if shape is None else {"shape": shape}
    assert_same_as_dali(lambda lib, src: lib.fn.full(fill, **kwargs))


def test_full_per_sample_fill_and_shape():
    fills = [np.array([[1.5, -2.0]], np.float32), np.array([[3]], np.float32), np.array([[7.0], [8.0]], np.float32)]
    shapes = [np.array([3, 2], np.int32), np.array([1, 4], np.int32), np.array([2, 5], np.int32)]
    assert_same_as_dali(lambda lib, src: lib.fn.full(src(fills), shape=src(shapes)))
    same = [np.array([2, 3], np.int32)] * 3
    rows = [RNG.random(3).astype(np.float32) for _ in range(3)]
    assert_same_as_dali(lambda lib, src: lib.fn.full(src(rows), shape=src(same), layout="HW"))


@pytest.mark.parametrize("op", ["zeros", "ones"])
@pytest.mark.parametrize("dtype", [None, types.UINT8, types.INT64, types.FLOAT16, types.FLOAT64, types.BOOL,
                                   types.UINT64])
def test_zeros_and_ones(op, dtype):
    kwargs = {} if dtype is None else {"dtype": dtype}
    assert_same_as_dali(lambda lib, src: (getattr(lib.fn, op)(**kwargs),
                                          getattr(lib.fn, op)(shape=[3, 1, 2], layout="HWC", **kwargs)))


def test_zeros_per_sample_shape():
    shapes = [np.array(2, np.int32), np.array(0, np.int32), np.array(5, np.int32)]
    assert_same_as_dali(lambda lib, src: lib.fn.ones(shape=src(shapes), dtype=types.INT16))
    shapes = [np.array([1, 2], np.int32), np.array([3, 1], np.int32), np.array([0, 4], np.int32)]
    assert_same_as_dali(lambda lib, src: lib.fn.zeros(shape=src(shapes), layout="XY"))


def _like_inputs():
    return [RNG.integers(0, 255, (5, 7, 3), dtype=np.uint8), np.zeros((1, 1, 3), np.uint8),
            RNG.integers(0, 255, (2, 9, 3), dtype=np.uint8)]


@pytest.mark.parametrize("dtype", [None, types.FLOAT, types.INT8])
def test_zeros_like_and_ones_like(dtype):
    kwargs = {} if dtype is None else {"dtype": dtype}
    assert_same_as_dali(lambda lib, src: (lib.fn.zeros_like(src(_like_inputs(), "HWC"), **kwargs),
                                          lib.fn.ones_like(src(_like_inputs(), "HWC"), **kwargs)))


@pytest.mark.parametrize("fill", [np.float32(300.7), np.float32(-3.5), np.float32(2.5), np.array([1, 2, 3], np.int32),
                                  np.array([[1.4, -7.6, 1e9]], np.float64)])
def test_full_like_converts_with_saturation(fill):
    assert_same_as_dali(lambda lib, src: lib.fn.full_like(src(_like_inputs(), "HWC"), fill))


def test_full_like_to_bool_rounds():
    fill = np.array([0.4, 0.5, -0.5, -0.49, np.nan, 1e-30, -2.0], np.float32)
    assert_same_as_dali(lambda lib, src: lib.fn.full_like(src([np.zeros((2, 7), np.bool_)] * 3), fill))


def test_full_like_per_sample_fill():
    data = [np.zeros((2, 3), np.int16), np.zeros((4, 1), np.int16), np.zeros((0, 3), np.int16)]
    fills = [np.array([1, 2, 3], np.float32), np.array([-9.5, 4, 5], np.float32), np.array([70000], np.float32)]
    assert_same_as_dali(lambda lib, src: lib.fn.full_like(src(data, "HW"), src(fills)))


def test_constant_value_errors():
    error = assert_both_refuse(lambda lib, src: lib.fn.full(np.array([1, 2, 3], np.int16), shape=[2, 4]),
                               r"full.*can't be broadcast")
    assert "sample 0" in str(error)
    assert_both_refuse(lambda lib, src: lib.fn.full(np.zeros(0, np.int16), shape=[2, 3]), "can't be broadcast")
    assert_both_refuse(lambda lib, src: lib.fn.full(np.float32(1), shape=[2, 3], layout="HWC"),
                       "full.*layout 'HWC' has 3 dimensions")
    assert_both_refuse(lambda lib, src: lib.fn.zeros(shape=[2, -1]), "zeros.*must not be negative")
    assert_both_refuse(lambda lib, src: lib.fn.ones(shape=src([np.array([1, 2], np.int32), np.array([3], np.int32),
                                                               np.array([1, 1], np.int32)])),
                       "ones.*different number of dimensions")
    assert_both_refuse(lambda lib, src: lib.fn.ones(shape=src([np.array([2], np.int32)] * 3), layout="HW"),
                       "ones.*layout 'HW'")
    with pytest.raises(ValueError, match="zeros.*not one of"):
        outputs(torchdali, lambda lib, src: lib.fn.zeros(dtype=types.STRING))
    # DALI never finishes filling a non-empty output from an empty fill value; we refuse it.
    with pytest.raises(ValueError, match="full.*fill value is empty"):
        outputs(torchdali, lambda lib, src: lib.fn.full(np.zeros(0, np.int16)))


# --- constant --------------------------------------------------------------------------

_INTEGER_TYPES = [types.UINT8, types.INT8, types.UINT16, types.INT16, types.UINT32, types.INT32, types.UINT64,
                  types.INT64]
_ALL_CONSTANT_TYPES = _INTEGER_TYPES + [types.FLOAT16, types.FLOAT, types.BOOL]


@pytest.mark.parametrize("kwargs", [
    dict(idata=5), dict(fdata=2.5), dict(idata=[1, 2, 3]), dict(fdata=[1.5, -2]), dict(idata=5, shape=[2, 3]),
    dict(idata=list(range(6)), shape=[2, 3]), dict(idata=[7], shape=[3, 1, 2]), dict(idata=5, shape=[]),
    dict(fdata=-0.25, shape=[]), dict(idata=5, shape=[0]), dict(idata=[5], shape=[2, 0]), dict(idata=[], shape=[0]),
    dict(fdata=[]), dict(idata=[1, 2, 3], shape=[1, 3, 1]), dict(idata=9, shape=4), dict(idata=[1, 2], layout="H"),
    dict(fdata=list(np.linspace(-3, 3, 30)), shape=[5, 3, 2], layout="HWC"), dict(idata=[1, 2], layout=""),
    dict(idata=[1, 2, 3, 4, 5, 6], shape=[3, 2], layout="XY", dtype=types.UINT16),
    dict(fdata=[True, 1.5]), dict(fdata=3), dict(idata=True), dict(idata=[2.7, -2.7, 1.0]),
    dict(idata=[2 ** 31, -2 ** 40]), dict(fdata=[1e40, -1e40, 0.1])])
def test_constant_matches_dali(kwargs):
    out = assert_same_as_dali(lambda lib, src: lib.fn.constant(**kwargs))
    assert all(np.array_equal(sample, out[0][0][0]) for sample in out[0][0])


@pytest.mark.parametrize("dtype", _ALL_CONSTANT_TYPES)
def test_constant_converts_float_data_as_dali(dtype):
    fdata = [np.nan, np.inf, -np.inf, 0.5, -0.5, 1.5, 2.5, -1.5, -2.5, 0.49999997, 1e30, -1e30, 1.8e19, 9.3e18,
             3e9, -3e9, 70000.7, 255.5, -128.5, 0.1]
    assert_same_as_dali(lambda lib, src: lib.fn.constant(fdata=fdata, dtype=dtype, shape=[4, 5], layout="AB"))


@pytest.mark.parametrize("dtype", _ALL_CONSTANT_TYPES)
def test_constant_converts_integer_data_as_dali(dtype):
    idata = [-2 ** 63, 2 ** 63 - 1, -1, 0, 1, 2 ** 31, -2 ** 31 - 1, 65539, 2 ** 40 + 1, 255, 256, -129]
    assert_same_as_dali(lambda lib, src: (lib.fn.constant(idata=idata, dtype=dtype),
                                          lib.fn.constant(idata=-3, dtype=dtype, shape=[2, 2])))


@pytest.mark.parametrize("batch_size", [1, 5])
def test_constant_is_the_same_every_iteration(batch_size):
    dali = dali_or_skip()

    def pipe(lib):
        @lib.pipeline_def(batch_size=batch_size, num_threads=1, device_id=None)
        def definition():
            return lib.ops.Constant(fdata=[0.5, 1.5, 2.5], dtype=types.INT32, shape=[3, 1], layout="HW")()

        p = definition()
        p.build()
        return [(as_numpy_batch(p.run()[0]), "") for _ in range(3)]

    ours, theirs = pipe(torchdali), pipe(dali)
    for (got, _), (expected, _) in zip(ours, theirs):
        assert_batches_equal(got, expected)
    assert len(ours[0][0]) == batch_size


@pytest.mark.parametrize("kwargs, message", [
    (dict(idata=1, fdata=1.0), "constant.*mutually exclusive"),
    (dict(), "constant.*either 'fdata' or 'idata'"),
    (dict(idata=[1, 2, 3], shape=[2, 3]), r"constant.*idata has 3 values.*shape \[2, 3\] \(6 elements\)"),
    (dict(fdata=[1.5, 2.5], shape=[3]), "constant.*fdata has 2 values"),
    (dict(idata=[1, 2, 3], shape=[]), "constant.*idata has 3 values"),
    (dict(idata=[], shape=[]), "constant.*idata has 0 values"),
    (dict(fdata=[], shape=[3]), "constant.*fdata has 0 values"),
    (dict(idata=[1, 2], layout="HW"), "constant.*layout 'HW' has 2 dimensions.*has 1"),
    (dict(idata=5, shape=[2, 2], layout="HWC"), "constant.*layout 'HWC'"),
    (dict(idata=5, shape=[2, -1]), "constant.*must not be negative"),
    (dict(idata=[1, 2], shape=[-1]), "constant.*must not be negative"),
    (dict(fdata=1.5, dtype=types.FLOAT64), "constant.*dtype.*not one of"),
    (dict(idata=1, dtype=types.STRING), "constant.*dtype.*not one of"),
    (dict(idata=[2 ** 63]), "constant.*does not fit in a 64-bit integer")])
def test_constant_errors(kwargs, message):
    assert_both_refuse(lambda lib, src: lib.fn.constant(**kwargs), message)


# --- one_hot ---------------------------------------------------------------------------

_CLASSES = [np.array([0, 2, 1], np.int32), np.array([3, -1, 4], np.int32), np.array([1], np.int32)]


@pytest.mark.parametrize("kwargs", [dict(num_classes=4), dict(num_classes=4, axis=0), dict(num_classes=4, axis=-1),
                                    dict(num_classes=4, axis=1, axis_name="C"), dict(num_classes=0),
                                    dict(num_classes=5, dtype=types.UINT8, on_value=300, off_value=-2.6),
                                    dict(num_classes=3, dtype=types.INT64, on_value=-7.9, off_value=4.2),
                                    dict(num_classes=3, dtype=types.UINT32, on_value=-1, off_value=2),
                                    dict(num_classes=3, dtype=types.FLOAT64, on_value=0.1)])
def test_one_hot_ragged_batch(kwargs):
    assert_same_as_dali(lambda lib, src: lib.fn.one_hot(src(_CLASSES, "X"), **kwargs))


@pytest.mark.parametrize("in_type", [np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int64, np.float32,
                                     np.float64])
@pytest.mark.parametrize("axis", [None, 0, 1, 2])
def test_one_hot_dense_batch(in_type, axis):
    data = [RNG.integers(-1, 6, (4, 5)).astype(in_type) for _ in range(3)]
    if np.dtype(in_type).kind == "f":
        data[0][0, :4] = [1.7, 2.5, -0.5, 5.99]
    kwargs = {} if axis is None else {"axis": axis}
    assert_same_as_dali(lambda lib, src: lib.fn.one_hot(src(data, "HW"), num_classes=5, axis_name="K", **kwargs))


def test_one_hot_scalars():
    scalars = [np.array(2, np.int64), np.array(0, np.int64), np.array(7, np.int64)]
    assert_same_as_dali(lambda lib, src: lib.fn.one_hot(src(scalars), num_classes=4))
    single = [np.array([[2]], np.int64), np.array([[0]], np.int64), np.array([[1]], np.int64)]
    # One element per sample: scalars (legacy) unless axis is given.
    assert_same_as_dali(lambda lib, src: (lib.fn.one_hot(src(single, "AB"), num_classes=4, axis_name="Z"),
                                          lib.fn.one_hot(src(single), num_classes=4, axis=0),
                                          lib.fn.one_hot(src(single), num_classes=4, axis=-1)))
    assert_same_as_dali(lambda lib, src: lib.fn.one_hot(src(scalars, ""), num_classes=3, axis=0, axis_name="C"))


def test_one_hot_empty_samples():
    assert_same_as_dali(lambda lib, src: (lib.fn.one_hot(src([np.zeros((2, 0), np.uint8)] * 3), num_classes=3, axis=1),
                                          lib.fn.one_hot(src([np.zeros(0, np.uint8)] * 3), num_classes=3)))


def test_one_hot_errors():
    assert_both_refuse(lambda lib, src: lib.fn.one_hot(src(_CLASSES), num_classes=4, axis=2),
                       "one_hot.*axis = 2 is out of range")
    assert_both_refuse(lambda lib, src: lib.fn.one_hot(src(_CLASSES), num_classes=4, axis=-2), "one_hot.*axis = -2")
    assert_both_refuse(lambda lib, src: lib.fn.one_hot(src(_CLASSES), num_classes=4, axis_name="C"),
                       "one_hot.*input layout of 1 dims")
    assert_both_refuse(lambda lib, src: lib.fn.one_hot(src(_CLASSES), num_classes=-2), "one_hot.*must not be negative")
    assert_both_refuse(lambda lib, src: lib.fn.one_hot(src(_CLASSES), num_classes=3, axis_name="AB"),
                       "one_hot.*single character")
    assert_both_refuse(lambda lib, src: lib.fn.one_hot(src([np.array([1, 0], np.bool_)] * 3), num_classes=3),
                       "one_hot.*input type BOOL is not supported")
    assert_both_refuse(lambda lib, src: lib.fn.one_hot(src(_CLASSES), num_classes=3, dtype=types.FLOAT16),
                       "one_hot.*not one of")


# --- cast_like, copy ---------------------------------------------------------------------

@pytest.mark.parametrize("like", [np.uint8, np.int16, np.float16, np.uint32, np.bool_, np.float64])
def test_cast_like(like):
    data = [np.array([1.5, -2.5, 300, 7e4, -0.49], np.float32), RNG.normal(0, 500, (3, 4)).astype(np.float32),
            np.zeros((0, 2), np.float32)]
    assert_same_as_dali(lambda lib, src: lib.fn.cast_like(src(data[:1] * 3, "X"), src([np.zeros(2, like)] * 3)))
    assert_same_as_dali(lambda lib, src: lib.fn.cast_like(src(data[1:], "HW"), src([np.zeros((), like)] * 2)),
                        batch_size=2)


def test_cast_like_integers_saturate():
    data = [np.array([-70000, 70000, 5], np.int64)] * 3
    assert_same_as_dali(lambda lib, src: lib.fn.cast_like(src(data), src([np.zeros(1, np.int16)] * 3)))


def test_copy():
    data = [RNG.normal(size=(3, 4)).astype(np.float32), np.zeros((0, 4), np.float32), np.ones((2, 2), np.float32)]
    assert_same_as_dali(lambda lib, src: lib.fn.copy(src(data, "HW")))
    dense = [RNG.integers(0, 9, (2, 5), dtype=np.uint8) for _ in range(3)]
    assert_same_as_dali(lambda lib, src: lib.fn.copy(src(dense, "XY")))


def test_copy_is_a_new_buffer():
    @torchdali.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        x = torchdali.fn.zeros(shape=[3], dtype=types.FLOAT)
        return x, torchdali.fn.copy(x)

    p = pipe()
    p.build()
    original, copied = p.run()
    assert original.as_torch_list()[0].data_ptr() != copied.as_torch_list()[0].data_ptr()
    np.testing.assert_array_equal(as_numpy_batch(copied), as_numpy_batch(original))


# --- get_property ------------------------------------------------------------------------

def _write_images(root):
    for k, (h, w) in enumerate([(5, 7), (9, 4), (3, 3)]):
        os.makedirs(os.path.join(root, "cls"), exist_ok=True)
        Image.fromarray(RNG.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(os.path.join(root, "cls", f"im{k}.jpg"))
    return str(root)


def test_get_property_of_files(tmp_path):
    root = _write_images(tmp_path)

    def graph(lib, src):
        files, labels = lib.fn.readers.file(file_root=root)
        images = lib.fn.decoders.image(files)
        return (lib.fn.get_property(files, key="source_info"), lib.fn.get_property(files, key="layout"),
                lib.fn.get_property(images, key="source_info"), lib.fn.get_property(images, key="layout"),
                lib.fn.get_property(labels, key="source_info"))

    ours = assert_same_as_dali(graph)
    assert bytes(ours[0][0][0]).decode() == os.path.join("cls", "im0.jpg")


def test_get_property_of_external_source():
    data = [np.zeros((2, 3), np.uint8)] * 3
    assert_same_as_dali(lambda lib, src: (lib.fn.get_property(src(data, "HW"), key="layout"),
                                          lib.fn.get_property(src(data), key="layout"),
                                          lib.fn.get_property(src(data, "HW"), key="source_info")))


def test_get_property_refuses_unknown_keys():
    assert_both_refuse(lambda lib, src: lib.fn.get_property(src([np.zeros(2)] * 3), key="foo"), "get_property.*foo")


# --- peek_image_shape --------------------------------------------------------------------

def _encoded(image, fmt, **kwargs):
    buf = io.BytesIO()
    (image if isinstance(image, Image.Image) else Image.fromarray(image)).save(buf, fmt, **kwargs)
    return np.frombuffer(buf.getvalue(), np.uint8).copy()


def _rotated(fmt):
    image = Image.fromarray(RNG.integers(0, 255, (5, 7, 3), dtype=np.uint8))
    exif = image.getexif()
    exif[0x0112] = 6
    return _encoded(image, fmt, exif=exif.tobytes())


def _image_files():
    rgb = RNG.integers(0, 255, (5, 7, 3), dtype=np.uint8)
    gray = RNG.integers(0, 255, (6, 9), dtype=np.uint8)
    four = RNG.integers(0, 255, (4, 3, 4), dtype=np.uint8)
    return [_encoded(rgb, "JPEG"), _encoded(gray, "JPEG"), _encoded(Image.fromarray(four, "CMYK"), "JPEG"),
            _rotated("JPEG"), _encoded(rgb, "PNG"), _encoded(gray, "PNG"), _encoded(four, "PNG"),
            _encoded(Image.fromarray(rgb).convert("P"), "PNG"),
            _encoded(Image.fromarray(RNG.integers(0, 65535, (3, 5), dtype=np.uint16)), "PNG"),
            _encoded(Image.fromarray(RNG.integers(0, 255, (3, 5, 2), dtype=np.uint8), "LA"), "PNG"),
            _rotated("PNG"), _encoded(rgb, "BMP"), _encoded(rgb, "TIFF"), _encoded(rgb, "WEBP"),
            _encoded(np.zeros((1, 1, 3), np.uint8), "JPEG")]


@pytest.mark.parametrize("image_type", [types.RGB, types.BGR, types.GRAY, types.YCbCr, types.ANY_DATA])
def test_peek_image_shape(image_type):
    files = _image_files()
    assert_same_as_dali(lambda lib, src: (lib.fn.peek_image_shape(src(files), image_type=image_type),
                                          lib.fn.peek_image_shape(src(files), image_type=image_type,
                                                                  adjust_orientation=False, dtype=types.INT32)),
                        batch_size=len(files))


@pytest.mark.parametrize("dtype", [types.UINT32, types.UINT64, types.FLOAT, types.FLOAT64])
def test_peek_image_shape_types(dtype):
    files = _image_files()[:4]
    assert_same_as_dali(lambda lib, src: lib.fn.peek_image_shape(src(files), dtype=dtype), batch_size=4)


def test_peek_image_shape_deprecated_name():
    files = _image_files()[:3]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_same_as_dali(lambda lib, src: lib.fn.experimental.peek_image_shape(src(files)))
    with pytest.warns(DeprecationWarning):
        outputs(torchdali, lambda lib, src: lib.fn.experimental.peek_image_shape(src(files)))


def test_peek_image_shape_errors():
    jpeg = _image_files()[0]
    for bad, message in [(np.zeros(10, np.uint8), "sample 1: not an image"),
                         (np.zeros(0, np.uint8), "sample 1: .*empty"),
                         (jpeg[:30], "sample 1: a JPEG whose header is cut short"),
                         (_encoded(np.zeros((2, 2, 3), np.uint8), "GIF"), "sample 1: not an image")]:
        assert_both_refuse(lambda lib, src: lib.fn.peek_image_shape(src([jpeg, bad, jpeg])),
                           "peek_image_shape.*" + message)
    assert_both_refuse(lambda lib, src: lib.fn.peek_image_shape(src([jpeg.astype(np.int32)] * 3)),
                       "peek_image_shape.*expected encoded bytes")
    assert_both_refuse(lambda lib, src: lib.fn.peek_image_shape(src([jpeg.reshape(1, -1)] * 3)),
                       "peek_image_shape.*expected encoded bytes")
    assert_both_refuse(lambda lib, src: lib.fn.peek_image_shape(src([jpeg] * 3), dtype=types.UINT8),
                       "peek_image_shape.*not one of")


# --- GPU: the same results as the CPU --------------------------------------------------------

@requires_cuda
def test_gpu_variants_match_the_cpu():
    data = [RNG.integers(-1, 6, (4, 5)).astype(np.int32) for _ in range(2)] + [np.array([[1, 2]], np.int32)]

    def graph(lib, src):
        x = src(data, "HW")
        return (lib.fn.one_hot(x, num_classes=5, axis=1, axis_name="K", dtype=types.UINT16, on_value=-3),
                lib.fn.one_hot(x, num_classes=4), lib.fn.cast_like(x, src([np.zeros(1, np.uint8)] * 3)),
                lib.fn.copy(x), lib.fn.get_property(x, key="layout"))

    for (got, got_layout), (expected, expected_layout) in zip(outputs(torchdali, graph, device="gpu"),
                                                              outputs(torchdali, graph)):
        assert_batches_equal(got, expected)
        assert got_layout == expected_layout


@requires_cuda
@pytest.mark.parametrize("kwargs", [dict(fdata=[np.nan, 2.5, -1e30, 0.5], dtype=types.INT32, shape=[2, 2], layout="HW"),
                                    dict(idata=[-1, 300], dtype=types.UINT8), dict(fdata=0.1, dtype=types.FLOAT16),
                                    dict(idata=7, shape=[])])
def test_constant_gpu_matches_the_cpu(kwargs):
    def graph(device):
        return lambda lib, src: lib.fn.constant(device=device, **kwargs)

    (got, got_layout), = outputs(torchdali, graph("gpu"), device="gpu")
    (expected, expected_layout), = outputs(torchdali, graph("cpu"))
    assert_batches_equal(got, expected)
    assert got_layout == expected_layout
