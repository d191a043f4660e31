"""The WebDataset example and its tools: an image folder converted to indexed shards gives
readers.webdataset the samples readers.file gives over the folder (bytes and labels, in the
same order, locally and over the local HTTP server), and the example trains from the shards,
locally and with --serve."""
import importlib.util
import pathlib

import numpy as np
import pytest
import torch

from torchdali import fn, pipeline_def, types
from torchdali.sample_data import write_sample_dataset
from torchdali.tools.folder2wds import write_shards
from torchdali.tools.serve import serving

EXAMPLES = pathlib.Path(__file__).parent.parent / "examples"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_sample_dataset(str(tmp_path_factory.mktemp("images")), num_images=19, num_classes=3,
                                min_size=40, max_size=72)


@pipeline_def(batch_size=4, num_threads=1, device_id=None)
def files(root):
    return fn.readers.file(file_root=root)


@pipeline_def(batch_size=4, num_threads=1, device_id=None)
def shards(paths, index_paths):
    return fn.readers.webdataset(paths=paths, index_paths=index_paths, ext=["jpg", "cls"],
                                 dtypes=[types.UINT8, types.INT32])


def samples(pipe, n):
    pipe.build()
    out = []
    while len(out) < n:
        data, labels = pipe.run()
        out += [(np.asarray(d).tobytes(), int(np.asarray(l).reshape(-1)[0])) for d, l in zip(data, labels)]
    return out[:n]


@pytest.mark.parametrize("shard_size", [1, 5, 19, 64])
@pytest.mark.parametrize("remote", [False, True])
def test_shards_hold_the_folders_samples_in_its_order(folder, tmp_path, shard_size, remote):
    if remote:
        pytest.importorskip("aiohttp", reason="fsspec reads http(s) URLs with aiohttp")
    written = write_shards(folder, str(tmp_path), shard_size)
    assert len(written) == -(-19 // shard_size)
    tars, indexes = [t for t, _ in written], [i for _, i in written]
    expected = samples(files(folder), 19)
    assert sorted({label for _, label in expected}) == [0, 1, 2]
    if not remote:
        assert samples(shards(tars, indexes), 19) == expected
        return
    with serving(str(tmp_path)) as url:
        def urls(paths):
            return [f"{url}/{pathlib.Path(p).name}" for p in paths]
        assert samples(shards(urls(tars), urls(indexes)), 19) == expected


@pytest.mark.parametrize("serve", [False, True])
def test_example_trains_from_the_shards(folder, tmp_path, monkeypatch, capsys, serve):
    if serve:
        pytest.importorskip("aiohttp", reason="fsspec reads http(s) URLs with aiohttp")
    monkeypatch.syspath_prepend(str(EXAMPLES))  # the example imports its model from ddp_train.py
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = importlib.util.spec_from_file_location("webdataset_train", EXAMPLES / "webdataset_train.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    losses = example.main(["--data", folder, "--shards", str(tmp_path / "shards"), "--shard-size", "6",
                           "--batch-size", "4", "--image-size", "32", "--epochs", "2"] + ["--serve"] * serve)
    assert len(losses) == 2 * (19 // 4) and torch.isfinite(losses).all()
    out = capsys.readouterr().out
    assert "4 shards (with index files)" in out and ("reading the shards from http://" in out) == serve, out
