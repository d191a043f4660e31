"""DALIIterableDataset and the iterators' checkpoints and state_dict(): epochs, len(), set_epoch(), use with
DataLoader, and resuming mid-epoch or at an epoch end on exactly the batches an
uninterrupted run returns (random_shuffle and a random operator, every last-batch policy)."""
import itertools
import json

import pytest
import torch

from torchdali import fn, pipeline_def
from torchdali.plugin.pytorch import DALIGenericIterator, DALIIterableDataset, LastBatchPolicy

from conftest import requires_cuda

POLICIES = [LastBatchPolicy.FILL, LastBatchPolicy.DROP, LastBatchPolicy.PARTIAL]


@pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=7)
def labelled(files, shard_id=0, num_shards=1, pad=False):
    _, label = fn.readers.file(files=files, random_shuffle=True, initial_fill=5, shard_id=shard_id,
                               num_shards=num_shards, pad_last_batch=pad, name="Reader")
    return label, fn.random.uniform(range=[0, 1])


@pytest.fixture
def files(tmp_path):
    paths = []
    for i in range(13):
        (tmp_path / f"f{i:02d}").write_bytes(bytes([i]))
        paths.append(str(tmp_path / f"f{i:02d}"))
    return paths


def dataset(files, policy=LastBatchPolicy.FILL, **kwargs):
    return DALIIterableDataset(labelled, ["label", "r"], last_batch_policy=policy, files=files, **kwargs)


def run_epochs(ds, epochs):
    """(epoch, labels, random values) per batch, from the dataset's epoch up to `epochs`."""
    for e in range(ds.epoch, epochs):
        ds.set_epoch(e)
        for b in ds:
            yield e, b["label"].flatten().tolist(), b["r"].flatten().tolist()


# --- epochs ---

# FILL without padding reads on into the next epoch (3 samples here), which is then shorter;
# PARTIAL returns each sample once per epoch with pad_last_batch (as in DALI).
@pytest.mark.parametrize("policy,sizes", [
    (LastBatchPolicy.FILL, [[4, 4, 4, 4], [4, 4, 4]]), (LastBatchPolicy.DROP, [[4, 4, 4]] * 2),
    (LastBatchPolicy.PARTIAL, [[4, 4, 4, 1]] * 2)])
def test_epochs_len_and_batch_sizes(files, policy, sizes):
    ds = dataset(files, policy, pad=policy == LastBatchPolicy.PARTIAL)
    for epoch in range(2):
        ds.set_epoch(epoch)
        got = [b["label"] for b in ds]
        assert [len(b) for b in got] == sizes[epoch]
        assert len(ds) == len(sizes[epoch])
        labels = torch.cat(got).flatten().tolist()
        if policy == LastBatchPolicy.PARTIAL:
            assert sorted(labels) == list(range(13))  # each sample exactly once
    assert ds.epoch == 2


def test_dataloader_gives_the_same_batches(files):
    direct = [b["label"] for b in dataset(files)]
    loaded = [b["label"] for b in torch.utils.data.DataLoader(dataset(files), batch_size=None)]
    assert len(loaded) == len(direct)
    assert all(torch.equal(a, b) for a, b in zip(loaded, direct))


def test_set_epoch_skips_forward_only(files):
    expected = [batch for batch in run_epochs(dataset(files), 3) if batch[0] == 2]
    ds = dataset(files)
    ds.set_epoch(2)
    assert list(run_epochs(ds, 3)) == expected
    with pytest.raises(ValueError, match=r"set_epoch\(1\).*at epoch 3"):
        ds.set_epoch(1)


def test_abandoned_epoch_is_finished_by_set_epoch(files):
    expected = [batch for batch in run_epochs(dataset(files), 2) if batch[0] == 1]
    ds = dataset(files)
    next(iter(ds))
    ds.set_epoch(1)
    assert list(run_epochs(ds, 2)) == expected


def test_a_built_pipeline_works_but_cannot_be_restored(files):
    ds = DALIIterableDataset(labelled(files=files, enable_checkpointing=True), ["label", "r"])
    assert [b["label"].flatten().tolist() for b in ds] == [b[1] for b in run_epochs(dataset(files), 1)]
    with pytest.raises(ValueError, match="@pipeline_def function instead"):
        ds.load_state_dict(ds.state_dict())


# --- resuming ---

@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("stop", ["mid-epoch", "last batch", "after StopIteration", "next epoch"])
@pytest.mark.parametrize("shards", [dict(), dict(shard_id=1, num_shards=2)])
def test_resume_returns_the_batches_of_an_uninterrupted_run(files, policy, stop, shards):
    reference = list(run_epochs(dataset(files, policy, **shards), 4))
    ds = dataset(files, policy, **shards)
    per_epoch = len(ds)
    first = {"mid-epoch": 2, "last batch": per_epoch, "after StopIteration": per_epoch,
             "next epoch": per_epoch + 1}[stop]
    gen = run_epochs(ds, 4)
    head = list(itertools.islice(gen, first))
    if stop == "after StopIteration":
        assert next(iter(ds), None) is None
    state = json.loads(json.dumps(ds.state_dict()))
    resumed = dataset(files, policy, **shards)
    resumed.load_state_dict(state)
    assert head + list(run_epochs(resumed, 4)) == reference
    assert head + list(gen) == reference  # taking the state does not disturb the original


