"""GPU data moved back to the CPU inside a pipeline (`DataNode.cpu()`, and shape() or
property() of GPU data on the CPU), as DALI 2.4 allows it with its dynamic executor: the
rules of what is allowed (checked against DALI, which defines GPU pipelines without a GPU),
the executor's phases (planned without a GPU), serialization; and, on a GPU, the copies,
operators after them on the CPU and back on the GPU, argument inputs computed on the GPU,
every execution mode, checkpoints, reset(), debug mode and conditionals."""
import types as pytypes

import numpy as np
import pytest
import torch

import torchdali
from torchdali import fn, types
from torchdali.executor import _STAGE_RANK, execution_order, split_stages
from torchdali.graph import topological_order
from torchdali.pipeline import Pipeline
from torchdali.pipeline.experimental import pipeline_def as experimental_pipeline_def
from torchdali.serialize import load
from torchdali.tensor_list import TensorListCPU, TensorListGPU

from conftest import dali_or_skip, requires_cuda

# --- what is allowed: the same as DALI ------------------------------------------------------

CONFIGS = {
    "default": {},
    "exec_dynamic=False": dict(exec_dynamic=False),
    "synchronous": dict(exec_async=False, exec_pipelined=False),
    "synchronous, exec_dynamic=True": dict(exec_async=False, exec_pipelined=False, exec_dynamic=True),
    "not async": dict(exec_async=False),
    "separated queues": dict(prefetch_queue_depth={"cpu_size": 2, "gpu_size": 3}),
}


def gpu_data(L):
    return L.fn.external_source(name="x", device="gpu", dtype=L.types.UINT8, ndim=1)


# Each builds the outputs of a pipeline (given the library) that moves GPU data somewhere.
DEFINITIONS = {
    "cpu()": lambda L: gpu_data(L).cpu(),
    "gpu().cpu()": lambda L: L.fn.external_source(name="y", dtype=L.types.UINT8, ndim=1).gpu().cpu(),
    "shape()": lambda L: gpu_data(L).shape(),
    "shape(device='gpu')": lambda L: gpu_data(L).shape(device="gpu"),
    "source_info()": lambda L: gpu_data(L).source_info(),
    "CPU operator after cpu()": lambda L: L.fn.cast(gpu_data(L).cpu(), dtype=L.types.INT32),
    "argument input after cpu()": lambda L: L.fn.flip(
        L.fn.external_source(name="y", device="gpu", layout="HWC"),
        horizontal=L.fn.cast(gpu_data(L).cpu(), dtype=L.types.INT32)),
    "CPU operator on GPU data": lambda L: L.fn.cast(gpu_data(L), dtype=L.types.INT32, device="cpu"),
    "mixed operator on GPU data": lambda L: L.fn.decoders.image(gpu_data(L), device="mixed"),
    "GPU argument input": lambda L: L.fn.flip(L.fn.external_source(name="y", device="gpu", layout="HWC"),
                                              horizontal=L.fn.cast(gpu_data(L), dtype=L.types.INT32)),
}


def define(L, name, config):
    """The pipeline, or the exception its definition raised."""
    try:
        return L.pipeline_def(lambda: DEFINITIONS[name](L), batch_size=2, num_threads=1, device_id=0,
                              **config)()
    except Exception as e:  # what is compared: whether the definition is refused
        return e


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", list(DEFINITIONS))
def test_what_is_refused_is_what_dali_refuses(name, config):
    dali = dali_or_skip()
    theirs = define(dali, name, CONFIGS[config])
    ours = define(torchdali, name, CONFIGS[config])
    assert isinstance(ours, Exception) == isinstance(theirs, Exception), (ours, theirs)
    if not isinstance(ours, Exception):
        assert ours.exec_dynamic == bool(theirs.exec_dynamic)  # DALI keeps None for "off"
        return
    text = str(ours)
    if "operator on GPU data" in name:
        assert "cannot take GPU data as input 0" in text and ".cpu()" in text
    elif name == "GPU argument input":
        assert "argument input 'horizontal'" in text and "must be CPU data" in text
    else:
        assert isinstance(ours, RuntimeError) and "doesn't support transition from GPU to CPU" in text
        assert "exec_dynamic" in text and "is GPU data" in text


