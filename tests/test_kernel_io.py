"""torchdali::read_files (the reads of readers.file) against Python's own file reads."""
import os
import threading
import time

import pytest
import torch

from torchdali.kernels.io import read_files

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
    outs = read_files(order)
    assert len(outs) == len(order)
    for path, out in zip(order, outs):
        with open(path, "rb") as f:
            expected = f.read()
        assert out.dtype == torch.uint8 and out.dim() == 1 and out.is_contiguous()
        assert out.numpy().tobytes() == expected
    assert read_files([]) == []


@pytest.mark.parametrize("bad", ["missing", "directory"])
def test_unreadable_file_is_named(files, tmp_path, bad):
    path = str(tmp_path / "nope.jpg") if bad == "missing" else str(tmp_path)
    reason = "No such file or directory" if bad == "missing" else "Is a directory"
    with pytest.raises(RuntimeError, match=f"cannot read '{path}': {reason}"):
        read_files(files + [path])


def test_runs_without_the_gil(tmp_path):
    """Another Python thread keeps running while the reads are under way: with the GIL
    held, it would get at most a switch interval or two (5 ms each) of the call."""
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
    assert during > 0.3 * rate * elapsed


def test_opcheck(files):
    torch.library.opcheck(torch.ops.torchdali.read_files.default, (files,))


def test_torch_compile_fullgraph(files):
    def f(paths):
        return [t.sum(dtype=torch.int64) for t in read_files(paths)]

    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(files)
    assert [int(x) for x in got] == [int(t.sum(dtype=torch.int64)) for t in read_files(files)]
