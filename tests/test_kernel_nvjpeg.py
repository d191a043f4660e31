"""torchdali::decode_jpegs, our GPU JPEG decoder: against the CPU decoder (libjpeg-turbo via
torchvision) within the tolerance of a different IDCT and chroma upsampling, windows against
decode-then-crop, both paths (hardware and hybrid), bad files, streams and opcheck. GPU
machines only, with the extension built against nvJPEG."""

import numpy as np
import pytest
import torch

from conftest import jpeg, photo, requires_cuda

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")
from torchdali.kernels import nvjpeg  # noqa: E402
from torchdali.kernels.io import EncodedFiles  # noqa: E402
from torchdali.operators.decoders import decode_cpu  # noqa: E402
from torchdali import types  # noqa: E402

pytestmark = [requires_cuda, pytest.mark.skipif(not nvjpeg.available(), reason="built without nvJPEG")]

RNG = np.random.default_rng(7)


# Odd sizes, the usual 4:2:0, 4:2:2 and 4:4:4, and a grayscale file (decoded to RGB).
SIZES = [(37, 53), (101, 67), (16, 16), (129, 255), (75, 9)]
FILES = [jpeg(photo(h, w, k), quality=90, subsampling=[2, 1, 0, 2, 0][k]) for k, (h, w) in enumerate(SIZES)]
FILES.append(jpeg(photo(41, 43, 9)[:, :, 0], quality=90))
SIZES.append((41, 43))


def whole(sizes):
    return torch.tensor([(0, 0, h, w) for h, w in sizes], dtype=torch.int64)


def split(flat, windows):
    """The [h, w, 3] images in `flat`, as NumPy arrays."""
    sizes = (windows[:, 2] * windows[:, 3] * 3).tolist()
    return [part.view(int(h), int(w), 3).cpu().numpy()
            for part, (h, w) in zip(flat.split(sizes), windows[:, 2:].tolist())]


def cpu_reference(blob):
    return decode_cpu(blob, types.RGB).permute(1, 2, 0).numpy()


