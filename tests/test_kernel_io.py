"""torchdali::read_files and read_ranges (the reads of readers.file and readers.webdataset)
against Python's own file reads."""
import os
import re
import sys
import threading
import time

import pytest
import torch

from torchdali.kernels.io import read_files, read_ranges

SIZES = {"empty": 0, "one_byte": 1, "odd": 4099, "two_mib": 2 * 1024 * 1024 + 3}


@pytest.fixture
def files(tmp_path):
    g = torch.Generator().manual_seed(0)
    paths = []
    for name, size in SIZES.items():
        path = tmp_path / name
        path.write_bytes(torch.randint(0, 256, (size,), generator=g, dtype=torch.uint8).numpy().tobytes())
        paths.append(str(path))
    return paths


def test_contents_in_order(files):
    order = files[::-1] + files  # repeated paths too
    got = read_files(order)
    assert len(got) == len(order) and got.data.dtype == torch.uint8 and got.data.dim() == 1
    for i, path in enumerate(order):
        with open(path, "rb") as f:
            expected = f.read()
        assert got.file(i).numpy().tobytes() == expected
    assert got.data.numel() == sum(os.path.getsize(p) for p in order)  # back to back, nothing between
    empty = read_files([])
    assert len(empty) == 0 and empty.data.numel() == 0


@pytest.mark.parametrize("bad", ["missing", "directory"])
def test_unreadable_file_is_named(files, tmp_path, bad):
    path = str(tmp_path / "nope.jpg") if bad == "missing" else str(tmp_path)
    reason = "No such file or directory" if bad == "missing" else r"not a regular file \(a directory\)"
    with pytest.raises(RuntimeError, match=f"cannot read '{path}': {reason}"):
        read_files(files + [path])


def test_only_regular_files_are_read(tmp_path):
    """A FIFO (also behind a *.jpg link) or a device is named, never opened for a read that
    blocks or never ends; run in a subprocess, so that a blocking open fails the test."""
    import subprocess
    import sys

    fifo, link = tmp_path / "pipe.jpg", tmp_path / "link.jpg"
    os.mkfifo(fifo)
    link.symlink_to(fifo)
    code = ("import sys\nfrom torchdali.kernels.io import read_files\n"
            "for path in sys.argv[1:]:\n"
            "    try:\n        read_files([path])\n    except RuntimeError as e:\n        print(e)\n")
    out = subprocess.run([sys.executable, "-c", code, str(fifo), str(link), "/dev/zero"], capture_output=True,
                         text=True, timeout=120).stdout.splitlines()
    assert out == [f"cannot read '{fifo}': not a regular file (a FIFO)",
                   f"cannot read '{link}': not a regular file (a FIFO)",
                   "cannot read '/dev/zero': not a regular file (a device)"]


def test_files_without_a_size_and_names_that_are_not_utf8(tmp_path):
    """/proc's files report no size and are read to their end; a name os.listdir gives with
    surrogate escapes (not UTF-8) is read, or named when it cannot be."""
    status = read_files(["/proc/self/status"])
    assert status.data.numel() > 0 and status.file(0).numpy().tobytes().startswith(b"Name:")
    latin = tmp_path / os.fsdecode(b"caf\xe9.jpg")
    latin.write_bytes(b"\xff\xd8 bytes")
    (name,) = os.listdir(tmp_path)
    got = read_files([os.path.join(tmp_path, name), "/proc/self/status"])
    assert got.file(0).numpy().tobytes() == b"\xff\xd8 bytes"
    missing = os.path.join(tmp_path, os.fsdecode(b"gone\xe9.jpg"))
    with pytest.raises(RuntimeError, match=rf"cannot read {re.escape(repr(missing))}: No such file or directory"):
        read_files([missing])


def test_runs_without_the_gil(tmp_path):
    """Another Python thread keeps running while the reads are under way: with the GIL
    held, it would get at most a switch interval or two (5 ms each) of the call; it must get
    five intervals' worth (a bound that holds on a loaded machine, where it gets less than
    its share of the cores)."""
    path = tmp_path / "big"
    path.write_bytes(os.urandom(8 << 20))
    read_files([str(path)])  # page cache warm
    ticks, stop = [0], threading.Event()

    def spin():
        while not stop.is_set():
            ticks[0] += 1

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        before, start = ticks[0], time.perf_counter()
        time.sleep(0.05)
        rate = (ticks[0] - before) / (time.perf_counter() - start)
        before, start = ticks[0], time.perf_counter()
        read_files([str(path)] * 48)
        elapsed = time.perf_counter() - start
        during = ticks[0] - before
    finally:
        stop.set()
        thread.join()
    assert elapsed > 0.04, "the reads were too quick to tell"
    assert during > rate * 5 * sys.getswitchinterval()