@pytest.mark.parametrize("config", list(CONFIGS))
def test_exec_dynamic_defaults_as_in_dali(config):
    dali = dali_or_skip()
    kwargs = dict(batch_size=1, num_threads=1, device_id=None, **CONFIGS[config])
    assert Pipeline(**kwargs).exec_dynamic == bool(dali.Pipeline(**kwargs).exec_dynamic)  # None: off


def test_cpu_of_gpu_data_defined_without_a_pipeline_is_checked_at_build():
    x = fn.external_source(name="x", device="gpu")
    y = x.cpu()  # no current pipeline: nothing to check yet (as in DALI)
    assert y.device == "cpu" and y.source.schema.name == "_to_cpu" and y.source.device == "gpu"
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=0, exec_dynamic=False)
    pipe.set_outputs(y)
    match = "CUDA is not available" if not torch.cuda.is_available() else "transition from GPU to CPU"
    with pytest.raises(RuntimeError, match=match):
        pipe.build()


# --- the plan: phases, without a GPU ---------------------------------------------------------

def phase_table(outputs):
    order, phase = execution_order(outputs)
    return [(n.schema.name, n.device, phase[n.id]) for n in order]


def decoded():
    jpegs, labels = fn.readers.file(files=["a.jpg", "b.jpg"], labels=[0, 1])
    return fn.decoders.image(jpegs, device="mixed"), labels


def test_operators_after_a_copy_run_a_round_later():
    images, labels = decoded()
    flipped = fn.flip(images.cpu())
    assert phase_table([flipped, labels]) == [
        ("readers.file", "cpu", 0), ("decoders.image", "mixed", 1), ("_to_cpu", "gpu", 2), ("flip", "cpu", 3)]


def test_back_to_the_gpu_and_argument_inputs_from_the_gpu():
    images, labels = decoded()
    crop = fn.crop(images.cpu(), crop=(4, 4)).gpu()
    side = fn.cast(fn.reductions.max(images).cpu(), dtype=types.FLOAT)
    resized = fn.resize(images, resize_x=side, resize_y=side)
    table = phase_table([fn.flip(crop), resized, labels])
    assert table[:2] == [("readers.file", "cpu", 0), ("decoders.image", "mixed", 1)]
    by_op = {}
    for name, device, phase in table:
        by_op.setdefault(name, []).append((device, phase))
    assert sorted(by_op["_to_cpu"]) == [("gpu", 2), ("gpu", 2)] and by_op["reductions.max"] == [("gpu", 2)]
    assert by_op["crop"] == [("cpu", 3)] and by_op["cast"] == [("cpu", 3)]
    assert by_op["_to_gpu"] == [("mixed", 4)] and by_op["flip"] == [("gpu", 5)]
    assert by_op["resize"] == [("gpu", 5)]  # its argument input comes from phase 3
    assert [p for _, _, p in table] == sorted(p for _, _, p in table)


def test_each_trip_to_the_host_adds_a_round():
    x = fn.external_source(name="x", device="gpu")
    for _ in range(3):
        x = (fn.cast(x.cpu(), dtype=types.FLOAT) + 1).gpu() * 2
    table = phase_table([x])
    assert table[0] == ("external_source", "gpu", 2)
    assert [p for n, _, p in table if n == "_to_cpu"] == [2, 5, 8]
    assert [p for n, _, p in table if n == "_to_gpu"] == [4, 7, 10]
    assert table[-1][2] == 11


def test_shapes_of_gpu_data_are_read_on_the_host():
    """x.shape() of GPU data is CPU data straight from the batch's metadata: no copy to wait for,
    but what reads it still comes after the GPU operator that made x."""
    x = fn.resize(fn.external_source(name="x", device="gpu"), size=(3, 3))
    shape = x.shape()
    assert shape.device == "cpu" and shape.source.schema.name == "_shapes" and shape.source.device == "gpu"
    table = phase_table([fn.cast(shape, dtype=types.FLOAT)])
    assert ("_to_cpu", "gpu", 2) not in table
    assert [p for n, _, p in table if n in ("_shapes", "cast")] == [2, 3]
    assert x.shape(device="gpu").device == "gpu"


