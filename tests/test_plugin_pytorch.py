"""torchdali.plugin.pytorch: zero-copy hand-over, batches that stay valid, epochs and
StopIteration, auto_reset, prepare_first_batch, the ragged iterator, feed_ndarray and
the errors on bad arguments. Agreement with DALI's iterators: test_plugin_pytorch_dali.py."""
import numpy as np
import pytest
import torch

from tests.conftest import requires_cuda
from torchdali import fn, pipeline_def
from torchdali.plugin.pytorch import (DALIClassificationIterator, DALIGenericIterator, DALIRaggedIterator,
                                      LastBatchPolicy, feed_ndarray)

DEVICES = ["cpu", pytest.param("gpu", marks=requires_cuda)]


def counting_pipeline(batches, device="cpu", double=False, batch_size=2, **kwargs):
    """A pipeline over the given list of batches (torch tensors), stopping after the last;
    `double` adds an operator, so the outputs are the pipeline's own new tensors."""
    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None if device == "cpu" else 0, **kwargs)
    def pipe():
        x = fn.external_source(batches, device=device)
        return x * 2 if double else x

    return pipe()


def torch_batches(n, device="cpu", shape=(2, 3)):
    return [torch.full(shape, k, dtype=torch.float32, device="cuda" if device == "gpu" else "cpu")
            for k in range(n)]


# --- zero copy, lifetimes and streams ---

@pytest.mark.parametrize("device", DEVICES)
def test_dense_batches_are_handed_over_without_a_copy(device):
    src = torch_batches(3, device)
    it = DALIGenericIterator(counting_pipeline(src, device), ["x"])
    got = [step[0]["x"] for step in it]
    assert [t.data_ptr() for t in got] == [t.data_ptr() for t in src]


@pytest.mark.parametrize("device", DEVICES)
def test_returned_tensor_is_the_pipelines_output(device, monkeypatch):
    pipe = counting_pipeline(torch_batches(3, device), device, double=True)
    shared = []
    real = pipe.share_outputs

    def spy(cuda_stream=None):
        shared.append(real(cuda_stream))
        return shared[-1]

    monkeypatch.setattr(pipe, "share_outputs", spy)
    it = DALIGenericIterator(pipe, ["x"])
    got = [step[0]["x"] for step in it]
    assert [t.data_ptr() for t in got] == [outs[0].as_torch().data_ptr() for outs in shared]


@pytest.mark.parametrize("device", DEVICES)
def test_kept_batches_are_not_overwritten_by_later_iterations(device):
    n = 6
    it = DALIGenericIterator(counting_pipeline(torch_batches(n, device), device, double=True), ["x"],
                             auto_reset=True)
    kept = []
    for _ in range(2):  # two epochs: the second one's buffers must not reuse the first's
        for step in it:
            kept.append(step[0]["x"])
    assert len(kept) == 2 * n
    for i, t in enumerate(kept):
        assert torch.equal(t.cpu(), torch.full((2, 3), 2.0 * (i % n))), f"batch {i}"


@requires_cuda
def test_gpu_batches_are_ready_on_the_consumers_stream():
    it = DALIGenericIterator(counting_pipeline(torch_batches(4, "gpu", (2, 1 << 20)), "gpu", double=True),
                             ["x"])
    stream = torch.cuda.Stream()
    sums = []
    with torch.cuda.stream(stream):
        for step in it:
            sums.append(step[0]["x"].sum())  # no synchronisation: the stream must wait by itself
    stream.synchronize()
    assert [s.item() for s in sums] == [2.0 * k * 2 * (1 << 20) for k in range(4)]


# --- epochs ---

def test_stop_iteration_until_reset_then_auto_reset_restarts():
    src = torch_batches(3)
    it = DALIGenericIterator(counting_pipeline(src), ["x"])
    assert [s[0]["x"][0, 0].item() for s in it] == [0, 1, 2]
    for _ in range(2):
        with pytest.raises(StopIteration):
            next(it)
    it.reset()
    assert [s[0]["x"][0, 0].item() for s in it] == [0, 1, 2]
    auto = DALIGenericIterator(counting_pipeline(src), ["x"], auto_reset="yes")
    for _ in range(2):
        assert [s[0]["x"][0, 0].item() for s in auto] == [0, 1, 2]


