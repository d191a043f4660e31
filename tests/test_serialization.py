"""Pipeline.serialize / Pipeline.deserialize: the JSON format, identical outputs after a
round trip (readers, random operators, argument inputs, several outputs, constants,
GPU stages), overridden parameters, and clear errors for callbacks and bad text."""
import json

import numpy as np
import pytest
import torch

import torchdali as dali
from torchdali import fn, types
from torchdali.sample_data import write_sample_dataset

from conftest import requires_cuda


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_sample_dataset(str(tmp_path_factory.mktemp("ser")), num_images=8, num_classes=2,
                                min_size=16, max_size=24)


def decoded(root):
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, initial_fill=4, name="reader")
    return fn.resize(fn.decoders.image(jpegs, output_type=types.RGB), size=(10, 12)), labels, jpegs


def with_images(build):
    """A graph over one reader's decoded images: build(images, labels, jpegs)."""
    return lambda r: build(*decoded(r))


# Each builds the outputs of one pipeline from the dataset folder.
GRAPHS = {
    "reader_and_decoder": with_images(lambda im, lab, jpegs: (im, lab)),
    "random_ops_with_seeds": lambda r: (fn.random.uniform(range=(0, 5), seed=4), fn.random.normal(shape=[3]),
                                        fn.random.choice(np.int32([1, 2, 3])), fn.random.coin_flip(probability=.7)),
    "argument_inputs": with_images(lambda im, lab, jpegs: (
        fn.flip(im, horizontal=fn.random.coin_flip()),
        fn.rotate(im, angle=fn.random.uniform(range=(-30, 30)), fill_value=0))),
    "augmentations": with_images(lambda im, lab, jpegs: (
        fn.random_resized_crop(im, size=(6, 6)), fn.jitter(im), fn.decoders.image_random_crop(jpegs))),
    "normalize_and_arrays": with_images(lambda im, lab, jpegs: (
        fn.crop_mirror_normalize(im, crop=(6, 6), mean=[1., 2., 3.], std=[2., 2., 2.], dtype=types.FLOAT16,
                                 output_layout="CHW", mirror=1),
        fn.warp_affine(im, matrix=np.float32([[1, 0, 1], [0, 1, 2]]), interp_type=types.INTERP_LINEAR))),
    "plumbing_and_constants": with_images(lambda im, lab, jpegs: (
        lab * 2 + 1, im[1:3, :, 0], im.shape(), jpegs.source_info(), 5, np.float32([1, 2]),
        fn.cast(lab, dtype=types.FLOAT))),
    "multiple_outputs": lambda r: fn.readers.file(file_root=r, shard_id=1, num_shards=2, pad_last_batch=True),
}


def make(name, root, **kwargs):
    @dali.pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe():
        return GRAPHS[name](root)
    return pipe(**kwargs)


def assert_same_runs(a, b, n=3):
    for _ in range(n):
        out_a, out_b = a.run(), b.run()
        assert len(out_a) == len(out_b)
        for x, y in zip(out_a, out_b):
            assert x.dtype == y.dtype and x.layout() == y.layout() and len(x) == len(y)
            assert all(torch.equal(s.cpu(), t.cpu()) for s, t in zip(x.as_torch_list(), y.as_torch_list()))


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_deserialized_pipeline_gives_identical_outputs(root, name):
    orig = make(name, root)
    restored = dali.Pipeline.deserialize(orig.serialize())
    assert restored.num_outputs == orig.num_outputs and restored.batch_size == 3
    assert_same_runs(orig, restored)


def test_format_is_versioned_json_with_one_record_per_operator(root, tmp_path):
    path = tmp_path / "pipe.json"
    text = make("argument_inputs", root, seed=12).serialize(filename=str(path))
    assert path.read_text() == text
    data = json.loads(text)
    assert data["format"] == "torchdali-pipeline" and data["version"] == 1
    assert data["pipeline"]["seed"] == 12 and data["pipeline"]["device_id"] is None
    ops = [r["op"] for r in data["operators"]]
    assert ops[:4] == ["readers.file", "decoders.image", "resize", "random.coin_flip"]
    flip = data["operators"][ops.index("flip")]
    assert flip["arg_inputs"] == {"horizontal": [3, 0]} and flip["inputs"] == [[2, 0]]
    assert data["operators"][0]["args"]["name"] == "reader" and len(text.splitlines()) == len(ops) + 6
    assert_same_runs(make("argument_inputs", root, seed=12), dali.Pipeline.deserialize(filename=str(path)))


