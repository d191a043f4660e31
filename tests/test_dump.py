"""dump_image against DALI's CPU operator: the same files (names and bytes), the batch passed through."""
import os

import numpy as np
import pytest

import torchdali
from conftest import dali_or_skip, requires_cuda, run_operator


def images(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, s, dtype=np.uint8) for s in shapes]


def written(directory):
    """{file name: bytes} of the files in `directory`."""
    return {n: open(os.path.join(directory, n), "rb").read() for n in sorted(os.listdir(directory))}


def dump_with(lib, tmp_path, monkeypatch, ims, **kwargs):
    """(outputs, layout, files written) of lib.fn.dump_image run in a fresh directory."""
    directory = tmp_path / f"{lib.__name__}-{kwargs.get('device', 'cpu')}"
    directory.mkdir()
    monkeypatch.chdir(directory)
    out, layout = run_operator(lib, "dump_image", ims, **kwargs)
    return out, layout, written(directory)


@pytest.mark.parametrize("shapes,kwargs", [
    ([(5, 7, 3), (1, 1, 3), (4, 9, 1)], {"suffix": "ab"}),
    ([(3, 2, 1)], {}),
    ([(6, 11, 3)] * 3, {"suffix": "x y"}),
])
def test_dump_image_writes_dalis_files(tmp_path, monkeypatch, shapes, kwargs):
    dali = dali_or_skip()
    ims = images(shapes)
    expected = dump_with(dali, tmp_path, monkeypatch, ims, **kwargs)
    got = dump_with(torchdali, tmp_path, monkeypatch, ims, **kwargs)
    assert got[2] == expected[2] and len(got[2]) == len(ims)
    assert got[1] == expected[1] == "HWC"
    for g, e, im in zip(got[0], expected[0], ims):
        np.testing.assert_array_equal(g, im)
        np.testing.assert_array_equal(e, im)


def test_dump_image_ppm_format(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ims = [np.array([[[200, 100, 5], [0, 255, 9]]], np.uint8), np.array([[[7]], [[8]]], np.uint8)]
    run_operator(torchdali, "dump_image", ims, suffix="s")
    assert written(tmp_path) == {"0-s-0.ppm": b"P3\n2 1\n255\n200 100 5 0 255 9 \n",
                                 "1-s-0.ppm": b"P2\n1 2\n255\n7 \n8 \n"}


@pytest.mark.parametrize("ims,layout,kwargs,match", [
    ([np.zeros((2, 3, 3), np.float32)], "HWC", {}, "FLOAT is not supported"),
    ([np.zeros((2, 3, 4), np.uint8)], "HWC", {}, "4 channels"),
    ([np.zeros((2, 3), np.uint8)], "HW", {}, "3 dimensions"),
    ([np.zeros((0, 3, 3), np.uint8)], "HWC", {}, "sample 0 is empty"),
    ([np.zeros((2, 3, 3), np.uint8)], "HWC", {"input_layout": "CHW"}, "only HWC"),
    ([np.zeros((2, 3, 3), np.uint8)], "HWC", {"suffix": "no/such/dir"}, "cannot write"),
])
def test_dump_image_errors_where_dali_refuses(tmp_path, monkeypatch, ims, layout, kwargs, match):
    dali = dali_or_skip()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RuntimeError):
        run_operator(dali, "dump_image", ims, layout=layout, **kwargs)
    with pytest.raises(Exception, match=f"dump_image.*{match}|{match}.*dump_image") as info:
        run_operator(torchdali, "dump_image", ims, layout=layout, **kwargs)
    assert "dump_image" in str(info.value)


@requires_cuda
def test_dump_image_gpu_matches_cpu(tmp_path, monkeypatch):
    ims = images([(5, 7, 3), (4, 9, 1)])
    cpu = dump_with(torchdali, tmp_path, monkeypatch, ims, suffix="g")
    gpu = dump_with(torchdali, tmp_path, monkeypatch, ims, suffix="g", device="gpu")
    assert cpu[2] == gpu[2] and len(cpu[2]) == 2
    for g, c in zip(gpu[0], cpu[0]):
        np.testing.assert_array_equal(g, c)