def mean_diff(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return np.abs(a.astype(np.float64) - b.astype(np.float64)).mean()


@pytest.mark.parametrize("hw_load", [0.0, 0.5, 1.0])
def test_whole_images_match_the_cpu_decoder(hw_load):
    windows = whole(SIZES)
    device = torch.device("cuda")
    flat, status = nvjpeg.decode_jpegs(FILES, windows, hw_load, device)
    status = status.tolist()
    assert flat.is_cuda and flat.dtype == torch.uint8 and set(status) <= {nvjpeg.BY_HARDWARE, nvjpeg.BY_HYBRID}
    if hw_load == 0.0 or not nvjpeg.has_hardware_decoder(device):
        assert set(status) == {nvjpeg.BY_HYBRID}
    elif hw_load == 1.0:  # baseline files: the hardware decoder's (unless it refuses an odd one)
        assert nvjpeg.BY_HARDWARE in status
    for k, (got, blob) in enumerate(zip(split(flat, windows), FILES)):
        # Different IDCT and chroma upsampling: a few levels on average on these noisy
        # images (libjpeg-turbo smooths chroma, nvJPEG replicates it); 4:4:4 and gray closer.
        assert mean_diff(got, cpu_reference(blob)) <= (1.0 if k in (2, 4, 5) else 6.0), k


@pytest.mark.parametrize("hw_load", [0.0, 1.0])
def test_windows_match_decode_then_crop(hw_load):
    h, w = np.array(SIZES).T
    ys, xs = RNG.integers(0, h // 2), RNG.integers(0, w // 2)
    hs, ws = np.maximum(1, RNG.integers(1, h - ys + 1)), np.maximum(1, RNG.integers(1, w - xs + 1))
    windows = torch.from_numpy(np.stack([ys, xs, hs, ws], axis=1).astype(np.int64))
    device = torch.device("cuda")
    full, _ = nvjpeg.decode_jpegs(FILES, whole(SIZES), hw_load, device)
    flat, status = nvjpeg.decode_jpegs(FILES, windows, hw_load, device)
    assert (status <= 0).all()
    for k, (got, image, (y, x, wh, ww)) in enumerate(zip(split(flat, windows), split(full, whole(SIZES)),
                                                         windows.tolist())):
        crop = image[y:y + wh, x:x + ww]
        # Away from the window's border the pixels are the same; at the border chroma
        # upsampling may see different neighbours.
        inner = (slice(2, -2), slice(2, -2))
        if wh > 4 and ww > 4:
            assert mean_diff(got[inner], crop[inner]) <= 0.5, k
        assert mean_diff(got, crop) <= 4.0, k


def test_bad_files_get_a_status_and_the_rest_decodes():
    text = torch.frombuffer(bytearray(b"not a jpeg at all"), dtype=torch.uint8)
    cut = FILES[0][: FILES[0].numel() // 3].clone()
    data = [FILES[0], text, cut, FILES[1]]
    windows = whole([SIZES[0], (4, 4), SIZES[0], SIZES[1]])
    flat, status = nvjpeg.decode_jpegs(data, windows, 0.65, torch.device("cuda"))
    status = status.tolist()
    assert status[0] <= 0 and status[3] <= 0 and status[1] > 0
    images = split(flat, windows)
    assert mean_diff(images[3], cpu_reference(FILES[1])) <= 6.0


def test_window_outside_the_image_is_refused():
    windows = torch.tensor([[0, 0, SIZES[0][0] + 1, SIZES[0][1]]], dtype=torch.int64)
    _, status = nvjpeg.decode_jpegs(FILES[:1], windows, 0.0, torch.device("cuda"))
    assert status.tolist()[0] > 0


def test_decodes_on_the_current_stream():
    stream = torch.cuda.Stream()
    windows = whole(SIZES)
    with torch.cuda.stream(stream):
        flat, _ = nvjpeg.decode_jpegs(FILES, windows, 0.65, torch.device("cuda"))
        total = flat.sum(dtype=torch.int64)  # ordered after the decode on `stream`
    stream.synchronize()
    reference, _ = nvjpeg.decode_jpegs(FILES, windows, 0.65, torch.device("cuda"))
    torch.cuda.synchronize()
    assert total.item() == reference.sum(dtype=torch.int64).item()


@pytest.mark.parametrize("hw_load", [0.0, 0.5, 1.0])
def test_start_and_finish_decode_as_decode_jpegs(hw_load):
    """The two halves: the hardware decoder's share is pending until finish, whose status
    and pixels are decode_jpegs'; two batches may be in flight at once."""
    device = torch.device("cuda")
    windows = whole(SIZES)
    reference, reference_status = nvjpeg.decode_jpegs(FILES, windows, hw_load, device)
    reversed_reference, _ = nvjpeg.decode_jpegs(FILES[::-1], whole(SIZES[::-1]), hw_load, device)
    first = nvjpeg.decode_jpegs_start(FILES, windows, hw_load, device)
    second = nvjpeg.decode_jpegs_start(FILES[::-1], whole(SIZES[::-1]), hw_load, device)
    for flat, status, pending in (first, second):
        on_hardware = status == nvjpeg.PENDING
        assert bool(on_hardware.any()) == (hw_load > 0 and nvjpeg.has_hardware_decoder(device))
        assert (status[~on_hardware] == nvjpeg.BY_HYBRID).all()
        final = nvjpeg.decode_jpegs_finish(pending)
        assert (final[on_hardware] == nvjpeg.BY_HARDWARE).all() and (final[~on_hardware] == status[~on_hardware]).all()
        assert torch.equal(nvjpeg.decode_jpegs_finish(pending), final)  # finished: the same again
    assert torch.equal(first[0], reference) and torch.equal(nvjpeg.decode_jpegs_finish(first[2]), reference_status)
    assert torch.equal(second[0], reversed_reference)


def test_finish_orders_the_current_stream():
    device = torch.device("cuda")
    windows = whole(SIZES)
    reference, _ = nvjpeg.decode_jpegs(FILES, windows, 1.0, device)
    decode_stream, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(decode_stream):
        flat, _, pending = nvjpeg.decode_jpegs_start(FILES, windows, 1.0, device)
    with torch.cuda.stream(consumer):
        consumer.wait_stream(decode_stream)
        nvjpeg.decode_jpegs_finish(pending)
        copy = flat.clone()  # ordered after the hardware decoder's work by finish
    consumer.synchronize()
    assert torch.equal(copy, reference)


def test_a_batch_dropped_unfinished_leaves_the_engine_well():
    device = torch.device("cuda")
    windows = whole(SIZES)
    reference, _ = nvjpeg.decode_jpegs(FILES, windows, 1.0, device)
    for _ in range(4):  # the dropped batches' memory and staging are reused safely
        nvjpeg.decode_jpegs_start(FILES, windows, 1.0, device)
    flat, _ = nvjpeg.decode_jpegs(FILES, windows, 1.0, device)
    assert torch.equal(flat, reference)


def test_batches_of_different_sizes_share_one_allocation_size():
    # Whole 1000x1000 images, batches of 10, 8 and 9 (30, 24 and 27 MB out), the previous one
    # alive (in `flat`) while the next decodes, as in a pipeline: every output is its batch's
    # exact bytes, in an allocation of one size, so that torch's caching allocator reuses
    # blocks instead of reserving more.
    device = torch.device("cuda")
    big = jpeg(photo(1000, 1000, 3), quality=90)
    allocations, reserved = set(), []
    for k in [10, 8, 9] * 4:
        flat, status = nvjpeg.decode_jpegs([big] * k, whole([(1000, 1000)] * k), 1.0, device)
        assert flat.numel() == k * 1000 * 1000 * 3 and set(status.tolist()) <= {nvjpeg.BY_HARDWARE, nvjpeg.BY_HYBRID}
        allocations.add(flat.untyped_storage().nbytes())
        reserved.append(torch.cuda.memory_reserved())
    assert len(allocations) == 1 and allocations.pop() >= 30 * 10**6
    assert reserved[-1] == reserved[3], reserved


def test_bad_arguments():
    with pytest.raises(RuntimeError, match="windows.*int64 CPU tensor"):
        nvjpeg.decode_jpegs(FILES[:2], whole(SIZES[:1]), 0.5, torch.device("cuda"))
    with pytest.raises(ValueError, match=r"sample 1 must be encoded bytes \(a 1D uint8 CPU tensor\)"):
        nvjpeg.decode_jpegs([FILES[0], FILES[1].view(1, -1)], whole(SIZES[:2]), 0.5, torch.device("cuda"))
    with pytest.raises(ValueError, match=r"decode_jpegs: file 0's span \(0, 9\) lies outside `data` \(4 bytes\)"):
        nvjpeg.decode_jpegs(EncodedFiles(FILES[0][:4], torch.tensor([[0, 9]])), whole(SIZES[:1]), 0.5,
                            torch.device("cuda"))


def test_hardware_decoder_query():
    assert isinstance(nvjpeg.has_hardware_decoder(torch.device("cuda")), bool)


def test_opcheck():
    files = EncodedFiles.of(FILES[:3])
    torch.library.opcheck(torch.ops.torchdali.decode_jpegs.default,
                          (files.data, files.spans, whole(SIZES[:3]), 0.5, torch.device("cuda")),
                          test_utils=("test_schema", "test_autograd_registration"))