def test_state_of_a_fresh_dataset_restarts_it(files):
    ds = dataset(files)
    state = ds.state_dict()
    expected = list(run_epochs(ds, 2))
    resumed = dataset(files)
    resumed.load_state_dict(state)
    assert list(run_epochs(resumed, 2)) == expected


def test_iterator_checkpoints_resume_the_iterator(files):
    def make(checkpoint=None):
        pipe = labelled(files=files, enable_checkpointing=True, checkpoint=checkpoint)
        return DALIGenericIterator(pipe, ["label", "r"], reader_name="Reader")

    def rest(it):  # to the end of the epoch (a for loop would reset() the iterator first)
        return [b[0]["label"].tolist() for b in iter(it.__next__, None)]

    it = make()
    next(it), next(it)
    checkpoints = it.checkpoints()
    expected = rest(it)
    assert len(expected) == 2
    assert rest(make(checkpoints[0])) == expected



def iterator(files, policy=LastBatchPolicy.FILL, definition=labelled):
    return DALIGenericIterator(definition(files=files, enable_checkpointing=True), ["label", "r"],
                               reader_name="Reader", last_batch_policy=policy)


def take(it, n):
    """The next n batches (labels, random values), across epoch ends."""
    out = []
    while len(out) < n:
        try:
            b = next(it)
        except StopIteration:
            it.reset()
            continue
        out.append((b[0]["label"].flatten().tolist(), b[0]["r"].flatten().tolist()))
    return out


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("first", [0, 2, 3, 4], ids=["fresh", "mid-epoch", "epoch end", "next epoch"])
def test_iterator_state_dict_rewinds_in_place(files, policy, first):
    it = iterator(files, policy)
    take(it, first)
    state = json.loads(json.dumps(it.state_dict()))
    expected = take(it, 7)
    it.load_state_dict(state)  # back, on pipelines that ran (and prefetched) past the point
    assert take(it, 7) == expected
    other = iterator(files, policy)
    take(other, 5)
    other.load_state_dict(state)  # another iterator of the same definition, moved elsewhere
    assert take(other, 7) == expected


@pipeline_def(batch_size=4, num_threads=1, device_id=0, seed=7)
def labelled_gpu(files):
    _, label = fn.readers.file(files=files, random_shuffle=True, initial_fill=5, name="Reader")
    return label.gpu(), fn.random.uniform(range=[0, 1]).gpu() * 2


@requires_cuda
def test_iterator_state_dict_rewinds_gpu_pipelines_in_place(files):
    it = iterator(files, definition=labelled_gpu)
    take(it, 2)
    state = it.state_dict()
    expected = take(it, 7)
    it.load_state_dict(state)
    assert take(it, 7) == expected


@pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=7)
def labelled_twice(files):
    _, label = fn.readers.file(files=files, random_shuffle=True, initial_fill=5, name="Reader")
    return label, fn.random.uniform(range=[0, 1]) + fn.random.uniform(range=[0, 1])


@pytest.mark.parametrize("bad", ["format", "count", "corrupt", "other definition", "operator state"])
def test_iterator_bad_state_leaves_it_where_it_was(files, bad):
    it = iterator(files)
    take(it, 2)
    expected = iterator(files)
    take(expected, 2)
    state = {"format": "torchdali-iterator", "checkpoints": it.state_dict()["checkpoints"]}
    if bad == "format":
        state["format"] = "torchdali-dataset"
    elif bad == "count":
        state["checkpoints"] *= 2
    elif bad == "corrupt":
        state["checkpoints"] = [state["checkpoints"][0][:40]]
    elif bad == "other definition":
        state = iterator(files, definition=labelled_twice).state_dict()
    else:  # the reader rejects its state after the pipeline dropped its prefetched runs
        checkpoint = json.loads(state["checkpoints"][0])
        checkpoint["operators"]["Reader"] = {"position": "nowhere"}
        state["checkpoints"] = [json.dumps(checkpoint)]
    with pytest.raises(ValueError, match="state_dict|checkpoint"):
        it.load_state_dict(state)
    assert take(it, 6) == take(expected, 6)

# --- bad input ---

def test_errors(files):
    with pytest.raises(TypeError, match="@pipeline_def function or a Pipeline"):
        DALIIterableDataset(lambda: None, ["x"])
    with pytest.raises(ValueError, match=r"pipeline arguments \['files'\]"):
        DALIIterableDataset(labelled(files=files), ["x"], files=files)
    with pytest.raises(ValueError, match="not a state_dict"):
        dataset(files).load_state_dict({"epoch": 1})
    it = DALIGenericIterator(labelled(files=files), ["label", "r"], reader_name="Reader")
    with pytest.raises(ValueError, match="enable_checkpointing=True"):
        it.checkpoints()


def test_two_readers_need_a_reader_name(files):
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def two():
        return fn.readers.file(files=files)[1], fn.readers.file(files=files)[1]

    with pytest.raises(ValueError, match="2 readers.*give reader_name"):
        len(DALIIterableDataset(two, ["a", "b"]))


def test_dataloader_workers_are_refused(files):
    loader = torch.utils.data.DataLoader(dataset(files), batch_size=None, num_workers=2)
    with pytest.raises(ValueError, match="num_workers=2"):
        next(iter(loader))