def without_copies():
    """Graphs of every stage without a GPU->CPU copy."""
    images, labels = decoded()
    coin = fn.random.coin_flip()
    cpu_side = fn.cast(labels, dtype=types.FLOAT) * 2
    yield [fn.flip(images, horizontal=coin), labels.gpu(), cpu_side, fn.random.uniform()]
    x = fn.external_source(name="x")
    yield [fn.resize(x.gpu(), size=(3, 3)), fn.rotate(x, angle=fn.random.uniform(range=(0, 9))), x.shape()]
    yield [fn.random.uniform(shape=[2])]


@pytest.mark.parametrize("index", range(3))
def test_graphs_without_a_copy_keep_the_stage_plan(index):
    outputs = list(without_copies())[index]
    old = sorted(topological_order(outputs), key=lambda n: (_STAGE_RANK[n.device],
                                                            0 if n.schema.impl.is_source and not n.inputs else 1))
    order, phase = execution_order(outputs)
    assert [n.id for n in order] == [n.id for n in old]
    assert all(phase[n.id] == _STAGE_RANK[n.device] for n in order)


def step(name, stage, phase):
    return pytypes.SimpleNamespace(name=name, stage=stage, phase=phase)


def test_later_rounds_run_in_the_gpu_stage_after_its_operators():
    steps = [step("read", "cpu", 0), step("decode", "mixed", 1), step("fused_crop", "mixed", 2),
             step("to_cpu", "gpu", 2), step("flip", "cpu", 3), step("to_gpu", "mixed", 4), step("blur", "gpu", 5),
             step("to_cpu_again", "gpu", 5), step("cast", "cpu", 6)]
    cpu, mixed, gpu = split_stages(steps)
    assert [s.name for s in cpu] == ["read"] and [s.name for s in mixed] == ["decode", "fused_crop"]
    assert [s.name for s in gpu] == ["to_cpu", "flip", "to_gpu", "blur", "to_cpu_again", "cast"]


def test_the_copy_serializes_and_comes_back():
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=0, seed=4)
    with pipe:
        x = fn.external_source(name="x", device="gpu", layout="HWC")
        side = fn.cast(fn.reductions.max(x).cpu(), dtype=types.FLOAT)
        pipe.set_outputs(fn.flip(x.cpu()).gpu(), fn.resize(x, resize_x=side, resize_y=side), x.shape())
    text = pipe.serialize()
    assert text.count('"op": "_to_cpu", "device": "gpu"') == 2  # x.shape() is read on the host: no copy
    assert text.count('"on_host": true') == 1
    params, build_graph = load(text)
    again = Pipeline(**params)
    again._define_from(build_graph)
    assert [x.device for x in again.definition.outputs] == ["gpu", "gpu", "cpu"]
    assert again.serialize() == text


def test_error_on_gpu_input_names_the_operators_and_the_way_out():
    with pytest.raises(ValueError, match=r"flip: the CPU operator cannot take GPU data as input 0 "
                                         r"\(\.gpu\(\) of output 0 of external_source .*\.cpu\(\) first"):
        fn.flip(fn.external_source(name="x").gpu(), device="cpu")


# --- on a GPU ------------------------------------------------------------------------------

MODES = {
    "async": {},
    "async, depth 1": dict(prefetch_queue_depth=1),
    "pipelined, not async": dict(exec_async=False, exec_dynamic=True),
    "synchronous": dict(exec_async=False, exec_pipelined=False, exec_dynamic=True),
}


def image(info):
    """HWC uint8 images of odd, different sizes with values in [5, 30)."""
    rng = np.random.default_rng(info.idx_in_epoch)
    return rng.integers(5, 30, (9 + info.idx_in_epoch % 5, 11 + info.idx_in_epoch % 3, 3), dtype=np.uint8)


def images(device):
    return fn.external_source(source=image, batch=False, layout="HWC", device=device)