@pytest.mark.parametrize("prepare", [True, False])
def test_prepare_first_batch_runs_the_pipeline_at_construction_only_when_asked(prepare):
    calls = []

    def source(info):
        calls.append(info)
        return [np.int32([info])] * 2

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, exec_async=False, exec_pipelined=False)
    def pipe():
        return fn.external_source(source, batch_info=False)

    it = DALIGenericIterator(pipe(), ["x"], size=4, prepare_first_batch=prepare)
    assert bool(calls) == prepare
    assert [s[0]["x"].flatten().tolist() for s in it] == [[0, 0], [1, 1]]


def test_reader_epochs_len_and_size(tmp_path):
    files = []
    for i in range(7):
        (tmp_path / f"{i}.bin").write_bytes(b"x")
        files.append(str(tmp_path / f"{i}.bin"))

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        data, label = fn.readers.file(files=files, name="r", pad_last_batch=True)
        return data, label

    expected = {LastBatchPolicy.FILL: [[0, 1], [2, 3], [4, 5], [6, 6]],
                LastBatchPolicy.DROP: [[0, 1], [2, 3], [4, 5]],
                LastBatchPolicy.PARTIAL: [[0, 1], [2, 3], [4, 5], [6]]}
    for policy, batches in expected.items():
        it = DALIClassificationIterator(pipe(), reader_name="r", last_batch_policy=policy, auto_reset=True)
        assert len(it) == len(batches) and it.size == 7
        for _ in range(2):
            assert [s[0]["label"].flatten().tolist() for s in it] == batches


def test_reset_in_the_middle_of_an_epoch_is_ignored_with_a_warning():
    it = DALIGenericIterator(counting_pipeline(torch_batches(3)), ["x"], size=6)
    next(it)
    with pytest.warns(RuntimeWarning, match="resetting while epoch is not finished"):
        it.reset()
    assert [s[0]["x"][0, 0].item() for s in it] == [1, 2]


def test_pipeline_reset_keeps_prefetched_batches_while_the_epoch_runs():
    p = counting_pipeline(torch_batches(4), prefetch_queue_depth=3)
    assert p.run()[0].as_torch()[0, 0].item() == 0
    p.reset()  # not after StopIteration: nothing to do, as in DALI
    assert [p.run()[0].as_torch()[0, 0].item() for _ in range(3)] == [1, 2, 3]


def test_fill_last_batch_is_deprecated_and_maps_to_a_policy():
    """fill_last_batch=True is FILL (the last batch keeps its size), False is PARTIAL."""
    for fill, last in ((True, 2), (False, 1)):
        with pytest.warns(Warning, match="last_batch_policy"):
            it = DALIGenericIterator(counting_pipeline(torch_batches(3)), ["x"], size=5, fill_last_batch=fill)
        assert [s[0]["x"].shape[0] for s in it] == [2, 2, last]


def test_size_without_reader_name_warns_and_partial_trims_the_last_batch():
    with pytest.warns(Warning, match="reader_name"):
        it = DALIGenericIterator(counting_pipeline(torch_batches(3)), ["x"], size=5,
                                 last_batch_policy=LastBatchPolicy.PARTIAL)
    assert len(it) == 3 and [s[0]["x"].shape[0] for s in it] == [2, 2, 1]


@pytest.mark.parametrize("value,auto", [(True, True), ("yes", True), ("on", True), (False, False),
                                        (None, False), ("no", False), ("off", False)])
def test_auto_reset_values(value, auto):
    """With auto_reset, next() goes on into the next epoch; without it, it stops until reset()."""
    it = DALIGenericIterator(counting_pipeline(torch_batches(2)), ["x"], auto_reset=value)
    assert len(list(it)) == 2
    if auto:
        assert next(it)[0]["x"][0, 0].item() == 0
    else:
        with pytest.raises(StopIteration):
            next(it)


# --- ragged outputs ---

def ragged_pipeline():
    samples = [torch.arange(n, dtype=torch.int32) for n in (3, 1, 4)]

    @pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe():
        return fn.external_source(lambda: samples), fn.external_source(lambda: torch.ones(3, 2))

    return pipe(), samples


def test_ragged_iterator_lists_coo_and_dense():
    pipe, samples = ragged_pipeline()
    it = DALIRaggedIterator(pipe, ["list", "dense"], size=3, output_types=[
        DALIRaggedIterator.SPARSE_LIST_TAG, DALIRaggedIterator.DENSE_TAG])
    (step,) = next(it)
    assert all(torch.equal(a, b) for a, b in zip(step["list"], samples))
    assert step["dense"].shape == (3, 2)
    pipe, samples = ragged_pipeline()
    it = DALIRaggedIterator(pipe, ["coo", "dense"], size=3, output_types=[
        DALIRaggedIterator.SPARSE_COO_TAG, DALIRaggedIterator.DENSE_TAG])
    coo = next(it)[0]["coo"]
    dense = torch.zeros(3, 4, dtype=torch.int32)
    for i, s in enumerate(samples):
        dense[i, :len(s)] = s
    assert coo.is_sparse and torch.equal(coo.to_dense(), dense)
    assert coo._nnz() == sum(len(s) for s in samples)