def test_keyword_arguments_override_the_stored_parameters(root):
    text = make("random_ops_with_seeds", root, seed=3).serialize()
    p = dali.Pipeline.deserialize(text, batch_size=5, num_threads=2, seed=3, prefetch_queue_depth=1)
    assert (p.batch_size, p.num_threads, p.prefetch_queue_depth) == (5, 2, 1)
    assert len(p.run()[0]) == 5
    assert_same_runs(make("random_ops_with_seeds", root, seed=8), dali.Pipeline.deserialize(text, seed=8))


def test_deserialize_and_build_into_an_unconfigured_pipeline(root):
    text = make("reader_and_decoder", root, seed=6).serialize()
    p = dali.Pipeline()
    p.deserialize_and_build(text)
    assert p.batch_size == 3
    assert_same_runs(make("reader_and_decoder", root, seed=6), p)


def test_checkpoint_of_the_original_resumes_the_deserialized_pipeline(root):
    orig = make("argument_inputs", root, seed=1, enable_checkpointing=True)
    for _ in range(2):
        orig.run()
    restored = dali.Pipeline.deserialize(orig.serialize(), checkpoint=orig.checkpoint())
    assert_same_runs(orig, restored)


def test_fed_external_source_and_preserved_operators_are_serialized():
    @dali.pipeline_def(batch_size=2, num_threads=1, device_id=None, exec_async=False, exec_pipelined=False)
    def pipe():
        x = fn.external_source(name="x", layout="HW", dtype=types.UINT8)
        fn.random.uniform(preserve=True)
        return fn.flip(x, horizontal=0, vertical=1)

    text = pipe().serialize()
    assert json.loads(text)["sinks"] == [1]
    p = dali.Pipeline.deserialize(text)
    p.feed_input("x", [np.arange(4, dtype=np.uint8).reshape(2, 2)] * 2)
    (out,) = p.run()
    assert out.layout() == "HW" and out.as_torch()[0].tolist() == [[2, 3], [0, 1]]


@pytest.mark.parametrize("define, match", [
    (lambda: fn.external_source(source=lambda: [np.int32([1])]), "Python `source`"),
    (lambda: fn.external_source(source=[[np.int32([1])]]), "Python `source`"),
    (lambda: fn.python_function(fn.random.uniform(), function=lambda x: x), "Python callback"),
])
def test_graphs_with_callbacks_cannot_be_serialized(define, match):
    with pytest.raises(TypeError, match=match):
        dali.pipeline_def(define, batch_size=1, num_threads=1, device_id=None,
                          exec_async=False, exec_pipelined=False)().serialize()


@pytest.mark.parametrize("text, match", [
    ("{", "deserialize"),
    ('{"format": "other"}', "not a serialized torchdali pipeline"),
    ('{"format": "torchdali-pipeline", "version": 7}', "version 7"),
    ('{"format": "torchdali-pipeline", "version": 1, "pipeline": {}, "operators": [{"op": "flip"}],'
     ' "outputs": [], "sinks": []}', "operator 0 \\('flip'\\) is malformed"),
])
def test_bad_text_is_a_clear_error(text, match):
    with pytest.raises(ValueError, match=match):
        dali.Pipeline.deserialize(text, batch_size=1, num_threads=1, device_id=None)


def test_serialized_pipeline_and_filename_are_exclusive():
    with pytest.raises(ValueError, match="not both"):
        dali.Pipeline.deserialize("{}", filename="x.json")


def test_serialize_with_define_graph_of_a_subclass(root):
    class Legacy(dali.Pipeline):
        def define_graph(self):
            return fn.random.uniform(range=(1, 2))

    text = Legacy(batch_size=2, num_threads=1, device_id=None, seed=5).serialize()
    assert_same_runs(Legacy(batch_size=2, num_threads=1, device_id=None, seed=5), dali.Pipeline.deserialize(text))


@requires_cuda
def test_gpu_stages_round_trip(root):
    def define():
        images, labels, jpegs = decoded(root)
        gpu = images.gpu()
        return (fn.flip(gpu, horizontal=fn.random.coin_flip()), fn.random_resized_crop(gpu, size=(5, 5)),
                fn.decoders.image(jpegs, device="mixed"), labels.gpu())

    orig = dali.pipeline_def(define, batch_size=3, num_threads=1, device_id=0, seed=2)()
    restored = dali.Pipeline.deserialize(orig.serialize())
    assert json.loads(orig.serialize())["pipeline"]["device_id"] == 0
    assert_same_runs(orig, restored)
