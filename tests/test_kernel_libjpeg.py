"""torchdali::decode_jpegs_cpu, our batched CPU JPEG decoder: whole images and random
windows of odd sizes against torchvision's decode (libjpeg-turbo too) then a NumPy crop,
bit for bit; progressive, restart-marker and grayscale files; the fast IDCT; refused and
broken files; any number of threads; opcheck. Where the extension was built with
libjpeg-turbo."""
import io

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import jpeg, photo

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")
from torchdali import types  # noqa: E402
from torchdali.kernels import libjpeg  # noqa: E402
from torchdali.kernels.io import EncodedFiles  # noqa: E402
from torchdali.operators.decoders import decode_cpu  # noqa: E402

pytestmark = pytest.mark.skipif(not libjpeg.available(), reason="built without libjpeg-turbo")

UNSUPPORTED, CORRUPT, OUTSIDE = 1, 2, 3  # decode_jpegs' status codes besides DECODED


# Odd sizes; 4:2:0, 4:2:2 and 4:4:4; progressive; restart markers; grayscale (to RGB).
FILES = [
    jpeg(photo(37, 53, 0), quality=90, subsampling=2),
    jpeg(photo(101, 67, 1), quality=90, subsampling=1),
    jpeg(photo(16, 16, 2), quality=90, subsampling=0),
    jpeg(photo(129, 255, 3), quality=85, subsampling=2, progressive=True),
    jpeg(photo(75, 9, 4), quality=90, subsampling=0),
    jpeg(photo(66, 91, 5), quality=90, subsampling=2, restart_marker_blocks=3),
    jpeg(photo(41, 43, 6)[:, :, 0], quality=90),
]
SIZES = [(37, 53), (101, 67), (16, 16), (129, 255), (75, 9), (66, 91), (41, 43)]


def reference(blob):
    """torchvision's decode of the whole file, HWC."""
    return decode_cpu(blob, types.RGB, orient=False).permute(1, 2, 0).numpy()


def whole(sizes):
    return torch.tensor([(0, 0, h, w) for h, w in sizes], dtype=torch.int64)


def random_windows(sizes, rng):
    rows = []
    for h, w in sizes:
        wh, ww = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        rows.append((int(rng.integers(0, h - wh + 1)), int(rng.integers(0, w - ww + 1)), wh, ww))
    return torch.tensor(rows, dtype=torch.int64)


def split(flat, windows):
    """The [h, w, 3] images in `flat`, as NumPy arrays."""
    sizes = (windows[:, 2] * windows[:, 3] * 3).tolist()
    return [part.view(int(h), int(w), 3).numpy() for part, (h, w) in zip(flat.split(sizes), windows[:, 2:].tolist())]


def test_whole_images_match_torchvision():
    flat, status = libjpeg.decode_jpegs(FILES, whole(SIZES))
    assert flat.dtype == torch.uint8 and status.dtype == torch.int32
    assert status.tolist() == [libjpeg.DECODED] * len(FILES)
    for i, (img, blob) in enumerate(zip(split(flat, whole(SIZES)), FILES)):
        np.testing.assert_array_equal(img, reference(blob), err_msg=f"image {i}")


@pytest.mark.parametrize("seed", range(4))
def test_windows_are_the_whole_image_cut(seed):
    """Bit for bit, edges included: the columns beside the window are decoded too, for the
    chroma upsampling, and the rows above it are skipped without changing the ones below."""
    windows = random_windows(SIZES, np.random.default_rng(seed))
    flat, status = libjpeg.decode_jpegs(FILES, windows)
    assert status.tolist() == [libjpeg.DECODED] * len(FILES)
    for i, (img, blob, (y, x, h, w)) in enumerate(zip(split(flat, windows), FILES, windows.tolist())):
        np.testing.assert_array_equal(img, reference(blob)[y:y + h, x:x + w], err_msg=f"image {i}, window {y, x, h, w}")


def test_windows_at_the_corners_and_one_pixel():
    h, w = SIZES[3]
    windows = torch.tensor([(0, 0, 1, 1), (h - 1, w - 1, 1, 1), (0, w - 17, h, 17), (h - 16, 0, 16, w),
                            (5, 16, 7, 16), (0, 0, h, w)], dtype=torch.int64)
    flat, status = libjpeg.decode_jpegs([FILES[3]] * len(windows), windows)
    assert (status == libjpeg.DECODED).all()
    full = reference(FILES[3])
    for img, (y, x, wh, ww) in zip(split(flat, windows), windows.tolist()):
        np.testing.assert_array_equal(img, full[y:y + wh, x:x + ww])


