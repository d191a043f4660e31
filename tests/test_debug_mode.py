"""Debug mode (`pipeline.experimental.pipeline_def(debug=True)`): eager operator calls,
DataNodeDebug.get(), data given straight to operators, the same numbers as the built
pipeline, readers and external_source, and the errors for definitions that change."""
import numpy as np
import pytest
import torch

import torchdali as dali
from torchdali import fn, types
from torchdali.pipeline.experimental import DataNodeDebug, pipeline_def
from torchdali.sample_data import write_sample_dataset

from conftest import requires_cuda


def samples(batch):
    return [s.cpu() for s in batch.as_torch_list()]


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.layout() == y.layout()
        assert all(torch.equal(s, t) for s, t in zip(samples(x), samples(y)))


def image_source(info):
    return np.full((8, 9, 3), info.idx_in_epoch % 251, np.uint8)


def augment():
    img = fn.external_source(source=image_source, batch=False, layout="HWC")
    flip = fn.random.coin_flip()
    return (fn.random.uniform(range=(0, 1)), fn.random.normal(shape=[2]), flip,
            fn.random_resized_crop(img, size=(4, 4)), fn.jitter(img), fn.flip(img, horizontal=flip),
            fn.rotate(img, angle=fn.random.uniform(range=(-30, 30)), fill_value=0) * 2)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return write_sample_dataset(str(tmp_path_factory.mktemp("images")), num_images=10, num_classes=2,
                                min_size=16, max_size=32)


def test_both_import_paths_give_the_experimental_decorator():
    import torchdali.pipeline.experimental as experimental
    assert dali.pipeline.experimental.pipeline_def is experimental.pipeline_def is pipeline_def


def test_operator_outputs_are_data_node_debug_with_their_batch():
    seen = []

    @pipeline_def(batch_size=3, num_threads=1, device_id=None, seed=1, debug=True)
    def pipe():
        u = fn.random.uniform(range=(2, 3))
        assert isinstance(u, DataNodeDebug)
        seen.append(u.get().as_torch().clone())
        doubled = u * 2
        assert torch.allclose(doubled.get().as_torch(), seen[-1] * 2)
        assert doubled.shape() == [[], [], []]
        return doubled

    p = pipe()
    for _ in range(2):
        (out,) = p.run()
        assert torch.allclose(out.as_torch(), seen[-1] * 2)
        assert ((seen[-1] >= 2) & (seen[-1] < 3)).all()
    assert len(seen) == 2 and not torch.equal(seen[0], seen[1])  # the definition ran twice


@pytest.mark.parametrize("data", ["numpy_list", "torch_list", "numpy_batch", "torch_batch"])
def test_arrays_and_tensors_go_straight_to_operators(data):
    rng = np.random.default_rng(0)
    batch = rng.integers(0, 255, (4, 5, 6, 3), dtype=np.uint8)
    given = {"numpy_list": list(batch), "torch_list": [torch.from_numpy(x) for x in batch],
             "numpy_batch": batch, "torch_batch": torch.from_numpy(batch)}[data]

    @pipeline_def(batch_size=4, num_threads=1, device_id=None, debug=True)
    def pipe():
        return fn.flip(given, horizontal=1)

    (out,) = pipe().run()
    assert len(out) == 4
    for s, x in zip(samples(out), batch):
        np.testing.assert_array_equal(s.numpy(), x[:, ::-1])


def test_a_list_of_arrays_is_an_argument_input_and_a_list_of_numbers_a_constant():
    images = [np.zeros((4, 4, 3), np.uint8)] * 2

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, debug=True)
    def pipe():
        angle = [np.array(90, np.float32), np.array(0, np.float32)]
        return fn.rotate(images, angle=angle, keep_size=True), fn.crop(images, crop=[2, 3])

    rotated, cropped = pipe().run()
    assert rotated.shape() == [[4, 4, 3], [4, 4, 3]] and cropped.shape() == [[2, 3, 3], [2, 3, 3]]


def test_random_operators_give_the_built_pipeline_s_numbers():
    debug = pipeline_def(augment, batch_size=3, num_threads=1, device_id=None, seed=7, debug=True)()
    built = dali.pipeline_def(augment, batch_size=3, num_threads=2, device_id=None, seed=7)()
    for _ in range(3):
        assert_same(debug.run(), built.run())


