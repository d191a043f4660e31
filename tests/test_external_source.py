"""external_source in its in-process form: every kind of source, cycling, checks."""
import numpy as np
import pytest
import torch

from torchdali import fn, ops, pipeline_def, types
from torchdali.pipeline import Pipeline


def build(source=None, batch_size=3, **kwargs):
    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None)
    def pipe():
        return fn.external_source(source, **kwargs)

    return pipe()


def first_values(pipe, n):
    return [pipe.run()[0].as_torch().reshape(-1).tolist() for _ in range(n)]


def test_callable_without_arguments_batch_mode():
    pipe = build(lambda: np.arange(6, dtype=np.int32).reshape(3, 2))
    (out,) = pipe.run()
    assert out.is_dense_tensor() and out.as_torch().shape == (3, 2)


def test_batch_callable_gets_iteration_or_batch_info():
    pipe = build(lambda i: [np.int32([i])] * 3)
    assert first_values(pipe, 2) == [[0, 0, 0], [1, 1, 1]]
    infos = []

    def src(info):
        infos.append(info)
        return [np.int32([info.iteration])] * 3

    first_values(build(src, batch_info=True), 2)
    assert isinstance(infos[0], types.BatchInfo) and [i.iteration for i in infos[:2]] == [0, 1]


def test_per_sample_callable_gets_sample_info():
    infos = []

    def src(info):
        infos.append(info)
        return np.int32([info.idx_in_epoch, info.idx_in_batch, info.iteration, info.epoch_idx, info.iter_idx])

    pipe = build(src, batch=False)
    pipe.run()
    (out,) = pipe.run()
    assert out.at(2).tolist() == [5, 2, 1, 0, 1]
    assert isinstance(infos[0], types.SampleInfo)


def test_per_sample_callable_stop_iteration_ends_epoch_and_epoch_idx_advances():
    def src(info):
        if info.iteration >= 2:
            raise StopIteration
        return np.int32([info.epoch_idx])

    pipe = build(src, batch=False)
    for epoch in range(2):
        assert first_values(pipe, 2) == [[epoch] * 3] * 2
        with pytest.raises(StopIteration):
            pipe.run()
        pipe.reset()


def test_iterable_and_generator_function_restart_on_reset():
    batches = [[np.int32([k])] * 3 for k in range(2)]

    def gen():
        yield from batches

    for source in (batches, gen):
        pipe = build(source)
        for _ in range(2):
            assert first_values(pipe, 2) == [[0] * 3, [1] * 3]
            with pytest.raises(StopIteration):
                pipe.run()
            pipe.reset()


@pytest.mark.parametrize("cycle", [True, "quiet"])
def test_cycle_restarts_silently(cycle):
    pipe = build([[np.int32([k])] * 3 for k in range(2)], cycle=cycle)
    assert [v[0] for v in first_values(pipe, 5)] == [0, 1, 0, 1, 0]


def test_cycle_raise_stops_then_restarts_after_reset():
    pipe = build([[np.int32([k])] * 3 for k in range(2)], cycle="raise")
    assert [v[0] for v in first_values(pipe, 2)] == [0, 1]
    with pytest.raises(StopIteration):
        pipe.run()
    pipe.reset()
    assert [v[0] for v in first_values(pipe, 1)] == [0]


def test_cycle_with_callable_is_rejected():
    with pytest.raises(ValueError, match="cycle"):
        build(lambda: [np.zeros(1)] * 3, cycle=True).build()


def test_per_sample_iterable():
    pipe = build(iter([np.int32([k]) for k in range(6)]), batch=False)
    assert first_values(pipe, 2) == [[0, 1, 2], [3, 4, 5]]


def test_num_outputs_with_per_sample_source():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        a, b = fn.external_source(lambda info: (np.int32([info.idx_in_epoch]), np.float32([0.5])),
                                  num_outputs=2, batch=False, dtype=[types.INT32, types.FLOAT])
        return a, b

    a, b = pipe().run()
    assert a.as_torch().flatten().tolist() == [0, 1] and b.dtype == types.FLOAT


def test_torch_tensors_lists_and_variable_batch_size():
    pipe = build(lambda: [torch.ones(2, 2), torch.zeros(3, 1)], batch_size=4)
    (out,) = pipe.run()
    assert len(out) == 2 and out.shape() == [[2, 2], [3, 1]]


def test_numpy_data_is_not_copied():
    array = np.zeros((3, 4), np.float32)
    pipe = build(lambda: array)
    (out,) = pipe.run()
    assert out.as_torch().data_ptr() == array.ctypes.data


