"""The Pipeline object: definition styles, arguments, methods and run semantics."""
import time

import numpy as np
import pytest
import torch

import torchdali as dali
from torchdali import fn, pipeline_def, types
from torchdali.pipeline import Pipeline

from conftest import requires_cuda


def counter_source(calls):
    def source(info):
        calls.append(info)
        return [np.array([info, i], dtype=np.int32) for i in range(2)]
    return source


def test_pipeline_def_without_and_with_arguments():
    @pipeline_def
    def plain():
        return fn.external_source(lambda: [np.ones(2, np.float32)] * 3)

    @pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def configured():
        return fn.external_source(lambda: [np.ones(2, np.float32)] * 3)

    p1 = plain(batch_size=3, num_threads=1, device_id=None)
    p2 = configured()
    for p in (p1, p2):
        (out,) = p.run()
        assert len(out) == 3 and out.as_torch().shape == (3, 2)


def test_call_kwargs_override_decorator_and_function_args_pass_through():
    @pipeline_def(batch_size=32, num_threads=3, device_id=None)
    def pipe(value):
        assert Pipeline.current().batch_size == 4
        return fn.external_source(lambda: [np.full(1, value, np.int32)] * 4)

    p = pipe(7, batch_size=4)
    assert p.batch_size == 4 and p.num_threads == 3
    (out,) = p.run()
    assert out.as_torch().flatten().tolist() == [7] * 4


def test_function_parameter_shadows_pipeline_argument():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe(seed):
        return fn.external_source(lambda: [np.full(1, seed, np.int32)] * 2)

    p = pipe(seed=5)
    assert p.seed is None  # the function took `seed`; the pipeline kept its default
    assert p.run()[0].as_torch().flatten().tolist() == [5, 5]


def test_var_keyword_definition_rejected():
    with pytest.raises(TypeError, match="kwargs"):
        @pipeline_def
        def pipe(**kwargs):
            return None


def test_unknown_pipeline_argument_rejected():
    with pytest.raises(TypeError, match="batchsize"):
        @pipeline_def(batchsize=3)
        def pipe():
            return None


def test_set_outputs_with_current_pipeline_and_push_pop():
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    assert Pipeline.current() is None
    with pipe:
        assert Pipeline.current() is pipe
        a, b = fn.external_source(lambda: ([np.zeros(1, np.float32)] * 2, [np.ones(1, np.float32)] * 2),
                                  num_outputs=2)
        pipe.set_outputs(a, b)
    assert Pipeline.current() is None
    Pipeline.push_current(pipe)
    assert Pipeline.current() is pipe
    assert Pipeline.pop_current() is pipe
    a, b = pipe.run()
    assert a.as_torch().sum() == 0 and b.as_torch().sum() == 2
    assert pipe.num_outputs == 2


def test_subclass_with_define_graph_and_ops_api():
    class Simple(Pipeline):
        def __init__(self):
            super().__init__(batch_size=4, num_threads=1, device_id=None, seed=12)
            self.src = dali.ops.ExternalSource(source=lambda: [np.arange(3, dtype=np.float32)] * 4)
            self.rng = dali.ops.Uniform(range=(0.0, 1.0))
            self.coin = dali.ops.CoinFlip(probability=1.0)

        def define_graph(self):
            return self.src() * self.rng(), self.coin()

    pipe = Simple()
    pipe.build()
    data, coin = pipe.run()
    assert data.as_torch().shape == (4, 3)
    assert coin.as_torch().tolist() == [1, 1, 1, 1]


def test_pipeline_returning_one_operator_s_outputs_as_a_list():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe(src):
        return fn.external_source(src, num_outputs=2)

    p = pipe(lambda: ([np.zeros(1)] * 2, [np.ones(1)] * 2))
    assert len(p.run()) == 2


def test_constructor_arguments_and_properties():
    pipe = Pipeline(batch_size=8, num_threads=3, device_id=None, seed=7, exec_pipelined=False,
                    exec_async=False, prefetch_queue_depth=3, bytes_per_sample=10, set_affinity=True,
                    enable_memory_stats=True, py_num_workers=2, py_start_method="spawn",
                    output_dtype=types.FLOAT, output_ndim=1, exec_dynamic=False)
    assert (pipe.batch_size, pipe.max_batch_size, pipe.num_threads, pipe.device_id, pipe.seed) == (8, 8, 3, None, 7)
    assert (pipe.exec_pipelined, pipe.exec_async, pipe.exec_dynamic, pipe.exec_separated) == (False, False, False, False)
    assert pipe.prefetch_queue_depth == 3 and pipe.cpu_queue_size == 3 and pipe.gpu_queue_size == 3
    assert pipe.py_num_workers == 2 and pipe.py_start_method == "spawn"
    assert pipe.set_affinity and pipe.enable_memory_stats
    assert pipe.max_streams == -1 and pipe.default_cuda_stream_priority == 0
    sep = Pipeline(batch_size=1, num_threads=1, device_id=None, prefetch_queue_depth={"cpu_size": 3, "gpu_size": 2})
    assert sep.exec_separated and sep.cpu_queue_size == 3 and sep.gpu_queue_size == 2
    with pytest.deprecated_call():
        Pipeline(batch_size=1, num_threads=1, device_id=None, max_streams=4)


