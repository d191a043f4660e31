"""decoders.image: formats, colour spaces, types, EXIF orientation, bad files; against
Pillow and, where installed, NVIDIA DALI. Most tests run the operator directly (no
pipeline); a few check what the engine does with its errors and skipped samples."""
import io
import re
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

import torchdali
from torchdali import fn, pipeline_def, schema, types
from torchdali.operators.base import Args, OpSpec, RunContext
from torchdali.kernels.io import jpeg_headers
from torchdali.operators.decoders import CPU_DECODER, apply_orientation
from torchdali.tensor_list import TensorList

from conftest import dali_or_skip, requires_cuda

pytestmark = pytest.mark.usefixtures("cpu_jpeg_decoder")  # every test with either CPU JPEG path

_POOL = ThreadPoolExecutor(2)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def as_tensor(blob):
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8) if blob else torch.zeros(0, dtype=torch.uint8)


def run_op(paths, device="cpu", data=None, names=True, **kwargs):
    """Run decoders.image once on these files (or raw `data` byte strings); returns
    (output TensorList, RunContext) - the context holds dropped samples and warnings."""
    sch = schema.get("decoders.image")
    spec = OpSpec(schema=sch, name="decoder", device=device, args=sch.check_args(kwargs), arg_input_names=(),
                  num_outputs=1, seed=0, max_batch_size=len(paths), num_threads=2,
                  device_id=0 if device == "mixed" else None)
    op = sch.impl(spec)
    blobs = data if data is not None else [read(p) for p in paths]
    batch = TensorList.make([as_tensor(b) for b in blobs],
                            source_info=list(paths) if names else None)
    ctx = RunContext(iteration=0, batch_size=len(paths), thread_pool=_POOL, num_threads=2,
                     cuda_device=torch.device("cuda", 0) if device == "mixed" else None)
    (out,) = op.run([batch], Args(op, {}), ctx)
    return out, ctx


def decode(paths, **kwargs):
    """The decoded images as NumPy arrays."""
    out, _ = run_op(paths, **kwargs)
    assert out.layout() == "HWC"
    return [s.cpu().numpy() for s in out.as_torch_list()]