def test_a_list_of_one_shape_is_copied_into_one_batch_unless_no_copy():
    """As DALI copies (no_copy=False): the source may reuse its arrays once run() returns."""
    arrays = [np.full((2, 3), i, np.uint8) for i in range(3)]
    (out,) = build(lambda: arrays).run()
    assert out.dense_tensor() is not None and out.as_torch().data_ptr() not in {a.ctypes.data for a in arrays}
    arrays[0][:] = 7
    assert out.as_array()[0].tolist() == [[0, 0, 0], [0, 0, 0]]
    (shared,) = build(lambda: arrays, no_copy=True).run()
    assert [shared.at(i).ctypes.data for i in range(3)] == [a.ctypes.data for a in arrays]
    ragged = [np.zeros(2, np.uint8), np.zeros(3, np.uint8)]
    (out,) = build(lambda: ragged, batch_size=2).run()
    assert [out.at(i).ctypes.data for i in range(2)] == [a.ctypes.data for a in ragged]


def test_declared_dtype_ndim_and_layout_are_checked():
    with pytest.raises(TypeError, match="has type DALIDataType.FLOAT64, but dtype=DALIDataType.FLOAT"):
        build(lambda: [np.zeros(2)] * 3, dtype=types.FLOAT).run()
    with pytest.raises(ValueError, match="2 dimensions, but ndim=1"):
        build(lambda: [np.zeros((2, 2))] * 3, ndim=1).run()
    with pytest.raises(ValueError, match="layout 'HWC' does not match"):
        build(lambda: [np.zeros((2, 2))] * 3, layout="HWC").run()
    with pytest.raises(ValueError, match="layout 'HW' does not have ndim=3"):
        build(lambda: [np.zeros((2, 2))] * 3, layout="HW", ndim=3).build()
    (out,) = build(lambda: [np.zeros((2, 2, 3), np.uint8)] * 3, layout="HWC").run()
    assert out.layout() == "HWC"


def test_a_batch_has_one_type_and_one_number_of_dims():
    """As in DALI: mixed samples are an error naming the first one unlike sample 0 (they were
    passed on under sample 0's type)."""
    with pytest.raises(TypeError, match="output 0 sample 2 has type DALIDataType.FLOAT, sample 0 DALIDataType.UINT8: "
                                        "the samples of a batch must have one type"):
        build(lambda: [np.zeros(2, np.uint8), np.ones(2, np.uint8), np.zeros(2, np.float32)]).run()
    with pytest.raises(ValueError, match="output 0 sample 1 has 3 dimensions, sample 0 2: the samples of a batch must "
                                         "have one number of dimensions"):
        build(lambda: [np.zeros((2, 2)), np.zeros((2, 2, 1)), np.zeros((2, 2))]).run()
    (out,) = build(lambda: [np.zeros((2, 2)), np.zeros((3, 1)), np.zeros((1, 4))]).run()  # shapes may differ
    assert out.shape() == [[2, 2], [3, 1], [1, 4]]


def test_batch_larger_than_batch_size_is_an_error():
    with pytest.raises(ValueError, match="4 samples, more than the pipeline's batch_size 3"):
        build(lambda: np.zeros((4, 1))).run()


def test_a_scalar_batch_is_an_error():
    with pytest.raises(TypeError, match=r"external_source.*a batch must be a list of samples .* got a scalar \(7\)"):
        build(lambda: 7).run()


def test_wrong_number_of_outputs():
    with pytest.raises(RuntimeError, match="must return 2 outputs"):
        build(lambda: [np.zeros(1)] * 3, num_outputs=2).run()


def test_source_that_is_not_iterable():
    with pytest.raises(TypeError, match="neither callable nor iterable"):
        build(42).build()


def test_ops_class_and_positional_source():
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        src = ops.ExternalSource(lambda: ([np.zeros(1)] * 2, [np.ones(1)] * 2), num_outputs=2)
        a, b = src()
        pipe.set_outputs(a, b)
    a, b = pipe.run()
    assert b.as_torch().sum() == 2


def test_repeat_last_without_new_data():
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None, prefetch_queue_depth=1)
    with pipe:
        pipe.set_outputs(fn.external_source(name="x", repeat_last=True))
    pipe.feed_input("x", np.ones((2, 1), np.float32))
    assert pipe.run()[0].as_torch().sum() == 2
    assert pipe.run()[0].as_torch().sum() == 2