def _settled(count, expected, timeout=5.0):
    """Wait until count() reaches `expected` (the runner's threads work ahead), then check
    that it stays there."""
    deadline = time.monotonic() + timeout
    while count() < expected and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    return count()


@pytest.mark.parametrize("depth, ahead", [(1, 1), (3, 3), ({"cpu_size": 3, "gpu_size": 1}, 4),
                                          ({"cpu_size": 1, "gpu_size": 2}, 3)])
def test_prefetch_queues_bound_how_far_the_pipeline_works_ahead(depth, ahead):
    calls = []

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, prefetch_queue_depth=depth)
    def pipe():
        return fn.external_source(lambda: calls.append(1) or [np.zeros(1, np.float32)] * 2)

    p = pipe()
    p.run()  # fills the queues: `ahead` batches (both queues when they are separate)
    assert _settled(lambda: len(calls), ahead) == ahead
    p.run()
    assert _settled(lambda: len(calls), ahead + 1) == ahead + 1


@requires_cuda
@pytest.mark.parametrize("depth, gpu_runs", [({"cpu_size": 3, "gpu_size": 1}, 2), ({"cpu_size": 1, "gpu_size": 3}, 4)])
def test_gpu_size_bounds_the_finished_batches_waiting(depth, gpu_runs):
    cpu_calls, gpu_calls = [], []

    @pipeline_def(batch_size=1, num_threads=1, device_id=0, prefetch_queue_depth=depth)
    def pipe():  # one sample a batch: the (per-sample) python_function runs once a batch
        x = fn.external_source(lambda: cpu_calls.append(1) or [np.zeros(1, np.float32)]).gpu()
        return fn.python_function(x, function=lambda t: gpu_calls.append(1) or t, device="gpu")

    p = pipe()
    p.run()
    # CPU: all 4 batches started; GPU: the delivered one and what gpu_size lets wait.
    assert _settled(lambda: len(cpu_calls), 4) == 4
    assert _settled(lambda: len(gpu_calls), gpu_runs) == gpu_runs


def test_bad_pipeline_configuration():
    with pytest.raises(ValueError, match="cpu_size"):
        Pipeline(batch_size=1, num_threads=1, prefetch_queue_depth={"cpu": 1})
    with pytest.raises(ValueError, match="exec_async"):
        Pipeline(batch_size=1, num_threads=1, exec_async=False, prefetch_queue_depth={"cpu_size": 2, "gpu_size": 2})
    pipe = Pipeline(batch_size=-1, num_threads=1, device_id=None)
    with pipe:
        pipe.set_outputs(fn.random.uniform())
    with pytest.raises(ValueError, match="batch_size"):
        pipe.build()


@pytest.mark.parametrize("exec_async,exec_pipelined", [(True, True), (False, True), (False, False)])
def test_prefetch_runs_ahead_by_queue_depth(exec_async, exec_pipelined):
    calls = []

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, prefetch_queue_depth=3,
                  exec_async=exec_async, exec_pipelined=exec_pipelined)
    def pipe():
        return fn.external_source(counter_source(calls), batch=True)

    p = pipe()
    for i in range(4):
        (out,) = p.run()
        assert out.as_torch()[:, 0].tolist() == [i, i]
    p.schedule_run  # noqa: B018 (attribute exists)
    expected = 6 if exec_pipelined else 4
    for _ in range(100):  # the async threads may still be finishing the lookahead
        if len(calls) >= expected:
            break
        import time
        time.sleep(0.01)
    assert len(calls) == expected


def test_schedule_run_share_and_release_outputs():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.external_source(lambda i: [np.full(1, i, np.int64)] * 2, batch=True)

    p = pipe()
    p.schedule_run()
    (a,) = p.share_outputs()
    p.release_outputs()
    p.schedule_run()
    (b,) = p.share_outputs()
    p.release_outputs()
    assert a.as_torch().flatten().tolist() == [0, 0] and b.as_torch().flatten().tolist() == [1, 1]
    with pytest.raises(RuntimeError, match="mixing"):
        p.run()