def test_ranges_in_order(files):
    """Random ranges of every file (empty ones, whole files, the same file many times), in
    the order given and back to back."""
    g = torch.Generator().manual_seed(1)
    paths, starts, lengths, expected = [], [], [], b""
    for _ in range(41):
        path = files[int(torch.randint(0, len(files), (1,), generator=g))]
        size = os.path.getsize(path)
        start = int(torch.randint(0, size + 1, (1,), generator=g))
        length = int(torch.randint(0, size - start + 1, (1,), generator=g))
        with open(path, "rb") as f:
            f.seek(start)
            expected += f.read(length)
        paths.append(path), starts.append(start), lengths.append(length)
    paths.append(files[-1]), starts.append(0), lengths.append(os.path.getsize(files[-1]))
    with open(files[-1], "rb") as f:
        expected += f.read()
    got = read_ranges(paths, starts, lengths)
    assert got.dtype == torch.uint8 and got.dim() == 1 and got.numpy().tobytes() == expected
    assert read_ranges([], [], []).numel() == 0


def test_ranges_errors_name_the_file(files, tmp_path):
    odd = files[2]  # 4099 bytes
    with pytest.raises(RuntimeError, match=f"cannot read '{odd}': it ends at byte 4099, before the 10 bytes "
                                           r"from 4090 \(was it truncated\?\)"):
        read_ranges(files[:2] + [odd], [0, 0, 4090], [0, 1, 10])
    missing = str(tmp_path / "nope.tar")
    with pytest.raises(RuntimeError, match=f"cannot read '{missing}': No such file or directory"):
        read_ranges([odd, missing], [0, 0], [5, 5])
    with pytest.raises(ValueError, match="same length, got 2, 1 and 2"):
        read_ranges([odd, odd], [0], [1, 1])
    with pytest.raises(ValueError, match="starts at -1 with length 3; neither may be negative"):
        read_ranges([odd], [-1], [3])
    latin = tmp_path / os.fsdecode(b"caf\xe9.tar")
    latin.write_bytes(b"0123456789")
    assert read_ranges([str(latin), str(latin)], [2, 7], [3, 1]).numpy().tobytes() == b"2347"


def test_opcheck(files):
    torch.library.opcheck(torch.ops.torchdali.read_files.default, (files,))
    torch.library.opcheck(torch.ops.torchdali.read_ranges.default, (files, [0, 0, 7, 100], [0, 1, 9, 4000]))


def test_torch_compile_fullgraph(files):
    def f(paths):
        got = read_files(paths)
        return got.data.sum(dtype=torch.int64), got.spans

    torch._dynamo.reset()
    total, spans = torch.compile(f, fullgraph=True, backend="aot_eager")(files)
    expected = read_files(files)
    assert int(total) == int(expected.data.sum(dtype=torch.int64)) and torch.equal(spans, expected.spans)


# --- torchdali::jpeg_headers against a plain Python parser -------------------------------

def reference_header(buf):
    """(is_jpeg, complete, orientation, subsampled, height, width) of encoded bytes, read as
    the JPEG standard lays out the marker segments (the decoders' former Python parser)."""
    if buf[:3] != b"\xff\xd8\xff":
        return (0, 0, 1, 1, 0, 0)
    complete = int(b"\xff\xd9" in buf[-64:])
    orientation, subsampled, height, width = 1, 1, 0, 0
    pos = 2
    while pos + 4 <= len(buf) and buf[pos] == 0xFF:
        marker, length = buf[pos + 1], int.from_bytes(buf[pos + 2:pos + 4], "big")
        if marker == 0xDA:
            break
        seg = buf[pos + 4:pos + 2 + length]
        if marker == 0xE1 and seg[:6] == b"Exif\0\0" and orientation == 1:
            orientation = reference_orientation(seg[6:])
        elif 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC) and len(seg) >= 6:
            height, width = int.from_bytes(seg[1:3], "big"), int.from_bytes(seg[3:5], "big")
            factors = {seg[7 + 3 * k] for k in range(seg[5]) if 8 + 3 * k <= len(seg)}
            subsampled = int(len(factors) > 1)
        pos += 2 + length
    return (1, complete, orientation, subsampled, height, width)