def cpu_ops(y):
    """CPU operators on data that may have come from the GPU."""
    return fn.flip(y, horizontal=1), fn.crop(y, crop=(5, 7), crop_pos_x=0.3), fn.cast(y, dtype=types.FLOAT) * 0.5


def run(pipe, n=3):
    return [[out.as_cpu() if isinstance(out, TensorListGPU) else out for out in pipe.run()] for _ in range(n)]


def sample(batch, i):
    """Sample i of a batch as a torch tensor (a CPU batch's samples are DALI-style tensors)."""
    t = batch.at(i)
    return t if isinstance(t, torch.Tensor) else torch.from_numpy(np.array(t))


def assert_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.layout() == y.layout() and len(x) == len(y)
        assert all(torch.equal(sample(x, i), sample(y, i)) for i in range(len(x)))


@requires_cuda
@pytest.mark.parametrize("mode", list(MODES))
def test_cpu_operators_after_cpu_match_the_cpu_pipeline(mode):
    def on_gpu():
        x = images("gpu")
        y = x.cpu()
        return (x, y, *cpu_ops(y))

    ours = run(torchdali.pipeline_def(on_gpu, batch_size=4, num_threads=2, device_id=0, **MODES[mode])())
    cpu = run(torchdali.pipeline_def(lambda: cpu_ops(images("cpu")), batch_size=4, num_threads=2, device_id=None)())
    for (x, y, *outs), expected in zip(ours, cpu):
        assert isinstance(y, TensorListCPU) and all(isinstance(o, TensorListCPU) for o in outs)
        assert_equal([y], [x])
        assert_equal(outs, expected)


@requires_cuda
@pytest.mark.parametrize("dense", [True, False])
def test_mixed_decoder_then_cpu(tmp_path, dense):
    from torchdali.sample_data import write_sample_dataset

    root = write_sample_dataset(str(tmp_path), num_images=8, num_classes=2, min_size=40 if dense else 31,
                                max_size=40 if dense else 57)

    @torchdali.pipeline_def(batch_size=4, num_threads=2, device_id=0)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=root)
        x = fn.decoders.image(jpegs, device="mixed")
        y = x.cpu()
        return x, y, fn.flip(y), labels, y.source_info()

    p = pipe()
    for _ in range(3):
        x, y, flipped, labels, info = p.run()
        assert isinstance(x, TensorListGPU) and isinstance(y, TensorListCPU) and isinstance(flipped, TensorListCPU)
        assert_equal([y], [x.as_cpu()])
        assert all(torch.equal(sample(flipped, i), sample(y, i).flip(1)) for i in range(4))
        assert bytes(np.array(info.at(0))).decode().endswith(".jpg")


@requires_cuda
@pytest.mark.parametrize("mode", list(MODES))
def test_back_to_the_gpu(mode):
    @torchdali.pipeline_def(batch_size=4, num_threads=2, device_id=0, seed=3, **MODES[mode])
    def pipe():
        x = images("gpu")
        there_and_back = fn.crop(x.cpu(), crop=(6, 8)).gpu()
        return fn.resize(there_and_back, size=(5, 4)), fn.resize(fn.crop(x, crop=(6, 8)), size=(5, 4))

    p = pipe()
    for _ in range(3):
        a, b = p.run()
        assert isinstance(a, TensorListGPU) and a.at(0).is_cuda
        assert torch.equal(a.as_torch(), b.as_torch())


@requires_cuda
@pytest.mark.parametrize("mode", list(MODES))
def test_argument_inputs_computed_on_the_gpu(mode):
    def define(device):
        def pipe():
            x = images(device)
            side = fn.reductions.max(x)
            side = fn.cast(side.cpu() if device == "gpu" else side, dtype=types.FLOAT)
            return fn.resize(x.gpu(), resize_x=side, resize_y=side + 1), side, x.shape()
        return torchdali.pipeline_def(pipe, batch_size=4, num_threads=2, device_id=0, **MODES[mode])()

    for (a, side, shape), (b, side_cpu, shape_cpu) in zip(run(define("gpu")), run(define("cpu"))):
        assert isinstance(side, TensorListCPU) and isinstance(shape, TensorListCPU)
        assert_equal([a, side, shape], [b, side_cpu, shape_cpu])
        assert [list(s) for s in a.shape()] == [[int(v) + 1, int(v), 3] for v in side.as_torch()]


