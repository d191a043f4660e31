"""decoders.image: formats, colour spaces, EXIF orientation, bad files; against Pillow
and, where installed, NVIDIA DALI."""
import io
import re

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

import torchdali
from torchdali import fn, pipeline_def, types
from torchdali.operators.decoders import apply_orientation, exif_orientation

from conftest import dali_or_skip, requires_cuda


def photo(h, w, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([128 + 100 * np.sin(xx / 7.0 + c) * np.cos(yy / 5.0) for c in range(3)], -1)
    return np.clip(img + rng.normal(0, 5, (h, w, 3)), 0, 255).astype(np.uint8)


def save(tmp_path, name, img, fmt="JPEG", **kwargs):
    path = tmp_path / name
    img.save(path, fmt, **kwargs)
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("images")
    rgb = Image.fromarray(photo(37, 53))
    out = {
        "baseline": save(d, "baseline.jpg", rgb, quality=92),
        "progressive": save(d, "progressive.jpg", rgb, progressive=True, quality=90),
        "gray": save(d, "gray.jpg", rgb.convert("L")),
        "cmyk": save(d, "cmyk.jpg", rgb.convert("CMYK")),
        "png_rgba": save(d, "rgba.png", rgb.convert("RGBA"), "PNG"),
        "png_gray": save(d, "gray.png", rgb.convert("L"), "PNG"),
        "bmp": save(d, "image.bmp", rgb, "BMP"),
    }
    for orientation in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        out[f"exif{orientation}"] = save(d, f"exif{orientation}.jpg", rgb, exif=exif, quality=95)
    return out


def pillow_reference(path, output_type=types.RGB):
    img = ImageOps.exif_transpose(Image.open(path))
    if output_type == types.GRAY:
        return np.asarray(img.convert("L"))[:, :, None]
    rgb = np.asarray(img.convert("RGB"))
    return rgb[:, :, ::-1] if output_type == types.BGR else rgb


def decode(lib, paths, device="cpu", **kwargs):
    @lib.pipeline_def(batch_size=len(paths), num_threads=2, device_id=None if device == "cpu" else 0)
    def pipe():
        jpegs, labels = lib.fn.readers.file(files=paths)
        return lib.fn.decoders.image(jpegs, device=device, **kwargs), labels

    p = pipe()
    p.build()
    return p.run()


@pytest.mark.parametrize("kind", ["baseline", "progressive", "gray", "cmyk", "png_rgba", "png_gray", "bmp"]
                         + [f"exif{k}" for k in range(1, 9)])
def test_formats_against_pillow(files, kind):
    images, _ = decode(torchdali, [files[kind]])
    got = np.array(images.at(0))
    ref = pillow_reference(files[kind])
    assert images.layout() == "HWC" and got.dtype == np.uint8 and got.shape == ref.shape
    limit = 0 if kind.startswith(("png", "bmp")) else (3 if kind == "cmyk" else 1)
    assert np.abs(got.astype(int) - ref).mean() <= limit


@pytest.mark.parametrize("output_type", [types.RGB, types.BGR, types.GRAY])
def test_output_types(files, output_type):
    images, _ = decode(torchdali, [files["baseline"], files["png_rgba"]], output_type=output_type)
    for i, key in enumerate(("baseline", "png_rgba")):
        ref = pillow_reference(files[key], output_type)
        got = np.array(images.at(i))
        assert got.shape == ref.shape and np.abs(got.astype(int) - ref).mean() <= 1.5


def test_ycbcr_and_any_data(files):
    images, _ = decode(torchdali, [files["baseline"]], output_type=types.YCbCr)
    ref = np.asarray(Image.open(files["baseline"]).convert("YCbCr"))
    assert np.abs(np.array(images.at(0)).astype(int) - ref).mean() <= 1.5
    images, _ = decode(torchdali, [files["png_gray"], files["png_rgba"]], output_type=types.ANY_DATA)
    assert images.at(0).shape[2] == 1 and images.at(1).shape[2] == 4


def test_adjust_orientation_off(files):
    images, _ = decode(torchdali, [files["exif6"]], adjust_orientation=False)
    assert images.at(0).shape == (37, 53, 3)


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


def test_exif_orientation_parser(files):
    for k in range(1, 9):
        data = torch.frombuffer(bytearray(open(files[f"exif{k}"], "rb").read()), dtype=torch.uint8)
        assert exif_orientation(data) == k
    plain = torch.frombuffer(bytearray(open(files["baseline"], "rb").read()), dtype=torch.uint8)
    assert exif_orientation(plain) == 1


@pytest.mark.parametrize("kind", ["baseline", "progressive", "gray", "cmyk", "png_rgba", "exif6", "exif7"])
@pytest.mark.parametrize("output_type", [types.RGB, types.BGR, types.GRAY])
def test_against_dali(files, kind, output_type):
    nvidia_dali = dali_or_skip()
    import nvidia.dali.fn  # noqa: F401
    ours, _ = decode(torchdali, [files[kind]], output_type=output_type)
    theirs, _ = decode(nvidia_dali, [files[kind]], output_type=output_type)
    a, b = np.array(ours.at(0)).astype(int), np.array(theirs.at(0)).astype(int)
    assert a.shape == b.shape
    assert np.abs(a - b).mean() < 1.0


@pytest.fixture
def bad_files(tmp_path, files):
    data = open(files["baseline"], "rb").read()
    (tmp_path / "empty.jpg").write_bytes(b"")
    (tmp_path / "truncated.jpg").write_bytes(data[: len(data) // 2])
    (tmp_path / "text.jpg").write_bytes(b"this is not an image")
    return [str(tmp_path / n) for n in ("empty.jpg", "truncated.jpg", "text.jpg")]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_bad_file_error_names_file_and_pipeline_survives(files, bad_files, which):
    paths = [files["baseline"], bad_files[which], files["png_rgba"]]

    @pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe():
        jpegs, labels = fn.readers.file(files=paths)
        return fn.decoders.image(jpegs), labels

    p = pipe()
    reason = ["the file is empty", "Image is incomplete or truncated", "not an image in a known format"][which]
    with pytest.raises(RuntimeError, match=f"decoders.image: cannot decode {re.escape(bad_files[which])}: {reason}$"):
        p.run()
    p.reset()
    with pytest.raises(RuntimeError, match="cannot decode"):  # the next epoch reaches it again
        p.run()


def test_on_error_skip_drops_the_sample_everywhere_and_counts(files, bad_files):
    paths = [files["baseline"], bad_files[0], files["gray"], bad_files[1]]

    @pipeline_def(batch_size=4, num_threads=2, device_id=None)
    def pipe():
        jpegs, labels = fn.readers.file(files=paths, labels=[10, 11, 12, 13])
        return fn.decoders.image(jpegs, on_error="skip"), labels, jpegs

    p = pipe()
    with pytest.warns(UserWarning, match=r"skipped 2 undecodable sample\(s\).*empty.jpg.*truncated.jpg.*2 skipped so far"):
        images, labels, raw = p.run()
    assert len(images) == len(labels) == len(raw) == 2
    assert labels.as_torch().flatten().tolist() == [10, 12]
    assert [images[i].source_info() for i in range(2)] == [files["baseline"], files["gray"]]
    with pytest.warns(UserWarning, match="4 skipped so far"):
        p.run()


def test_input_must_be_bytes():
    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        return fn.decoders.image(fn.external_source(lambda: [np.zeros((2, 2), np.uint8)]))

    with pytest.raises(TypeError, match="expected encoded bytes"):
        pipe().run()


@requires_cuda
@pytest.mark.parametrize("output_type", [types.RGB, types.BGR, types.GRAY])
def test_mixed_matches_cpu(files, output_type):
    keys = ["baseline", "progressive", "gray", "cmyk", "png_rgba", "bmp"] + [f"exif{k}" for k in range(1, 9)]
    paths = [files[k] for k in keys]
    cpu, _ = decode(torchdali, paths, output_type=output_type)
    gpu, labels = decode(torchdali, paths, device="mixed", output_type=output_type)
    assert type(gpu).__name__ == "TensorListGPU" and gpu.at(0).is_cuda
    for i, key in enumerate(keys):
        a, b = np.array(cpu.at(i)).astype(int), gpu.at(i).cpu().numpy().astype(int)
        assert a.shape == b.shape, key
        # nvJPEG and libjpeg-turbo upsample chroma differently: a few levels on this
        # small, noisy image; non-JPEG files take the CPU path and match exactly.
        limit = 0.0 if key in ("png_rgba", "bmp") else 5.0
        assert np.abs(a - b).mean() <= limit, key


@requires_cuda
def test_mixed_bad_file_names_file(files, bad_files):
    with pytest.raises(RuntimeError, match="cannot decode.*truncated.jpg"):
        decode(torchdali, [files["baseline"], bad_files[1]], device="mixed")