def test_feed_input_and_run_with_pipeline_inputs():
    pipe = Pipeline(batch_size=3, num_threads=1, device_id=None, prefetch_queue_depth=1, exec_pipelined=False,
                    exec_async=False)
    with pipe:
        pipe.set_outputs(fn.external_source(name="my_inp") * 2)
    (out,) = pipe.run(my_inp=np.ones((3, 2), np.float32))
    assert out.as_torch().tolist() == [[2.0, 2.0]] * 3
    pipe.feed_input("my_inp", [torch.zeros(2), torch.ones(4)])
    (out,) = pipe.run()
    assert out.shape() == [[2], [4]] and not out.is_dense_tensor()
    with pytest.raises(RuntimeError, match="no data was fed"):
        pipe.run()
    with pytest.raises(ValueError, match="no external_source named 'nope'"):
        pipe.feed_input("nope", np.ones(1))


def test_feed_input_ahead_with_prefetching():
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None, prefetch_queue_depth=2)
    with pipe:
        src = fn.external_source(name="x", layout="W")
        pipe.set_outputs(src)
    for k in range(3):
        pipe.feed_input(src, np.full((2, 5), k, np.uint8))
    for k in range(2):
        (out,) = pipe.run()
        assert out.layout() == "W" and out.as_torch().flatten().tolist() == [k] * 10


def test_stop_iteration_and_reset():
    data = [[np.full(1, k, np.int32)] * 2 for k in range(3)]

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.external_source(data)

    p = pipe()
    for epoch in range(2):
        seen = [p.run()[0].as_torch()[0, 0].item() for _ in range(3)]
        assert seen == [0, 1, 2]
        with pytest.raises(StopIteration):
            p.run()
        with pytest.raises(StopIteration):
            p.run()
        p.reset()


def test_source_error_names_operator_and_pipeline_recovers_after_reset():
    state = {"fail": True}

    def source(info):
        if state["fail"] and info.iteration == 1:
            raise ValueError("bad sample")
        return np.array([info.idx_in_epoch], np.int32)

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.external_source(source, batch=False)

    p = pipe()
    p.run()
    with pytest.raises(RuntimeError, match="external_source.*bad sample"):
        p.run()
    with pytest.raises(RuntimeError, match="call reset"):
        p.run()
    state["fail"] = False
    p.reset()
    assert p.run()[0].as_torch().flatten().tolist() == [0, 1]


def test_output_dtype_and_ndim_are_checked():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.random.uniform(shape=(2,)), fn.random.coin_flip()

    pipe(output_dtype=[types.FLOAT, types.INT32], output_ndim=[1, None]).run()
    with pytest.raises(RuntimeError, match="output_idx=1 does not match"):
        pipe(output_dtype=[None, types.FLOAT]).run()
    with pytest.raises(RuntimeError, match="Number of dimensions in the output_idx=0"):
        pipe(output_ndim=2).run()


def test_pruning_and_preserve():
    unused_calls, kept_calls = [], []

    def src(calls):
        def f():
            calls.append(1)
            return [np.zeros(1, np.float32)] * 2
        return f

    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None, exec_async=False, exec_pipelined=False)
    with pipe:
        fn.external_source(src(unused_calls))
        fn.external_source(src(kept_calls), preserve=True)
        pipe.set_outputs(fn.random.uniform())
    pipe.run()
    assert unused_calls == [] and kept_calls == [1]


def test_preserve_needs_a_current_pipeline():
    with pytest.raises(RuntimeError, match="current pipeline"):
        fn.random.uniform(preserve=True)


def test_operator_on_a_list_of_datanodes():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        a = fn.external_source(lambda: [np.full(2, 1.4, np.float32)] * 2)
        b = fn.external_source(lambda: [np.full(3, 2.6, np.float32)] * 2)
        x, y = fn.cast([a, b], dtype=types.INT32)
        return x, y

    x, y = pipe().run()
    assert x.as_torch().tolist() == [[1, 1]] * 2 and y.as_torch().tolist() == [[3, 3, 3]] * 2


def test_seed_makes_random_operators_deterministic():
    @pipeline_def(batch_size=5, num_threads=1, device_id=None)
    def pipe():
        return fn.random.uniform(range=(0, 1)), fn.random.normal(shape=(3,)), fn.random.coin_flip()

    a = [t.as_torch() for t in pipe(seed=11).run()]
    b = [t.as_torch() for t in pipe(seed=11).run()]
    c = [t.as_torch() for t in pipe(seed=12).run()]
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    # An explicit operator seed wins over the pipeline's.

    @pipeline_def(batch_size=5, num_threads=1, device_id=None)
    def fixed():
        return fn.random.uniform(seed=3)

    assert torch.equal(fixed(seed=1).run()[0].as_torch(), fixed(seed=2).run()[0].as_torch())