def reference_orientation(tiff):
    order = {b"II": "little", b"MM": "big"}.get(tiff[:2])
    if order is None or len(tiff) < 8:
        return 1
    ifd = int.from_bytes(tiff[4:8], order)
    count = int.from_bytes(tiff[ifd:ifd + 2], order) if ifd + 2 <= len(tiff) else 0
    for k in range(count):
        entry = tiff[ifd + 2 + 12 * k:ifd + 14 + 12 * k]
        if len(entry) == 12 and int.from_bytes(entry[:2], order) == 0x0112:
            value = int.from_bytes(entry[8:10], order)
            return value if 1 <= value <= 8 else 1
    return 1


def jpeg_bytes(h, w, seed, **save_args):
    import io
    import numpy as np
    from PIL import Image
    rgb = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "JPEG", **save_args)
    return buf.getvalue()


def exif_args(orientation, order="big"):
    """An EXIF block holding only the orientation tag, in either TIFF byte order."""
    def n(v, size):
        return v.to_bytes(size, order)
    entry = n(0x0112, 2) + n(3, 2) + n(1, 4) + n(orientation, 2) + b"\0\0"  # SHORT, one value
    tiff = (b"II*\0" if order == "little" else b"MM\0*") + n(8, 4) + n(1, 2) + entry + n(0, 4)
    return dict(exif=b"Exif\0\0" + tiff)


def test_jpeg_headers_match_the_reference_on_real_and_damaged_files():
    from torchdali.kernels.io import JPEG_FIELDS, jpeg_headers
    gen = torch.Generator().manual_seed(1)
    files = [jpeg_bytes(13, 29, 0), jpeg_bytes(40, 17, 1, subsampling=0), jpeg_bytes(9, 9, 2, progressive=True),
             jpeg_bytes(31, 22, 3, **exif_args(6)), jpeg_bytes(8, 35, 4, **exif_args(3)),
             jpeg_bytes(5, 7, 5, subsampling=1), b"", b"\xff", b"\xff\xd8", b"\x89PNG\r\n\x1a\n" + b"\0" * 30]
    damaged = []
    for blob in files[:6]:  # cut at random places, random bytes written over the headers
        for _ in range(12):
            cut = int(torch.randint(0, len(blob) + 1, (1,), generator=gen))
            damaged.append(blob[:cut])
            junk = bytearray(blob)
            at = int(torch.randint(2, min(len(blob), 700), (1,), generator=gen))
            junk[at:at + 9] = torch.randint(0, 256, (9,), generator=gen, dtype=torch.uint8).numpy().tobytes()
            damaged.append(bytes(junk))
    blobs = files + damaged
    tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) if b else torch.zeros(0, dtype=torch.uint8)
               for b in blobs]
    got = jpeg_headers(tensors)
    assert got.dtype == torch.int64 and tuple(got.shape) == (len(blobs), len(JPEG_FIELDS))
    for i, blob in enumerate(blobs):
        assert tuple(got[i].tolist()) == reference_header(blob), (i, len(blob))
    # What the real files say: size, EXIF orientation (both byte orders), subsampling.
    assert got[0].tolist() == [1, 1, 1, 1, 13, 29] and got[1].tolist() == [1, 1, 1, 0, 40, 17]
    assert got[3, 2] == 6 and got[4, 2] == 3
    little = jpeg_bytes(6, 6, 7, **exif_args(8, "little"))
    assert little.find(b"II*\0") > 0 and jpeg_headers([torch.frombuffer(bytearray(little), dtype=torch.uint8)])[0, 2] == 8
    assert jpeg_headers([]).shape == (0, len(JPEG_FIELDS))


def test_jpeg_headers_bad_input_and_opcheck():
    from torchdali.kernels.io import EncodedFiles, jpeg_headers
    with pytest.raises(ValueError, match="sample 1 must be encoded bytes"):
        jpeg_headers([torch.zeros(4, dtype=torch.uint8), torch.zeros(2, 2, dtype=torch.uint8)])
    with pytest.raises(ValueError, match=r"jpeg_headers: `data` must be a 1-D uint8 CPU tensor"):
        torch.ops.torchdali.jpeg_headers.default(torch.zeros(4), torch.zeros((1, 2), dtype=torch.int64))
    with pytest.raises(ValueError, match=r"jpeg_headers: file 1's span \(2, 3\) lies outside `data` \(4 bytes\)"):
        torch.ops.torchdali.jpeg_headers.default(torch.zeros(4, dtype=torch.uint8), torch.tensor([[0, 2], [2, 3]]))
    blob = torch.frombuffer(bytearray(jpeg_bytes(11, 5, 3)), dtype=torch.uint8)
    files = EncodedFiles.of([blob, blob[:100]])
    torch.library.opcheck(torch.ops.torchdali.jpeg_headers.default, (files.data, files.spans))
