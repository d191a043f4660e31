"""The iterators of torchdali.plugin.pytorch against NVIDIA DALI's own
(`nvidia.dali.plugin.pytorch`) over the same file reader: the batch sizes, the labels of
every returned batch, `len()` and `size` over three epochs, for every sharding and padding
configuration × last-batch policy × way of starting the next epoch. Skipped without DALI."""
import warnings

import pytest

import torchdali
from tests.conftest import dali_or_skip

# (files, batch size, num_shards, shard of each pipeline, pad_last_batch, stick_to_shard)
READERS = [
    (7, 2, 1, [0], False, False),
    (7, 2, 1, [0], True, False),
    (10, 3, 3, [0, 1, 2], False, False),
    (10, 3, 3, [0, 1, 2], True, False),
    (10, 3, 3, [0, 1, 2], False, True),
    (10, 3, 3, [0, 1, 2], True, True),
    (10, 4, 3, [1], False, False),
    (11, 4, 2, [0, 1], True, False),
    (5, 4, 2, [0, 1], False, False),
    (13, 2, 4, [3], False, False),
    (13, 5, 4, [0, 2], False, False),
    (6, 2, 2, [0, 1], False, False),
]
POLICIES = ["FILL", "DROP", "PARTIAL"]
# How the next epoch starts: reset() after StopIteration, auto_reset, a new `for` loop, or
# reset() after StopIteration with an ignored reset() after each epoch's first step.
RESTARTS = ["reset", "auto", "for", "early-reset"]
EPOCHS = 3


def _files(tmp_path, n):
    paths = []
    for i in range(n):
        p = tmp_path / f"f{i:02d}.bin"
        p.write_bytes(b"x")
        paths.append(str(p))
    return paths


def _iterator(lib, plugin, files, batch, num_shards, shard_ids, pad, stick, policy, restart, by_reader,
              prepare):
    def make(shard):
        @lib.pipeline_def(batch_size=batch, num_threads=1, device_id=None, seed=3)
        def pipe():
            _, label = lib.fn.readers.file(files=files, labels=list(range(len(files))), name="reader",
                                           shard_id=shard, num_shards=num_shards, pad_last_batch=pad,
                                           stick_to_shard=stick)
            return label
        return pipe()

    pipes = [make(s) for s in shard_ids]
    kwargs = dict(auto_reset=restart == "auto", last_batch_policy=getattr(plugin.LastBatchPolicy, policy),
                  prepare_first_batch=prepare)
    if by_reader:
        kwargs["reader_name"] = "reader"
    else:
        n = len(files)
        kwargs["size"] = sum((s + 1) * n // num_shards - s * n // num_shards for s in shard_ids)
        kwargs["last_batch_padded"] = pad
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plugin.DALIGenericIterator(pipes, ["label"], **kwargs)


def _epochs(make_iterator, restart):
    """Per epoch: len(), size and the labels of every dict of every step; an error
    (its type) where the iterator raises one."""
    record = []
    try:
        it = make_iterator()
        _run_epochs(it, restart, record)
    except (RuntimeError, ValueError, AssertionError) as e:
        record.append(("raised", "ValueError" if isinstance(e, AssertionError) else type(e).__name__))
    return record


def _run_epochs(it, restart, record):
    for _ in range(EPOCHS):
        steps = []
        if restart == "for":
            steps = [[b["label"].flatten().tolist() for b in step] for step in it]
        else:
            while True:
                try:
                    step = next(it)
                except StopIteration:
                    break
                steps.append([b["label"].flatten().tolist() for b in step])
                if restart == "early-reset" and len(steps) == 1:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        it.reset()
            if restart in ("reset", "early-reset"):
                it.reset()
        record.append((len(it), it.size, steps))


@pytest.mark.parametrize("prepare", [True, False], ids=["prepared", "lazy"])
@pytest.mark.parametrize("by_reader", [True, False], ids=["reader_name", "size"])
@pytest.mark.parametrize("restart", RESTARTS)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("config", READERS, ids=lambda c: "n{}-b{}-s{}-{}-pad{:d}-stick{:d}".format(
    c[0], c[1], c[2], "".join(map(str, c[3])), c[4], c[5]))
def test_epochs_match_dali(tmp_path, config, policy, restart, by_reader, prepare):
    dali_or_skip()
    from nvidia import dali
    from nvidia.dali.plugin import pytorch as dali_pytorch

    from torchdali.plugin import pytorch as ours
    n, batch, num_shards, shard_ids, pad, stick = config
    if not by_reader and stick:
        pytest.skip("without reader_name the iterator knows nothing of stick_to_shard")
    files = _files(tmp_path, n)
    args = (files, batch, num_shards, shard_ids, pad, stick, policy, restart, by_reader, prepare)
    expected = _epochs(lambda: _iterator(dali, dali_pytorch, *args), restart)
    got = _epochs(lambda: _iterator(torchdali, ours, *args), restart)
    assert got == expected


@pytest.mark.parametrize("tag", ["sparse_list", "sparse_coo"])
@pytest.mark.parametrize("policy", POLICIES)
def test_ragged_iterator_matches_dali(tmp_path, tag, policy):
    dali_or_skip()
    from nvidia import dali
    from nvidia.dali.plugin import pytorch as dali_pytorch

    from torchdali.plugin import pytorch as ours
    files = []
    for i in range(7):
        (tmp_path / f"{i}.bin").write_bytes(bytes(range(1, 2 + 3 * i % 5)))
        files.append(str(tmp_path / f"{i}.bin"))

    def epochs(lib, plugin, tag):
        @lib.pipeline_def(batch_size=3, num_threads=1, device_id=None)
        def pipe():
            return tuple(lib.fn.readers.file(files=files, name="r"))

        it = plugin.DALIRaggedIterator(pipe(), ["data", "label"], reader_name="r", auto_reset=True,
                                       output_types=[tag, "dense"],
                                       last_batch_policy=getattr(plugin.LastBatchPolicy, policy))
        out = []
        for _ in range(2):
            for (step,) in it:
                out.append((_padded(step["data"]), step["label"].flatten().tolist()))
        return out

    # DALI cannot cut a sparse tensor (PARTIAL): there, its lists are the reference.
    dali_tag = "sparse_list" if policy == "PARTIAL" else tag
    assert epochs(torchdali, ours, tag) == epochs(dali, dali_pytorch, dali_tag)


def _padded(data):
    """A list of 1D samples or a sparse COO batch as rows padded with zeros."""
    if not isinstance(data, list):
        return data.to_dense().tolist()
    longest = max(len(t) for t in data)
    return [t.tolist() + [0] * (longest - len(t)) for t in data]
