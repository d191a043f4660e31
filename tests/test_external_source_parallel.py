"""Parallel external_source: worker processes give exactly the non-parallel run's batches;
errors, dead workers and CUDA-before-fork give clear errors; nothing leaks."""
import ctypes
import faulthandler
import gc
import multiprocessing
import os
import signal
import time
import traceback
import warnings

import numpy as np
import pytest
import torch

import torchdali
from torchdali import fn, pipeline_def, types
from torchdali.pickling import dumps, loads, pickle_by_value

from conftest import dali_or_skip, fork_or_skip, rerun_without_cuda

BATCH = 5


def shm_entries():
    return {n for n in os.listdir("/dev/shm") if n.startswith(f"torchdali-{os.getpid()}-")}


def child_pids():
    """Live children of this process, from /proc (no psutil); not multiprocessing's own
    resource tracker, which 'spawn' starts once for the whole session."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if int(fields[1]) == os.getpid() and fields[0] != "Z" and b"resource_tracker" not in cmdline:
                pids.append(int(d))
    return pids


@pytest.fixture(autouse=True)
def no_leaks():
    before = set(child_pids())
    yield
    gc.collect()
    deadline = time.time() + 5
    while set(child_pids()) - before and time.time() < deadline:
        time.sleep(0.05)
    assert not set(child_pids()) - before, "worker processes left behind"
    assert not multiprocessing.active_children()
    assert not shm_entries(), "shared-memory slots left behind"


def sample_source(info):
    if info.iteration >= 3:
        raise StopIteration
    shape = (info.idx_in_batch + 1, 2)
    return (np.full(shape, info.idx_in_epoch, np.float32),
            np.array([info.idx_in_batch, info.iteration, info.epoch_idx], np.int64))


def growing_source(info):
    """Samples that outgrow their slots from batch to batch (slots are enlarged and mapped again)."""
    if info.iteration >= 4:
        raise StopIteration
    return np.full(1000 * 7 ** info.iteration + info.idx_in_batch, info.idx_in_epoch % 256, np.uint8)


def scalar_source(info):
    """0-d samples (e.g. per-sample conditions) stay 0-d."""
    if info.iteration >= 3:
        raise StopIteration
    return np.int32(info.idx_in_epoch % 2)


def batch_source(info):
    if info.iteration >= 2:
        raise StopIteration
    return np.full((BATCH, 3), info.iteration * 10 + info.epoch_idx, np.uint8)


def make(source, parallel, workers=3, method="fork", pickler=None, pipe_kwargs=None, **kwargs):
    if parallel and method == "fork":
        fork_or_skip()
    @pipeline_def(batch_size=BATCH, num_threads=1, device_id=None, py_num_workers=workers,
                  py_start_method=method, py_callback_pickler=pickler, seed=1, **(pipe_kwargs or {}))
    def pipe():
        return fn.external_source(source, parallel=parallel, **kwargs)

    return pipe()


def epochs(pipe, n=2):
    """All batches of n epochs, as lists of NumPy arrays per output."""
    out = []
    for _ in range(n):
        while True:
            try:
                batches = pipe.run()
            except StopIteration:
                pipe.reset()
                break
            out.append([[np.asarray(b.at(i)) for i in range(len(b))] for b in batches])
    return out


def assert_same(a, b):
    assert len(a) == len(b) and a
    for x, y in zip(a, b):
        for ox, oy in zip(x, y):
            assert len(ox) == len(oy)
            for sx, sy in zip(ox, oy):
                assert sx.dtype == sy.dtype and sx.shape == sy.shape
                np.testing.assert_array_equal(sx, sy)


CASES = {
    "per_sample": (sample_source, dict(num_outputs=2, batch=False)),
    "per_sample_default_batch": (sample_source, dict(num_outputs=2)),
    "per_sample_no_copy": (sample_source, dict(num_outputs=2, batch=False, no_copy=True)),
    "growing": (growing_source, dict(batch=False)),
    "scalar": (scalar_source, dict(batch=False)),
    "batch_info": (batch_source, dict(batch=True, batch_info=True)),
    "batch_iteration": (lambda i: batch_source(types.BatchInfo(i, 0)), dict(batch=True)),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("depth", [1, 3])
def test_parallel_equals_in_process(case, depth):
    source, kwargs = CASES[case]
    expected = epochs(make(source, False, batch=kwargs.get("batch", False),
                           **{k: v for k, v in kwargs.items() if k not in ("batch", "no_copy")}))
    got = epochs(make(source, True, prefetch_queue_depth=depth, **kwargs))
    assert_same(got, expected)
    assert len(got) == {"growing": 8, "scalar": 6}.get(case, 6 if "per_sample" in case else 4)
    if case == "scalar":
        assert got[0][0][0].shape == ()


def test_generator_function_runs_in_a_worker_and_restarts_each_epoch():
    def gen():
        for k in range(3):
            yield [np.int32([k, os.getpid()])] * BATCH

    pipe = make(gen, True, batch=True)
    got = epochs(pipe)
    assert [b[0][0][0] for b in got] == [0, 1, 2] * 2
    assert got[0][0][0][1] != os.getpid()


def test_py_num_workers_zero_runs_in_process():
    def src(info):
        return np.int32([os.getpid(), info.idx_in_epoch])

    pipe = make(src, True, workers=0)
    (out,) = pipe.run()
    assert out.as_torch()[:, 0].tolist() == [os.getpid()] * BATCH
    assert pipe.external_source_shm_statistics() == {"capacities": [], "per_sample_capacities": []}


def test_workers_use_one_intra_op_thread():
    def src(info):
        return np.int32([torch.get_num_threads()])

    (out,) = make(src, True, workers=2).run()
    assert out.as_torch().reshape(-1).tolist() == [1] * BATCH


def test_samples_come_from_workers_through_shared_memory():
    def src(info):
        return np.full((1000,), os.getpid(), np.int64)

    pipe = make(src, True, workers=2, bytes_per_sample_hint=4096)
    (out,) = pipe.run()
    pids = set(out.as_torch()[:, 0].tolist())
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    stats = pipe.external_source_shm_statistics()
    assert stats["capacities"] and all(c >= 8000 for c in stats["capacities"])
    assert all(p >= 4096 for p in stats["per_sample_capacities"])
    assert out.is_dense_tensor()


def ragged_source(info):
    return np.full(info.idx_in_batch * 100 + 1, info.idx_in_epoch % 251, np.uint8), np.float32([info.idx_in_epoch])


def test_samples_view_shared_memory_until_freed_then_slots_are_reused():
    pipe = make(ragged_source, True, workers=2, num_outputs=2, batch=False, prefetch_queue_depth=2)
    held = [pipe.run() for _ in range(6)]
    slots_while_held = len(pipe.external_source_shm_statistics()["capacities"])
    for it, (data, labels) in enumerate(held):  # no slot was reused under a live tensor
        assert not data.is_dense_tensor() and labels.is_dense_tensor()
        for i in range(BATCH):
            assert data.at(i).tolist() == [(it * BATCH + i) % 251] * (i * 100 + 1)
        assert labels.as_torch().reshape(-1).tolist() == [float(it * BATCH + i) for i in range(BATCH)]
    data.as_torch_list()[0].add_(1)  # the views are writable
    assert slots_while_held >= 6 * 2
    del held, data, labels
    gc.collect()
    for _ in range(30):
        pipe.run()
    # Without reuse, 60 more slots; a few more may be in flight now than before.
    assert len(pipe.external_source_shm_statistics()["capacities"]) <= slots_while_held + 4


def test_a_tensor_outlives_its_pipeline():
    pipe = make(ragged_source, True, workers=2, num_outputs=2, batch=False)
    data, _ = pipe.run()
    del pipe
    gc.collect()
    assert not shm_entries()  # the slot files are gone; the mapping lives on
    assert data.at(4).tolist() == [4] * 401


CHECKPOINT_CASES = {  # source, kwargs, batches per epoch
    "per_sample": (sample_source, dict(num_outputs=2, batch=False), 3),
    "batch_info": (batch_source, dict(batch=True, batch_info=True), 2),
}


def run_events(pipe, n):
    """n calls of run(), with reset() after the end of an epoch: the batches and the ends."""
    events = []
    for _ in range(n):
        try:
            batches = pipe.run()
        except StopIteration:
            pipe.reset()
            events.append("end of epoch")
            continue
        events.append([[np.asarray(b.at(i)) for i in range(len(b))] for b in batches])
    return events


def assert_same_events(a, b):
    assert [e == "end of epoch" for e in a] == [e == "end of epoch" for e in b]
    assert_same([e for e in a if e != "end of epoch"], [e for e in b if e != "end of epoch"])


@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("taken", ["mid_epoch", "epoch_end", "after_reset"])
@pytest.mark.parametrize("case", CHECKPOINT_CASES)
def test_checkpoint_restore(case, taken, method):
    source, kwargs, per_epoch = CHECKPOINT_CASES[case]
    before = {"mid_epoch": 1, "epoch_end": per_epoch, "after_reset": per_epoch + 1}[taken]
    options = dict(workers=2, method=method, pipe_kwargs=dict(enable_checkpointing=True))
    pipe = make(source, True, prefetch_queue_depth=2, **options, **kwargs)
    run_events(pipe, before)
    checkpoint = pipe.checkpoint()
    expected = run_events(pipe, 2 * per_epoch + 2)
    del pipe
    options["pipe_kwargs"]["checkpoint"] = checkpoint
    restored = make(source, True, prefetch_queue_depth=2, **options, **kwargs)
    got = run_events(restored, 2 * per_epoch + 2)
    assert_same_events(got, expected)
    assert "end of epoch" in got


def test_seed_000_fork_two_pipelines_start_py_workers(tmp_path):
    fork_or_skip()
    images = tmp_path / "images"
    images.mkdir()
    from torchdali.sample_data import write_sample_dataset
    root = write_sample_dataset(str(images / "src"), num_images=10, num_classes=2, min_size=32, max_size=48)
    files = sorted(os.path.relpath(os.path.join(d, f), images) for d, _, fs in os.walk(root) for f in fs
                   if f.endswith(".jpg"))
    (images / "file_list.txt").write_text("".join(f"{f} {k % 2}\n" for k, f in enumerate(files)))
    batch_size = 4

    class ExternalInputCallable:
        def __init__(self, batch_size):
            self.images_dir = str(images) + "/"
            self.batch_size = batch_size
            with open(self.images_dir + "file_list.txt", "r") as f:
                file_label = [line.rstrip().split(" ") for line in f if line != ""]
            self.files, self.labels = zip(*file_label)
            self.full_iterations = len(self.files) // batch_size

        def __call__(self, sample_info):
            sample_idx = sample_info.idx_in_epoch
            if sample_info.iteration >= self.full_iterations:
                raise StopIteration()
            jpeg_filename = self.files[sample_idx]
            label = np.int32([self.labels[sample_idx]])
            with open(self.images_dir + jpeg_filename, "rb") as f:
                encoded_img = np.frombuffer(f.read(), dtype=np.uint8)
            return encoded_img, label

    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, py_num_workers=4)
    def training_pipeline():
        jpegs, labels = fn.external_source(source=ExternalInputCallable(batch_size), num_outputs=2,
                                           batch=False, parallel=True, dtype=[types.UINT8, types.INT32])
        decode = fn.decoders.image(jpegs, device="cpu")
        contrast = fn.random.uniform(range=(1, 3.0))
        return fn.brightness_contrast(decode, contrast=contrast), labels

    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, py_num_workers=4)
    def validation_pipeline():
        jpegs, labels = fn.external_source(source=ExternalInputCallable(batch_size), num_outputs=2,
                                           batch=False, parallel=True, dtype=[types.UINT8, types.INT32])
        decode = fn.decoders.image(jpegs, device="cpu")
        return fn.brightness_contrast(decode, contrast=1.5), labels

    train_pipe = training_pipeline()
    val_pipe = validation_pipeline()
    pipelines = [train_pipe, val_pipe]
    for pipe in pipelines:
        pipe.start_py_workers()
    for pipe in pipelines:
        pipe.build()
    train_out = train_pipe.run()
    val_out = val_pipe.run()
    assert len(train_out[0]) == len(val_out[0]) == batch_size
    assert val_out[1].as_torch().reshape(-1).tolist() == [0, 1, 0, 1]
    train_pipe.run()
    with pytest.raises(StopIteration):  # 10 files: two full batches
        train_pipe.run()


class RecordingPickler:
    """A py_callback_pickler given as a tuple with kwargs: the dumps kwargs must reach it."""

    calls = []

    @staticmethod
    def dumps(obj, **kwargs):
        RecordingPickler.calls.append(kwargs)
        return dumps(obj, **kwargs)

    @staticmethod
    def loads(data, **kwargs):
        return loads(data, **kwargs)


@pytest.mark.parametrize("pickler", [None, (RecordingPickler, {"protocol": 4}, {})], ids=["default", "tuple"])
def test_spawn_with_a_local_function_pickled_by_value(pickler):
    offset = 7

    def src(info):
        return np.int32([info.idx_in_epoch + offset])

    RecordingPickler.calls.clear()
    pipe = make(src, True, workers=2 if pickler is None else 1, method="spawn", pickler=pickler)
    (out,) = pipe.run()
    assert out.as_torch().reshape(-1).tolist() == [7, 8, 9, 10, 11]
    assert RecordingPickler.calls == ([] if pickler is None else [{"protocol": 4}])


def test_bad_callback_pickler():
    with pytest.raises(ValueError, match="spawn"):
        torchdali.Pipeline(batch_size=1, py_callback_pickler=RecordingPickler)
    with pytest.raises(ValueError, match="py_callback_pickler"):
        make(lambda info: 0, True, method="spawn", pickler=42).build()


def test_pickle_by_value_function_and_module():
    def local(x):
        return helper(x) * 2

    restored = loads(dumps(local))
    assert restored(3) == 8 and restored is not local
    assert loads(dumps(lambda: 5))() == 5
    pickle_by_value(helper)
    assert loads(dumps(helper)) is not helper and loads(dumps(helper))(1) == 2
    with pytest.raises(TypeError, match="only functions and modules"):
        pickle_by_value(3)


def helper(x):
    return x + 1


# --- faults ---
def raising_source(info):
    if info.idx_in_epoch == 7:
        raise ValueError("bad sample seven")
    return np.int32([info.idx_in_epoch])


def raising_batch_source(info):
    if info.iteration == 1 and info.epoch_idx == 0:
        raise ValueError("bad batch one")
    return np.full((BATCH, 1), info.iteration, np.int32)


def raising_generator():
    yield np.zeros((BATCH, 1), np.int32)
    raise ValueError("bad batch one")


SOURCE_ERRORS = {  # source, kwargs, where the error names, the first batch after reset()
    "sample": (raising_source, dict(batch=False), "sample 7 (idx_in_batch 2, iteration 1, epoch 0)",
               [0, 1, 2, 3, 4]),
    "batch": (raising_batch_source, dict(batch=True, batch_info=True), "the batch of iteration 1 (epoch 0)",
              [0] * BATCH),
    "generator": (raising_generator, dict(batch=True), "the batch of iteration 1 (epoch 0)", [0] * BATCH),
}


@pytest.mark.parametrize("parallel", [False, True], ids=["in_process", "parallel"])
@pytest.mark.parametrize("case", SOURCE_ERRORS)
def test_source_error_names_the_sample_with_its_traceback_and_reset_recovers(case, parallel):
    source, kwargs, where, after_reset = SOURCE_ERRORS[case]
    pipe = make(source, parallel, **kwargs)
    pipe.run()
    with pytest.raises(RuntimeError) as info:
        pipe.run()
    text = str(info.value)
    assert "external_source ('" in text and "the source raised ValueError: bad " in text
    assert f"for {where}" in text
    assert isinstance(info.value.__cause__, ValueError)
    # The source's own frames: in the message (from a worker) or in the chained exception.
    frames = text + "".join(traceback.format_exception(info.value.__cause__))
    assert source.__name__ in frames and "Traceback" in frames
    del info
    with pytest.raises(RuntimeError, match="call reset"):
        pipe.run()
    pipe.reset()
    (out,) = pipe.run()
    assert out.as_torch().reshape(-1).tolist() == after_reset


def die_by_sigkill(info):
    if info.iteration == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return np.int32([0])


def die_by_segfault(info):
    if info.iteration == 1:
        faulthandler.disable()  # quiet: no "Fatal Python error" dump in the suite's log
        ctypes.string_at(0)
    return np.int32([0])


def die_by_abort(info):
    if info.iteration == 1:
        faulthandler.disable()
        os.abort()
    return np.int32([0])


@pytest.mark.parametrize("source,cause", [(die_by_sigkill, "SIGKILL"), (die_by_segfault, "SIGSEGV"),
                                          (die_by_abort, "SIGABRT")])
def test_a_source_that_kills_its_worker_is_an_error_naming_it_then_reset_goes_on(source, cause):
    """The worker is replaced and the samples computed again; when that kills the new worker
    too, the batch is an error naming the worker, the signal and the samples, and reset()
    goes on with new workers."""
    pipe = make(source, True, workers=2)
    pipe.run()
    start = time.time()
    with pytest.warns(RuntimeWarning, match=rf"Python worker \d \(pid \d+\) was killed by {cause}.*; a new worker "
                                            r"\(pid \d+\) took its place"):
        with pytest.raises(RuntimeError, match=rf"Python worker \d \(pid \d+\) was killed by {cause}.* while "
                                               r"computing samples \d to \d \(iteration 1, epoch 0\), and so did a "
                                               r"new worker computing them again; call reset\(\) to go on"):
            pipe.run()
    assert time.time() - start < 5
    with pytest.raises(RuntimeError, match="call reset"):
        pipe.run()
    pipe.reset()
    (out,) = pipe.run()
    assert out.as_torch().flatten().tolist() == [0] * BATCH
    del pipe


def slow_numbered_source(info):
    if info.iteration >= 8:
        raise StopIteration
    time.sleep(0.02)
    return np.int64([info.idx_in_epoch, info.epoch_idx])


@pytest.mark.parametrize("batch", [False, True], ids=["per_sample", "batch"])
def test_a_worker_killed_mid_epoch_is_replaced_and_every_sample_comes_once(batch):
    source = slow_numbered_source if not batch else (
        lambda info: [slow_numbered_source(types.SampleInfo(info.iteration * BATCH + j, j, info.iteration,
                                                            info.epoch_idx)) for j in range(BATCH)])
    expected = epochs(make(source, False, batch=batch, batch_info=batch or None))
    # Every worker busy when one is killed: a per-sample batch has a task for each of 3, a
    # batch source's queued batches all go to the one.
    pipe = make(source, True, workers=1 if batch else 3, batch=batch, batch_info=batch or None)
    got = [[[np.asarray(b.at(i)) for i in range(len(b))] for b in pipe.run()]]
    with pytest.warns(RuntimeWarning, match=r"was killed by SIGKILL; a new worker \(pid \d+\) took its place "
                                            r"and computes again the \d task\(s\) it held"):
        os.kill(multiprocessing.active_children()[0].pid, signal.SIGKILL)  # busy: the next batches are queued
        got += epochs(pipe, 2)
    assert_same(got, expected)
    samples = [int(x[0]) for batch_ in got for x in batch_[0]]
    assert samples == list(range(8 * BATCH)) * 2  # each sample once per epoch, in order
    del pipe


def counting_generator():
    for k in range(6):
        time.sleep(0.02)
        yield np.full((BATCH, 1), k, np.int32)


def test_an_iterable_whose_worker_dies_is_an_error_then_reset_starts_it_again():
    """An iterable's position lives in its worker: its lost batches are an error, never
    the iterator started again in the middle of the epoch."""
    pipe = make(counting_generator, True, workers=2, batch=True)
    pipe.run()
    with pytest.warns(RuntimeWarning, match="took its place"):
        for p in multiprocessing.active_children():
            os.kill(p.pid, signal.SIGKILL)
        with pytest.raises(RuntimeError, match=r"Python worker \d \(pid \d+\) was killed by SIGKILL (while computing|"
                                               r"before) the batch of iteration \d \(epoch 0\); the iterable's "
                                               r"state died with it"):
            for _ in range(5):
                pipe.run()
    pipe.reset()
    got = epochs(pipe, 1)
    assert [int(b[0][0][0]) for b in got] == list(range(6))


def die_always(info):
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_source_that_kills_every_worker_ends_in_an_error_not_a_loop():
    pipe = make(die_always, True, workers=2)
    start = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for _ in range(2):
            with pytest.raises(RuntimeError, match="killed by SIGKILL"):
                pipe.run()
            pipe.reset()
    assert time.time() - start < 10
    del pipe


def out_of_memory(info):
    if info.iteration == 1:
        np.empty(1 << 50, np.uint8)  # a MemoryError, as an over-committed allocation gives
    return np.int32([0])


def test_memory_error_in_a_worker_reaches_the_caller():
    pipe = make(out_of_memory, True, workers=2)
    pipe.run()
    with pytest.raises(RuntimeError, match="MemoryError") as info:
        pipe.run()
    assert isinstance(info.value.__cause__, MemoryError)


def test_workers_killed_from_outside_are_replaced_then_pipeline_deleted():
    def slow(info):
        time.sleep(0.05)
        return np.int32([info.idx_in_epoch])

    pipe = make(slow, True, workers=2)
    pipe.run()
    for p in multiprocessing.active_children():
        os.kill(p.pid, signal.SIGKILL)
    with pytest.warns(RuntimeWarning, match="was killed by SIGKILL; a new worker"):
        for k in range(1, 6):
            (out,) = pipe.run()
            assert out.as_torch().flatten().tolist() == list(range(k * BATCH, (k + 1) * BATCH))
    del pipe


def test_fork_after_cuda_is_a_clear_error(monkeypatch):
    pipe = make(sample_source, True, num_outputs=2)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match="start_py_workers.*spawn"):
        pipe.start_py_workers()


@pytest.mark.parametrize("parallel", [False, True], ids=["in_process", "parallel"])
@pytest.mark.parametrize("shape", [(1,), None], ids=["dense", "ragged"])
@pytest.mark.parametrize("kwargs,error,match", [
    (dict(dtype=types.INT32), TypeError, r"output 0 sample 0 has type DALIDataType.FLOAT, but dtype=.*INT32"),
    (dict(ndim=2), ValueError, "output 0 sample 0 has 1 dimensions, but ndim=2 was declared"),
    (dict(layout="HW"), ValueError, "layout 'HW' does not match sample 0 with 1 dimensions"),
])
def test_wrong_dtype_ndim_or_layout_is_a_clear_error(kwargs, error, match, shape, parallel):
    def src(info):
        return np.ones(shape or (info.idx_in_batch + 1,), np.float32)

    pipe = make(src, parallel, batch=False, **kwargs)
    with pytest.raises(error, match=match):
        pipe.run()
    ok = make(src, parallel, batch=False, dtype=types.FLOAT, ndim=1, layout="X")
    (out,) = ok.run()
    assert out.layout() == "X" and out.is_dense_tensor() == (shape is not None)


BAD_SOURCES = {  # source, parallel, kwargs, error, message (DALI raises the same type)
    "no_argument": (lambda: np.int32([1]), True, dict(batch=True), TypeError, "must accept one argument"),
    "iterable_per_sample": ([np.int32([1])], True, dict(batch=False), TypeError, "batch=True"),
    "no_source": (None, True, dict(), ValueError, "needs a `source`"),
    "no_copy_false": (sample_source, True, dict(num_outputs=2, no_copy=False), ValueError,
                      "no_copy=False cannot be used with parallel=True"),
    "depth_not_parallel": (sample_source, False, dict(num_outputs=2, prefetch_queue_depth=2), ValueError,
                           "prefetch_queue_depth applies to parallel sources only"),
    "depth_zero": (sample_source, True, dict(num_outputs=2, prefetch_queue_depth=0), ValueError,
                   "prefetch_queue_depth' = 0: must be at least 1"),
}


@pytest.mark.parametrize("case", BAD_SOURCES)
def test_bad_parallel_sources(case):
    source, parallel, kwargs, error, match = BAD_SOURCES[case]
    with pytest.raises(error, match=match):
        make(source, parallel, **kwargs).build()


@pytest.mark.parametrize("case", [c for c in BAD_SOURCES if c != "no_source"])
def test_dali_rejects_the_same_sources(case):
    dali = dali_or_skip()
    source, parallel, kwargs, error, _ = BAD_SOURCES[case]

    @dali.pipeline_def(batch_size=BATCH, num_threads=1, device_id=None, py_num_workers=1)
    def pipe():
        return dali.fn.external_source(source, parallel=parallel, **kwargs)

    with pytest.raises(error):
        pipe().build()


def test_non_array_sample_is_a_clear_error():
    pipe = make(lambda info: "text", True)
    with pytest.raises(RuntimeError, match="not a numeric array"):
        pipe.run()


def test_against_dali_parallel_external_source():
    dali = dali_or_skip()
    if torch.cuda.is_available():  # the query itself initializes the CUDA driver
        pytest.skip("DALI refuses to fork its workers once the CUDA driver is initialized in the "
                    "process; torchdali's forked workers are tested in a process without CUDA")

    def run(lib):
        @lib.pipeline_def(batch_size=BATCH, num_threads=1, device_id=None, py_num_workers=2)
        def pipe():
            a, b = lib.fn.external_source(sample_source, num_outputs=2, batch=False, parallel=True)
            return a, b

        return epochs(pipe())

    assert_same(run(torchdali), run(dali))


def test_fork_tests_in_a_process_without_cuda():
    rerun_without_cuda(__file__)