def test_ragged_iterator_partial_trims_lists():
    pipe, samples = ragged_pipeline()
    with pytest.warns(Warning):
        it = DALIRaggedIterator(pipe, ["list", "dense"], size=2, last_batch_policy=LastBatchPolicy.PARTIAL,
                                output_types=[DALIRaggedIterator.SPARSE_LIST_TAG, DALIRaggedIterator.DENSE_TAG])
    (step,) = next(it)
    assert len(step["list"]) == 2 and step["dense"].shape == (2, 2)


def test_generic_iterator_rejects_ragged_outputs_naming_them():
    pipe, _ = ragged_pipeline()
    with pytest.raises(RuntimeError, match="output 'a' is not dense.*DALIRaggedIterator"):
        DALIGenericIterator(pipe, ["a", "b"])


# --- feed_ndarray ---

@pytest.mark.parametrize("device", DEVICES)
def test_feed_ndarray_copies_a_batch_into_a_tensor(device):
    pipe = counting_pipeline(torch_batches(2, device), device, double=True)
    (out,) = pipe.run()
    target = torch.empty(2, 3, device="cuda" if device == "gpu" else "cpu")
    stream = torch.cuda.current_stream() if device == "gpu" else None
    assert feed_ndarray(out, target, cuda_stream=stream) is target
    assert torch.equal(target.cpu(), torch.zeros(2, 3)) and target.data_ptr() != out.as_torch().data_ptr()
    assert torch.equal(feed_ndarray(out[1], torch.empty(3, device=target.device)).cpu(), torch.zeros(3))
    with pytest.raises(TypeError, match="element type"):
        feed_ndarray(out, torch.empty(2, 3, dtype=torch.int32, device=target.device))
    with pytest.raises(ValueError, match="shapes do not match"):
        feed_ndarray(out, torch.empty(3, 2, device=target.device))


# --- bad arguments ---

def reader_pipeline(tmp_path, batch_size=2):
    (tmp_path / "a.bin").write_bytes(b"x")

    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None)
    def pipe():
        return fn.readers.file(files=[str(tmp_path / "a.bin")], name="r")

    return pipe()


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(output_map=["a"]), ValueError, r"output_map has 1 names \['a'\] but pipeline 0 has 2 outputs"),
    (dict(output_map=["a", "a"]), ValueError, r"distinct; repeated: \['a'\]"),
    (dict(size=5, reader_name="r"), ValueError, "size or reader_name, not both"),
    (dict(reader_name="nope"), ValueError, "no reader named 'nope'"),
    (dict(reader_name="r", last_batch_padded=True), ValueError, "last_batch_padded"),
    (dict(auto_reset="maybe"), ValueError, "auto_reset must be.*'maybe'"),
    (dict(size=0), ValueError, "size cannot be 0"),
    (dict(last_batch_policy="DROP"), ValueError, "last_batch_policy must be"),
])
def test_bad_arguments(tmp_path, kwargs, error, match):
    kwargs.setdefault("output_map", ["data", "label"])
    with pytest.raises(error, match=match):
        DALIGenericIterator(reader_pipeline(tmp_path), **kwargs)


def test_pipelines_must_share_the_batch_size_and_size_is_needed_for_several(tmp_path):
    pipes = [reader_pipeline(tmp_path, 2), reader_pipeline(tmp_path, 3)]
    with pytest.raises(ValueError, match=r"same batch size; got \[2, 3\]"):
        DALIGenericIterator(pipes, ["data", "label"], reader_name="r")
    with pytest.raises(ValueError, match="several pipelines"):
        DALIGenericIterator([reader_pipeline(tmp_path), reader_pipeline(tmp_path)], ["data", "label"])


def test_ragged_iterator_checks_output_types(tmp_path):
    with pytest.raises(ValueError, match="output_types may hold only"):
        DALIRaggedIterator(reader_pipeline(tmp_path), ["a", "b"], reader_name="r", output_types=["dense", "x"])
    with pytest.raises(ValueError, match="1 tags for 2 outputs"):
        DALIRaggedIterator(reader_pipeline(tmp_path), ["a", "b"], reader_name="r", output_types=["dense"])