def test_reader_and_decoder_follow_the_built_pipeline_over_epochs(images):
    def define():
        jpegs, labels = fn.readers.file(file_root=images, random_shuffle=True, initial_fill=4, name="r")
        decoded = fn.decoders.image(jpegs, output_type=types.RGB)
        return fn.resize(decoded, size=(8, 8)), labels, jpegs.source_info()

    debug = pipeline_def(define, batch_size=4, num_threads=1, device_id=None, seed=3, debug=True)()
    built = dali.pipeline_def(define, batch_size=4, num_threads=1, device_id=None, seed=3)()
    for _ in range(6):  # 10 files: crosses two epoch ends
        assert_same(debug.run(), built.run())
    assert debug.epoch_size("r") == 10 and debug.reader_meta("r")["epoch_size"] == 10


def test_external_source_feed_input_and_end_of_data():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None, debug=True)
    def pipe():
        fed = fn.external_source(name="fed")
        counted = fn.external_source(source=iter([[np.int32([i])] * 2 for i in range(2)]))
        return fed + 0, counted

    p = pipe()
    p.feed_input("fed", [np.float32([1]), np.float32([2])])  # before the source exists
    p.feed_input("fed", np.float32([[3], [4]]))
    fed, counted = p.run()
    assert fed.as_torch().flatten().tolist() == [1, 2] and counted.as_torch().flatten().tolist() == [0, 0]
    fed, counted = p.run()
    assert fed.as_torch().flatten().tolist() == [3, 4] and counted.as_torch().flatten().tolist() == [1, 1]
    p.feed_input("fed", [np.float32([5])] * 2)
    with pytest.raises(StopIteration):
        p.run()


def test_run_with_pipeline_inputs_and_constant_outputs():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None, debug=True)
    def pipe():
        return fn.external_source(name="x") * 3, 7

    x, seven = pipe().run(x=np.int32([[1], [2]]))
    assert x.as_torch().flatten().tolist() == [3, 6]
    assert seven.dtype == types.INT32 and seven.as_torch().tolist() == [7, 7]


def test_python_function_and_preserved_side_effects_run():
    calls = []

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, exec_async=False, exec_pipelined=False,
                  debug=True)
    def pipe():
        x = fn.external_source(source=lambda: [np.int32([1]), np.int32([2])])
        fn.python_function(x, function=lambda a: calls.append(int(a[0])), num_outputs=0)
        return fn.python_function(x, function=lambda a: a + 10)

    (out,) = pipe().run()
    assert out.as_torch().flatten().tolist() == [11, 12] and calls == [1, 2]


def test_changing_the_operators_between_iterations_is_an_error():
    state = {"n": 0}

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, debug=True)
    def pipe():
        state["n"] += 1
        if state["n"] == 1:
            return fn.random.uniform()
        return fn.random.normal()

    p = pipe()
    p.run()
    with pytest.raises(RuntimeError, match="same order every iteration"):
        p.run()


def test_changing_a_constant_argument_is_an_error():
    state = {"n": 0}

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, debug=True)
    def pipe():
        state["n"] += 1
        return fn.random.uniform(range=(0, state["n"]))

    p = pipe()
    p.run()
    with pytest.raises(RuntimeError, match="argument 'range' of random.uniform changed"):
        p.run()


def test_checkpoints_and_conditionals_are_refused_clearly():
    def define():
        return fn.random.uniform()

    with pytest.raises(ValueError, match="checkpoints are not available in debug mode"):
        pipeline_def(define, batch_size=1, num_threads=1, device_id=None, debug=True,
                     enable_checkpointing=True)()
    with pytest.raises(ValueError, match="enable_conditionals"):
        pipeline_def(define, debug=True, enable_conditionals=True)


def test_without_debug_the_experimental_decorator_builds_a_normal_pipeline():
    p = pipeline_def(augment, batch_size=2, num_threads=1, device_id=None, seed=1)()
    assert type(p) is dali.Pipeline and len(p.run()) == 7


def test_output_checks_apply_in_debug_mode():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None, debug=True, output_dtype=types.INT32)
    def pipe():
        return fn.random.uniform()

    with pytest.raises(RuntimeError, match="Data type in the output_idx=0 does not match"):
        pipe().run()


@requires_cuda
def test_gpu_operators_in_debug_mode_match_the_built_pipeline():
    def define():
        img = fn.external_source(source=image_source, batch=False, layout="HWC")
        gpu = img.gpu()
        return fn.flip(gpu, horizontal=fn.random.coin_flip()), fn.random_resized_crop(gpu, size=(4, 4))

    debug = pipeline_def(define, batch_size=3, num_threads=1, device_id=0, seed=2, debug=True)()
    built = dali.pipeline_def(define, batch_size=3, num_threads=1, device_id=0, seed=2)()
    for _ in range(2):
        out = debug.run()
        assert all(isinstance(x, dali.tensors.TensorListGPU) for x in out)
        assert_same(out, built.run())