def test_same_result_on_any_number_of_threads():
    windows = random_windows(SIZES * 5, np.random.default_rng(11))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one, _ = libjpeg.decode_jpegs(FILES * 5, windows)
        torch.set_num_threads(4)
        four, _ = libjpeg.decode_jpegs(FILES * 5, windows)
        two, _ = libjpeg.decode_jpegs(FILES * 5, windows, threads=2)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, four) and torch.equal(one, two)


def test_fast_idct_is_close_but_not_the_same():
    accurate, _ = libjpeg.decode_jpegs(FILES[:4], whole(SIZES[:4]))
    fast, status = libjpeg.decode_jpegs(FILES[:4], whole(SIZES[:4]), fast_idct=True)
    assert (status == libjpeg.DECODED).all()
    diff = (fast.int() - accurate.int()).abs()
    assert 0 < diff.float().mean() < 2.0 and diff.max() <= 16


def test_refused_and_broken_files_are_reported_and_the_rest_decoded():
    cmyk = io.BytesIO()
    Image.fromarray(photo(20, 30, 8)).convert("CMYK").save(cmyk, "JPEG")
    files = [FILES[0], torch.frombuffer(bytearray(cmyk.getvalue()), dtype=torch.uint8), FILES[0][:300],
             torch.frombuffer(bytearray(b"not a jpeg at all"), dtype=torch.uint8), FILES[2], FILES[1],
             torch.zeros(0, dtype=torch.uint8)]
    windows = torch.tensor([(0, 0, 37, 53), (0, 0, 20, 30), (0, 0, 37, 53), (0, 0, 4, 4), (0, 0, 16, 16),
                            (90, 0, 12, 67), (0, 0, 1, 1)], dtype=torch.int64)
    flat, status = libjpeg.decode_jpegs(files, windows)
    assert status.tolist() == [libjpeg.DECODED, UNSUPPORTED, CORRUPT, CORRUPT, libjpeg.DECODED, OUTSIDE, CORRUPT]
    images = split(flat, windows)
    np.testing.assert_array_equal(images[0], reference(FILES[0]))
    np.testing.assert_array_equal(images[4], reference(FILES[2]))


def test_bad_arguments_name_the_operator():
    with pytest.raises(RuntimeError, match=r"decode_jpegs_cpu: `windows` must be an int64 CPU tensor \[N, 4\]"):
        libjpeg.decode_jpegs(FILES[:2], whole(SIZES[:1]))
    with pytest.raises(RuntimeError, match=r"decode_jpegs_cpu: windows\[0\] = \(-1, 0, 3, 3\) has a negative"):
        libjpeg.decode_jpegs(FILES[:1], torch.tensor([(-1, 0, 3, 3)]))
    with pytest.raises(ValueError, match=r"sample 0 must be encoded bytes \(a 1D uint8 CPU tensor\)"):
        libjpeg.decode_jpegs([FILES[0].float()], whole(SIZES[:1]))
    flat, status = libjpeg.decode_jpegs([], torch.zeros((0, 4), dtype=torch.int64))
    assert flat.numel() == 0 and status.numel() == 0


def test_decodes_into_a_given_buffer():
    windows = random_windows(SIZES, np.random.default_rng(3))
    expected, _ = libjpeg.decode_jpegs(FILES, windows)
    buffer = torch.full((libjpeg.window_bytes(windows) + 10,), 7, dtype=torch.uint8)
    flat, status = libjpeg.decode_jpegs(FILES, windows, out=buffer[:-10])
    assert (status == libjpeg.DECODED).all() and flat.data_ptr() == buffer.data_ptr()
    assert torch.equal(flat, expected) and (buffer[-10:] == 7).all()
    with pytest.raises(RuntimeError, match=r"decode_jpegs_cpu: `out` must be a contiguous 1-D uint8 CPU tensor "
                                           rf"of the windows' {flat.numel()} bytes"):
        libjpeg.decode_jpegs(FILES, windows, out=buffer)


def test_opcheck():
    windows = whole(SIZES[:3])
    out = torch.empty(libjpeg.window_bytes(windows), dtype=torch.uint8)
    files = EncodedFiles.of(FILES[:3])
    torch.library.opcheck(torch.ops.torchdali.decode_jpegs_cpu.default,
                          (files.data, files.spans, windows, False, 2, out),
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