def test_cpu_operator_fed_gpu_data_names_both():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=0)
    with pipe:
        x = fn.external_source(name="x")
        with pytest.raises(ValueError, match=r"random.choice.*GPU data.*external_source"):
            fn.random.choice(x.gpu())
        with pytest.raises(ValueError, match="argument input 'range'.*GPU"):
            fn.random.uniform(range=x.gpu())
        with pytest.raises(ValueError, match="device 'mixed' is not supported"):
            fn.cast(x, dtype=types.FLOAT, device="mixed")


def test_gpu_operators_need_a_gpu_pipeline():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        with pytest.raises(ValueError, match="device_id=None"):
            fn.random.uniform(device="gpu")


def test_argument_errors_name_operator_and_argument():
    with pytest.raises(TypeError, match="random.uniform: unknown argument 'rnage' \\(did you mean range"):
        fn.random.uniform(rnage=(0, 1))
    with pytest.raises(TypeError, match="random.coin_flip: argument 'probability' = 'x'"):
        fn.random.coin_flip(probability="x")
    with pytest.raises(ValueError, match="random.coin_flip: argument 'probability' = 2.0.*\\[0, 1\\]"):
        fn.random.coin_flip(probability=2)
    with pytest.raises(TypeError, match="cast: argument 'dtype' is required"):
        fn.cast(fn.random.uniform())
    with pytest.raises(ValueError, match="external_source: argument 'cycle' = 'sometimes' is not one of"):
        fn.external_source([1], cycle="sometimes")
    with pytest.raises(TypeError, match="random.uniform: unknown argument"):
        dali.ops.Uniform(rnage=1)


def test_datanode_as_bool_explains_conditionals():
    with pytest.raises(TypeError, match="enable_conditionals"):
        if fn.random.coin_flip():
            pass


def test_argument_inputs_are_per_sample():
    @pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=1)
    def pipe():
        p = fn.external_source(lambda: [np.float32(x) for x in (0.0, 1.0, 0.0, 1.0)])
        return fn.random.coin_flip(probability=p, shape=(50,))

    (out,) = pipe().run()
    assert out.as_torch().sum(dim=1).tolist() == [0, 50, 0, 50]


def test_save_graph_to_dot_file(tmp_path):
    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        return fn.cast(fn.random.uniform(name="rng"), dtype=types.INT32)

    path = tmp_path / "g.dot"
    pipe().save_graph_to_dot_file(str(path), show_tensors=True, use_colors=True)
    text = path.read_text()
    assert text.startswith("digraph") and '"rng" -> "rng[0]"' in text and '"rng"[color="blue"]' in text


def test_checkpoint_resumes_random_operators_and_sources():
    @pipeline_def(batch_size=3, num_threads=1, device_id=None, seed=5, enable_checkpointing=True)
    def pipe():
        src = fn.external_source(lambda info: np.int32([info.idx_in_epoch]), batch=False)
        return src, fn.random.uniform(shape=(2,))

    ref = pipe()
    ref.run()
    ckpt = ref.checkpoint()
    expected = [[t.as_torch().clone() for t in ref.run()] for _ in range(3)]
    restored = pipe(checkpoint=ckpt)
    got = [[t.as_torch().clone() for t in restored.run()] for _ in range(3)]
    assert restored.is_restored_from_checkpoint
    for e, g in zip(expected, got):
        assert all(torch.equal(x, y) for x, y in zip(e, g))
    with pytest.raises(ValueError, match="not a torchdali checkpoint"):
        pipe(checkpoint="{}").build()
    with pytest.raises(RuntimeError, match="enable_checkpointing"):
        pipe(enable_checkpointing=False).checkpoint()


def test_deleted_pipeline_stops_its_threads():
    import gc
    import threading

    def make():
        @pipeline_def(batch_size=1, num_threads=1, device_id=None)
        def pipe():
            return fn.random.uniform()
        p = pipe()
        p.run()

    before = threading.active_count()
    for _ in range(5):
        make()
    gc.collect()
    assert threading.active_count() <= before + 1


def test_gpu_transfers_and_arithmetic_do_not_change_random_numbers():
    def make(extra_nodes):
        @pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=9)
        def pipe():
            x = fn.external_source(lambda: [np.zeros(1, np.float32)] * 4)
            if extra_nodes:
                x = (x + 1) * 2
            return fn.random.uniform(x), fn.random.normal()
        return [t.as_torch() for t in pipe().run()]

    assert all(torch.equal(a, b) for a, b in zip(make(False), make(True)))
