"""BlockReader (torchdali/operators/blocks.py): ranges of files at URLs cut from aligned
blocks, each fetched once while kept, the blocks held bounded by the reader's window."""
import os

import numpy as np
import pytest

from torchdali import storage
from torchdali.operators import blocks

fsspec = pytest.importorskip("fsspec")


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.setattr(storage, "cache_dir", None)
    monkeypatch.delenv(storage.CACHE_ENV, raising=False)
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 1024)
    rng = np.random.default_rng(0)
    data = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in (40_000, 3_000)]
    urls = [f"memory://blocks-{os.getpid()}-{id(tmp_path)}/{k}.bin" for k in range(len(data))]
    for url, contents in zip(urls, data):
        fsspec.filesystem("memory").pipe(url[len("memory://") - 1:], contents)
    calls = []
    read_bytes = storage.read_bytes
    monkeypatch.setattr(storage, "read_bytes", lambda p, s=0, n=None: calls.append((p, s, n)) or read_bytes(p, s, n))
    return urls, data, calls


def fail(path, reason):
    return RuntimeError(f"{path}: {reason}")


def test_a_window_moving_through_the_files_reads_each_block_once_and_holds_few(files):
    urls, data, calls = files
    reader = blocks.BlockReader(urls, window_samples=4, sample_bytes=300, fail=fail)  # room: 2,400 + 2,048 bytes
    rng = np.random.default_rng(1)
    start = 0
    while start < len(data[0]) - 1200:  # batches of 4 ranges from a window of 1,200 bytes moving forward
        offsets = np.sort(rng.integers(start, start + 1200 - 300, 4))
        sizes = rng.integers(0, 300, 4)
        got = reader.read(np.zeros(4, np.int64), offsets, sizes, None)
        assert [g.tobytes() for g in got] == [data[0][o:o + n] for o, n in zip(offsets, sizes)]
        assert reader.held <= reader.room and reader.held == sum(len(b) for b in reader.blocks.values())
        start += 300
    fetched = [(s, n) for p, s, n in calls]
    assert len(fetched) == len(set(fetched))  # no block fetched twice: the window's blocks stay
    tail = reader.read(np.array([1, 0]), np.array([2_900, 39_990]), np.array([100, 10]), None)
    assert [t.tobytes() for t in tail] == [data[1][2_900:3_000], data[0][39_990:]]
    assert calls[-1][2] == 3_000 - 2 * 1024  # a file's last block is short


def test_a_range_across_blocks_and_a_file_shorter_than_its_ranges(files):
    urls, data, calls = files
    reader = blocks.BlockReader(urls, window_samples=1, sample_bytes=10, fail=fail)
    (got,) = reader.read(np.array([0]), np.array([1000]), np.array([3000]), None)
    assert got.tobytes() == data[0][1000:4000] and len(calls) == 4  # blocks 0 to 3
    with pytest.raises(RuntimeError, match=r"1.bin: it ends at byte 3000, before the 200 bytes from 2900 "
                                           r"\(was it truncated\?\)"):
        reader.read(np.array([1]), np.array([2900]), np.array([200]), None)
    with pytest.raises(RuntimeError, match="nope.bin: "):
        blocks.BlockReader([urls[0].replace("0.bin", "nope.bin")], 1, 10, fail).read(
            np.array([0]), np.array([0]), np.array([5]), None)