def photo(h, w, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([128 + 100 * np.sin(xx / 7.0 + c) * np.cos(yy / 5.0) for c in range(3)], -1)
    return np.clip(img + rng.normal(0, 5, (h, w, 3)), 0, 255).astype(np.uint8)


def save(d, name, img, fmt="JPEG", **kwargs):
    img.save(d / name, fmt, **kwargs)
    return str(d / name)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("images")
    rgb = Image.fromarray(photo(37, 53))
    out = {
        "baseline": save(d, "baseline.jpg", rgb, quality=92),
        "progressive": save(d, "progressive.jpg", rgb, progressive=True, quality=90),
        "444": save(d, "444.jpg", rgb, quality=92, subsampling=0),
        "gray": save(d, "gray.jpg", rgb.convert("L")),
        "cmyk": save(d, "cmyk.jpg", rgb.convert("CMYK")),
        "png_rgba": save(d, "rgba.png", rgb.convert("RGBA"), "PNG"),
        "png_gray": save(d, "gray.png", rgb.convert("L"), "PNG"),
        "png_la": save(d, "la.png", rgb.convert("LA"), "PNG"),
        "png_palette": save(d, "palette.png", rgb.convert("P"), "PNG"),
        "bmp": save(d, "image.bmp", rgb, "BMP"),
        "tiff": save(d, "image.tiff", rgb, "TIFF"),
        "tiff_cmyk": save(d, "cmyk.tiff", rgb.convert("CMYK"), "TIFF"),
        "webp": save(d, "image.webp", rgb, "WEBP", lossless=True),
        "ppm": save(d, "image.ppm", rgb, "PPM"),
        "png16": save(d, "gray16.png", Image.fromarray(np.array([[0, 1000, 30000, 65535, 32768, 128, 129, 200]],
                                                                 np.uint16)), "PNG"),
    }
    for orientation in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        out[f"exif{orientation}"] = save(d, f"exif{orientation}.jpg", rgb, exif=exif, quality=95)
    exif = Image.Exif()
    exif[0x0112] = 6
    out["exif6_png"] = save(d, "exif6.png", rgb, "PNG", exif=exif)
    return out


def pillow_reference(path, output_type=types.RGB):
    img = ImageOps.exif_transpose(Image.open(path))
    if output_type == types.GRAY:
        return np.asarray(img.convert("L"))[:, :, None]
    rgb = np.asarray(img.convert("RGB"))
    return rgb[:, :, ::-1] if output_type == types.BGR else rgb


def ycbcr_reference(rgb):
    """DALI's YCbCr: BT.601 with head- and footroom (studio range), rounded."""
    r, g, b = (rgb[..., c].astype(np.float32) for c in range(3))
    y = 0.257 * r + 0.504 * g + 0.098 * b + 16
    neutral = (r == g) & (g == b)
    cb = np.where(neutral, 128, -0.148 * r - 0.291 * g + 0.439 * b + 128)
    cr = np.where(neutral, 128, 0.439 * r - 0.368 * g - 0.071 * b + 128)
    return np.clip(np.rint(np.stack([y, cb, cr], -1)), 0, 255)


def mean_diff(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return np.abs(a.astype(np.float64) - b.astype(np.float64)).mean()


# --- formats, colour spaces, types --------------------------------------------------

@pytest.mark.parametrize("kind", ["baseline", "progressive", "444", "gray", "cmyk", "png_rgba", "png_gray",
                                  "png_la", "png_palette", "bmp", "tiff", "webp", "ppm", "exif6_png"]
                         + [f"exif{k}" for k in range(1, 9)])
def test_formats_against_pillow(files, kind):
    (got,) = decode([files[kind]])
    assert got.dtype == np.uint8
    # libjpeg-turbo both ways: the same pixels but for CMYK's colour conversion.
    limit = 3 if kind == "cmyk" else (1 if kind in ("baseline", "progressive", "444", "gray")
                                      or kind.startswith("exif") and "png" not in kind else 0)
    assert mean_diff(got, pillow_reference(files[kind])) <= limit


@pytest.mark.parametrize("output_type", [types.RGB, types.BGR, types.GRAY])
@pytest.mark.parametrize("kind", ["baseline", "gray", "png_rgba", "png_gray", "webp", "bmp"])
def test_output_types_against_pillow(files, kind, output_type):
    (got,) = decode([files[kind]], output_type=output_type)
    ref = pillow_reference(files[kind], output_type)
    if "jpg" in files[kind]:
        assert mean_diff(got, ref) <= 1
    elif output_type == types.GRAY:  # RGB -> luma: libpng floors, Pillow (and DALI for WebP) round
        assert np.abs(got.astype(int) - ref).max() <= 1 and mean_diff(got, ref) < 0.6
    else:
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("kind", ["baseline", "gray", "png_rgba", "webp"])
def test_ycbcr_is_bt601_studio_range(files, kind):
    (rgb,) = decode([files[kind]])
    (got,) = decode([files[kind]], output_type=types.YCbCr)
    np.testing.assert_array_equal(got, ycbcr_reference(rgb))
    assert 16 <= got[..., 0].min() and got[..., 0].max() <= 235


def test_any_data_keeps_the_channels(files):
    shapes = {k: decode([files[k]], output_type=types.ANY_DATA)[0].shape[2]
              for k in ("baseline", "gray", "png_gray", "png_la", "png_rgba", "png_palette", "cmyk", "webp", "tiff",
                        "tiff_cmyk")}
    assert shapes == {"baseline": 3, "gray": 1, "png_gray": 1, "png_la": 2, "png_rgba": 4, "png_palette": 3,
                      "cmyk": 4, "webp": 3, "tiff": 3, "tiff_cmyk": 4}
    (rgba,) = decode([files["png_rgba"]], output_type=types.ANY_DATA)
    np.testing.assert_array_equal(rgba, np.asarray(Image.open(files["png_rgba"])))
    # A palette's colours, not its indices; CMYK as RGB with an opaque alpha (as DALI)
    (palette,) = decode([files["png_palette"]], output_type=types.ANY_DATA)
    np.testing.assert_array_equal(palette, np.asarray(Image.open(files["png_palette"]).convert("RGB")))
    (cmyk,) = decode([files["tiff_cmyk"]], output_type=types.ANY_DATA)
    np.testing.assert_array_equal(cmyk, np.asarray(Image.open(files["tiff_cmyk"]).convert("RGBA")))


def test_dtypes_scale_to_the_dynamic_range(files):
    (u8,) = decode([files["baseline"]])
    ref = u8.astype(np.float64)
    (f32,) = decode([files["baseline"]], dtype=types.FLOAT)
    assert f32.dtype == np.float32 and np.abs(f32 - ref / 255).max() < 1e-6
    (u16,) = decode([files["baseline"]], dtype=types.UINT16)
    np.testing.assert_array_equal(u16, u8.astype(np.uint16) * 257)
    (i16,) = decode([files["baseline"]], dtype=types.INT16)
    np.testing.assert_array_equal(i16, np.rint(ref * 32767 / 255))
    (i8,) = decode([files["baseline"]], dtype=types.INT8, output_type=types.GRAY)
    assert i8.dtype == np.int8 and i8.shape[2] == 1 and i8.max() <= 127
    with pytest.raises(ValueError, match="'dtype'"):
        run_op([files["baseline"]], dtype=types.FLOAT16)


def test_16_bit_png_keeps_its_precision(files):
    stored = [0, 1000, 30000, 65535, 32768, 128, 129, 200]
    (u16,) = decode([files["png16"]], output_type=types.ANY_DATA, dtype=types.UINT16)
    assert u16.ravel().tolist() == stored
    (u8,) = decode([files["png16"]], output_type=types.ANY_DATA)
    assert u8.ravel().tolist() == [0, 4, 117, 255, 128, 0, 1, 1]
    (rgb,) = decode([files["png16"]])
    assert rgb.shape == (1, 8, 3) and rgb.dtype == np.uint8


# --- orientation ----------------------------------------------------------------------

def test_adjust_orientation_off(files):
    (got,) = decode([files["exif6"]], adjust_orientation=False)
    assert got.shape == (37, 53, 3)
    assert mean_diff(got, np.asarray(Image.open(files["exif6"]).convert("RGB"))) <= 1


@pytest.mark.parametrize("orientation", range(1, 9))
def test_apply_orientation_matches_pillow(orientation):
    img = photo(5, 7)
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG", exif=exif)
    ref = np.asarray(ImageOps.exif_transpose(Image.open(buf)))
    got = apply_orientation(torch.from_numpy(img).permute(2, 0, 1), orientation).permute(1, 2, 0).numpy()
    np.testing.assert_array_equal(got, ref)


def test_an_empty_batch_decodes_to_an_empty_batch():
    out, ctx = run_op([], data=[])
    assert len(out) == 0 and ctx.dropped == []


def test_jpeg_headers_of_the_test_files(files):
    def header(key):  # (orientation, subsampled)
        return tuple(jpeg_headers([as_tensor(read(files[key]))])[0, 2:4].tolist())

    for k in range(1, 9):
        assert header(f"exif{k}") == (k, True)
    assert header("baseline") == (1, True) and header("progressive") == (1, True)
    assert header("444") == (1, False) and header("gray") == (1, False)


# --- arguments --------------------------------------------------------------------------

DALI_ARGS = ["adjust_orientation", "affine", "bytes_per_sample_hint", "cache_batch_copy", "cache_debug", "cache_size",
             "cache_threshold", "cache_type", "device_memory_padding", "device_memory_padding_jpeg2k", "dtype",
             "host_memory_padding", "host_memory_padding_jpeg2k", "hw_decoder_load", "hybrid_huffman_threshold",
             "jpeg_fancy_upsampling", "memory_stats", "output_type", "preallocate_height_hint",
             "preallocate_width_hint", "preserve", "split_stages", "use_chunk_allocator", "use_fast_idct"]


def test_every_dali_argument_is_accepted(files):
    sch = schema.get("decoders.image")
    assert "ImageDecoder" in sch.class_names and "decoders.Image" in sch.class_names
    names = set(DALI_ARGS)
    try:  # DALI 2.4's own list, where it is installed
        import nvidia.dali.backend as dali_backend
        names |= set(dali_backend.GetSchema("decoders__Image").GetArgumentNames())
    except ImportError:
        pass
    for name in names - {"memory_stats", "split_stages", "use_chunk_allocator"}:
        assert name in sch.args, name
    with pytest.warns(DeprecationWarning, match="split_stages|use_chunk_allocator|memory_stats"):
        sch.check_args({"split_stages": True, "use_chunk_allocator": False, "memory_stats": True})
    out, _ = run_op([files["baseline"]], hw_decoder_load=0.9, hybrid_huffman_threshold=10, use_fast_idct=True,
                    device_memory_padding=0, host_memory_padding=0, affine=False, cache_size=10,
                    cache_type="largest", preallocate_width_hint=100, preallocate_height_hint=100)
    assert out[0].shape() == [37, 53, 3]
    with pytest.raises(ValueError, match="'on_error' = 'ignore'"):
        run_op([files["baseline"]], on_error="ignore")


# --- bad files --------------------------------------------------------------------------

@pytest.fixture
def bad_files(tmp_path, files):
    data = read(files["baseline"])
    (tmp_path / "empty.jpg").write_bytes(b"")
    (tmp_path / "truncated.jpg").write_bytes(data[: len(data) // 2])
    (tmp_path / "no_eoi.jpg").write_bytes(data[:-2])  # only the end marker missing
    (tmp_path / "text.jpg").write_bytes(b"this is not an image")
    (tmp_path / "broken.png").write_bytes(read(files["png_rgba"])[:300])
    return {n.split(".")[0]: str(tmp_path / n)
            for n in ("empty.jpg", "truncated.jpg", "no_eoi.jpg", "text.jpg", "broken.png")}


REASONS = {"empty": "the file is empty", "truncated": "Image is incomplete or truncated",
           "no_eoi": "Image is incomplete or truncated", "text": "not an image in a known format",
           "broken": r"the PNG ends inside its image data \(an IDAT chunk is cut short\)"}


@pytest.mark.parametrize("which", list(REASONS))
def test_bad_file_error_names_operator_file_and_reason(files, bad_files, which):
    paths = [files["baseline"], bad_files[which], files["png_rgba"]]
    with pytest.raises(RuntimeError, match=f"^decoders.image \\('decoder'\\): cannot decode "
                                           f"{re.escape(bad_files[which])}: {REASONS[which]}") as info:
        run_op(paths)
    assert isinstance(info.value, torchdali.OperatorError)
    assert (info.value.operator, info.value.instance, info.value.sample, info.value.file) == \
        ("decoders.image", "decoder", 1, bad_files[which])


def claims_too_many_pixels(tmp_path, files):
    """A real JPEG whose frame header claims 60000 x 60000 pixels (10.8 GB decoded)."""
    data = bytearray(read(files["baseline"]))
    sof = data.find(b"\xff\xc0") + 5
    data[sof:sof + 4] = (60000).to_bytes(2, "big") * 2
    path = tmp_path / "bomb.jpg"
    path.write_bytes(bytes(data))
    return str(path)


@pytest.mark.parametrize("device", ["cpu", pytest.param("mixed", marks=requires_cuda)])
@pytest.mark.parametrize("op, kwargs", [("image", {}), ("image_random_crop", {}), ("image_crop", dict(crop=(9, 9)))])
def test_a_jpeg_claiming_too_many_pixels_is_refused_before_decoding(tmp_path, files, op, kwargs, device):
    bomb = claims_too_many_pixels(tmp_path, files)

    # Not run ahead: the statistics below count one iteration's decoding.
    @pipeline_def(batch_size=2, num_threads=2, device_id=None if device == "cpu" else 0, exec_async=False,
                  exec_pipelined=False)
    def pipe(on_error):
        jpegs, _ = fn.readers.file(files=[files["baseline"], bomb])
        return getattr(fn.decoders, op)(jpegs, device=device, on_error=on_error, **kwargs)

    p = pipe("raise")
    p.build()
    with pytest.raises(RuntimeError, match=rf"cannot decode {re.escape(bomb)}: its JPEG header claims 60000 x 60000 "
                                           r"pixels, more than the 1,073,741,824 allowed \(set TORCHDALI_MAX_IMAGE"):
        p.run()
    p = pipe("skip")
    p.build()
    with pytest.warns(UserWarning, match="skipped 1 undecodable"):
        assert len(p.run()[0]) == 1
    (backends,) = [s["decoder_backend"] for s in p.executor_statistics().values() if "decoder_backend" in s]
    assert sum(int(n) for n in re.findall(r": (\d+)", backends)) == 1  # no decoder was given the file


def test_the_pixel_limit_is_an_environment_variable(files, monkeypatch):
    monkeypatch.setenv("TORCHDALI_MAX_IMAGE_PIXELS", "100")
    with pytest.raises(RuntimeError, match="more than the 100 allowed"):
        run_op([files["baseline"]])
    monkeypatch.setenv("TORCHDALI_MAX_IMAGE_PIXELS", "lots")
    with pytest.raises(ValueError, match="TORCHDALI_MAX_IMAGE_PIXELS='lots' is not an integer"):
        run_op([files["baseline"]])


def test_bad_file_without_source_info_names_the_sample(files):
    with pytest.raises(RuntimeError, match="cannot decode sample 1: not an image"):
        run_op(["a", "b"], data=[read(files["baseline"]), b"garbage"], names=False)


def test_on_error_skip_drops_and_counts(files, bad_files):
    sch = schema.get("decoders.image")
    spec = OpSpec(sch, "decoder", "cpu", sch.check_args({"on_error": "skip"}), (), 1, 0, 4, 2, None)
    op = sch.impl(spec)
    paths = [files["baseline"], bad_files["empty"], files["gray"], bad_files["truncated"]]
    batch = TensorList.make([as_tensor(read(p)) for p in paths],
                            source_info=paths)
    for total in (2, 4):
        ctx = RunContext(iteration=0, batch_size=4, thread_pool=_POOL, num_threads=2)
        (out,) = op.run([batch], Args(op, {}), ctx)
        assert ctx.dropped == [1, 3] and len(out) == 2 and out.source_info == [files["baseline"], files["gray"]]
        (message,) = ctx.messages
        assert re.search(rf"skipped 2 undecodable sample\(s\) .*empty.jpg.*truncated.jpg.*; {total} skipped so far",
                         message)
    assert op.skipped == 4


def test_input_must_be_bytes():
    sch = schema.get("decoders.image")
    spec = OpSpec(sch, "decoder", "cpu", sch.check_args({}), (), 1, 0, 1, 1, None)
    ctx = RunContext(iteration=0, batch_size=1, thread_pool=None)
    with pytest.raises(TypeError, match="expected encoded bytes"):
        op = sch.impl(spec)
        op.run([TensorList.make([torch.zeros(2, 2, dtype=torch.uint8)])], Args(op, {}), ctx)


# --- through the pipeline: the engine's side of errors and skips -----------------------------

def test_pipeline_error_names_the_file_and_the_pipeline_survives(files, bad_files):
    paths = [files["baseline"], bad_files["truncated"], files["png_rgba"]]

    @pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe():
        jpegs, labels = fn.readers.file(files=paths)
        return fn.decoders.image(jpegs), labels

    p = pipe()
    with pytest.raises(RuntimeError, match=f"cannot decode {re.escape(bad_files['truncated'])}"):
        p.run()
    p.reset()
    with pytest.raises(RuntimeError, match="cannot decode"):  # the next epoch reaches it again
        p.run()


def test_pipeline_skip_drops_the_sample_from_every_output(files, bad_files, cpu_jpeg_decoder):
    paths = [files["baseline"], bad_files["empty"], files["gray"], bad_files["text"]]

    # Not run ahead: the statistics below count two iterations' decoding.
    @pipeline_def(batch_size=4, num_threads=2, device_id=None, exec_async=False, exec_pipelined=False)
    def pipe():
        jpegs, labels = fn.readers.file(files=paths, labels=[10, 11, 12, 13])
        return fn.decoders.image(jpegs, on_error="skip"), labels, jpegs

    p = pipe()
    with pytest.warns(UserWarning, match=r"skipped 2 undecodable sample\(s\).*empty.jpg.*text.jpg.*2 skipped so far"):
        images, labels, raw = p.run()
    assert len(images) == len(labels) == len(raw) == 2
    assert labels.as_torch().flatten().tolist() == [10, 12]
    assert [images[i].source_info() for i in range(2)] == [files["baseline"], files["gray"]]
    with pytest.warns(UserWarning, match="4 skipped so far"):
        p.run()
    (stats,) = [v for k, v in p.executor_statistics().items() if k.startswith("CPU_")]
    decoder = "CPU JPEG batch decoder (libjpeg-turbo)" if cpu_jpeg_decoder == "batched" else CPU_DECODER
    assert stats == {"decoder_backend": f"{decoder}: 4"}


# --- NVIDIA DALI as the oracle (CPU decoder), where installed -------------------------------

def dali_decode(paths, **kwargs):
    dali = dali_or_skip()
    from nvidia.dali import fn as dfn

    @dali.pipeline_def(batch_size=len(paths), num_threads=1, device_id=None)
    def pipe():
        jpegs, _ = dfn.readers.file(files=paths)
        return dfn.decoders.image(jpegs, device="cpu", **kwargs)

    p = pipe()
    p.build()
    (out,) = p.run()
    return [np.array(out.at(i)) for i in range(len(paths))]


ORACLE_KINDS = ["baseline", "progressive", "gray", "cmyk", "png_rgba", "png_gray", "png_la", "bmp", "tiff",
                "webp", "ppm", "exif2", "exif5", "exif6", "exif7", "exif8", "exif6_png"]


@pytest.mark.parametrize("output_type", [types.RGB, types.BGR, types.GRAY, types.YCbCr])
def test_against_dali(files, output_type):
    paths = [files[k] for k in ORACLE_KINDS]
    theirs = dali_decode(paths, output_type=output_type)
    ours = decode(paths, output_type=output_type)
    for kind, a, b in zip(ORACLE_KINDS, ours, theirs):
        assert a.shape == b.shape, kind
        if output_type in (types.RGB, types.BGR):
            np.testing.assert_array_equal(a, b, err_msg=kind)  # same libjpeg-turbo, same converters
        else:  # luma rounding differs for CMYK/RGB sources; YCbCr (BT.601) off by 1 at a few pixels
            assert np.abs(a.astype(int) - b).max() <= 1 and mean_diff(a, b) < 0.6, kind


def test_against_dali_any_data_and_dtypes(files):
    # Not compared: DALI 2.4 crashes on a gray JPEG with ANY_DATA (garbage within a
    # batch), scrambles a 4-channel PNG it rotates, and refuses CMYK and gray+alpha.
    kinds = ["baseline", "png_rgba", "png_gray", "png16", "exif6", "png_palette", "tiff_cmyk"]
    paths = [files[k] for k in kinds]
    for kind, a, b in zip(kinds, decode(paths, output_type=types.ANY_DATA),
                          dali_decode(paths, output_type=types.ANY_DATA)):
        if kind == "tiff_cmyk":  # the CMYK to RGB conversion rounds differently
            assert a.shape == b.shape and np.abs(a.astype(int) - b).max() <= 1, kind
        else:
            np.testing.assert_array_equal(a, b, err_msg=kind)
    paths = [files[k] for k in ("baseline", "png_rgba", "png16")]
    for dtype in (types.UINT16, types.INT16, types.INT8, types.INT32, types.UINT32, types.FLOAT):
        for a, b in zip(decode(paths, dtype=dtype, output_type=types.RGB),
                        dali_decode(paths, dtype=dtype, output_type=types.RGB)):
            assert a.dtype == b.dtype and a.shape == b.shape
            tolerance = 1 if dtype == types.INT32 else 0  # float32 rounding of a 16-bit sample
            assert np.abs(a.astype(np.float64) - b.astype(np.float64)).max() <= tolerance, dtype


def test_dali_also_refuses_truncated_jpegs(bad_files):
    dali_or_skip()
    with pytest.raises(RuntimeError):
        dali_decode([bad_files["no_eoi"]])


# --- mixed: nvJPEG on the GPU ------------------------------------------------------------

MIXED_KINDS = ["baseline", "progressive", "444", "gray", "cmyk", "png_rgba", "bmp", "webp"] + \
              [f"exif{k}" for k in range(1, 9)]


@requires_cuda
@pytest.mark.parametrize("output_type", [types.RGB, types.BGR, types.GRAY, types.YCbCr, types.ANY_DATA])
def test_mixed_matches_cpu(files, output_type):
    paths = [files[k] for k in MIXED_KINDS]
    cpu = decode(paths, output_type=output_type)
    out, _ = run_op(paths, device="mixed", output_type=output_type)
    assert type(out).__name__ == "TensorListGPU" and all(s.is_cuda for s in out.as_torch_list())
    for key, a, b in zip(MIXED_KINDS, cpu, [s.cpu().numpy() for s in out.as_torch_list()]):
        # nvJPEG upsamples chroma without libjpeg-turbo's smoothing: a few levels on this
        # small, noisy image; 4:4:4, gray and non-JPEG files match (near) exactly.
        limit = 0.0 if key in ("png_rgba", "bmp", "webp", "cmyk") else (0.5 if key in ("444", "gray") else 5.0)
        assert mean_diff(a, b) <= limit, key


@requires_cuda
def test_mixed_fancy_upsampling_and_dtype_match_cpu(files):
    paths = [files[k] for k in MIXED_KINDS]
    cpu = decode(paths, dtype=types.FLOAT)
    gpu = decode(paths, device="mixed", jpeg_fancy_upsampling=True, dtype=types.FLOAT)
    for key, a, b in zip(MIXED_KINDS, cpu, gpu):
        assert b.dtype == np.float32 and mean_diff(a, b) <= (0.5 / 255 if key in ("444", "gray") else 0), key


@requires_cuda
@pytest.mark.parametrize("which", ["truncated", "no_eoi", "text", "empty"])
def test_mixed_bad_file_names_file(files, bad_files, which):
    with pytest.raises(RuntimeError, match=f"cannot decode {re.escape(bad_files[which])}: {REASONS[which]}"):
        run_op([files["baseline"], bad_files[which]], device="mixed")
    out, ctx = run_op([files["baseline"], bad_files[which], files["gray"]], device="mixed", on_error="skip")
    assert ctx.dropped == [1] and len(out) == 2 and out.as_torch_list()[1].is_cuda


@requires_cuda
def test_mixed_pipeline(files):
    paths = [files[k] for k in ("baseline", "png_rgba", "exif6")]

    # Not run ahead: the statistics below count one iteration's decoding.
    @pipeline_def(batch_size=3, num_threads=2, device_id=0, exec_async=False, exec_pipelined=False)
    def pipe():
        jpegs, labels = fn.readers.file(files=paths)
        return fn.decoders.image(jpegs, device="mixed"), labels

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = pipe()
        images, _ = p.run()
    assert images.at(0).is_cuda and [list(s) for s in images.shape()] == [[37, 53, 3], [37, 53, 3], [53, 37, 3]]
    # The JPEGs on the GPU (our nvJPEG engine where built), the PNG on the CPU.
    (stats,) = [v["decoder_backend"] for k, v in p.executor_statistics().items() if k.startswith("MIXED_")]
    assert "nvJPEG" in stats and stats.endswith(f"{CPU_DECODER}: 1")


def test_specs_are_planned_at_build():
    """The reader gives 1D uint8 contents, the decoder HWC images of its dtype: a consumer
    that cannot take them, or a decoder fed something else, fails at build()."""
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def wrong_input():
        return fn.decoders.image(fn.external_source(lambda: [np.zeros((2, 2), np.uint8)] * 2, ndim=2))

    with pytest.raises(TypeError, match=r"decoders.image .*expected encoded bytes \(1D uint8\) as input, got 2D"):
        wrong_input().build()

    def rotated(dtype):
        @pipeline_def(batch_size=2, num_threads=1, device_id=None)
        def pipe():
            data, _ = fn.readers.file(files=["a.jpg", "b.jpg"], lazy_init=True)  # nothing is read at build
            return fn.rotate(fn.decoders.image(data, dtype=dtype), angle=10)

        return pipe()

    rotated(types.UINT8).build()
    with pytest.raises(TypeError, match="rotate .*input type DALIDataType.UINT16 is not supported"):
        rotated(types.UINT16).build()