@requires_cuda
def test_checkpoints_after_the_copy():
    def define():
        x = images("gpu")
        y = fn.noise.gaussian(fn.cast(x.cpu(), dtype=types.FLOAT), stddev=2.0)  # random, a round later
        return fn.flip(y, horizontal=fn.random.coin_flip()).gpu(), fn.random.uniform(range=(0, 1))

    make = torchdali.pipeline_def(define, batch_size=3, num_threads=2, device_id=0, seed=5, enable_checkpointing=True)
    p = make()
    run(p, 2)
    checkpoint = p.checkpoint()
    rest = run(p, 3)
    for a, b in zip(rest, run(make(checkpoint=checkpoint), 3)):
        assert_equal(a, b)
    p.restore_checkpoint(checkpoint)
    for a, b in zip(rest, run(p, 3)):
        assert_equal(a, b)


@requires_cuda
@pytest.mark.parametrize("mode", list(MODES))
def test_reset_after_the_end_of_an_epoch(mode):
    def three_batches(info):
        if info.iteration >= 3:
            raise StopIteration
        return image(info)

    @torchdali.pipeline_def(batch_size=2, num_threads=2, device_id=0, **MODES[mode])
    def pipe():
        x = fn.external_source(source=three_batches, batch=False, layout="HWC", device="gpu")
        return fn.flip(x.cpu()).gpu() + 1

    p = pipe()
    epochs = []
    for _ in range(2):
        batches = []
        with pytest.raises(StopIteration):
            while True:
                batches.append(p.run()[0].as_cpu())
        p.reset()
        epochs.append(batches)
    assert len(epochs[0]) == 3
    for a, b in zip(*epochs):
        assert_equal([a], [b])


def there_and_back():
    y = images("gpu").cpu()
    return (*cpu_ops(y), fn.flip(y).gpu())


@requires_cuda
def test_debug_mode_matches_the_built_pipeline():
    debug = experimental_pipeline_def(there_and_back, batch_size=3, num_threads=1, device_id=0, debug=True)()
    built = torchdali.pipeline_def(there_and_back, batch_size=3, num_threads=1, device_id=0)()
    for _ in range(2):
        out = debug.run()
        assert [type(o) for o in out] == [TensorListCPU] * 3 + [TensorListGPU]
        assert_equal([o.as_cpu() if isinstance(o, TensorListGPU) else o for o in out], run(built, 1)[0])


@requires_cuda
def test_serialized_pipeline_runs_the_same():
    pipe = Pipeline(batch_size=3, num_threads=2, device_id=0, seed=1, prefetch_queue_depth=1)
    with pipe:
        x = fn.external_source(name="x", device="gpu", layout="HWC")
        pipe.set_outputs(*cpu_ops(x.cpu()), fn.flip(x.cpu()).gpu())
    again = Pipeline.deserialize(pipe.serialize())
    rng = np.random.default_rng(0)
    for _ in range(2):
        batch = [rng.integers(0, 255, (5 + i, 7, 3), dtype=np.uint8) for i in range(3)]
        outs = []
        for p in (pipe, again):
            p.feed_input("x", batch, layout="HWC")
            outs.append([o.as_cpu() if isinstance(o, TensorListGPU) else o for o in p.run()])
        assert_equal(*outs)


@requires_cuda
def test_a_condition_computed_on_the_gpu():
    @torchdali.pipeline_def(enable_conditionals=True, batch_size=4, num_threads=2, device_id=0)
    def pipe():
        x = images("gpu")
        if x.shape(device="gpu")[0].cpu() > 10:  # the samples' heights: 9 to 13
            out = fn.flip(x)
        else:
            out = x
        return out, x

    p = pipe()
    flipped = []
    for _ in range(3):
        out, x = p.run()
        for i in range(4):
            sample = x.at(i)
            flipped.append(sample.shape[0] > 10)
            assert torch.equal(out.at(i), sample.flip(1) if flipped[-1] else sample)
    assert any(flipped) and not all(flipped)
