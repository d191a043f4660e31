"""Checkpoints: a pipeline restored from `checkpoint()` continues exactly as the
uninterrupted one (shuffled readers, every random operator, external sources), taken
mid-epoch and at epoch ends; bad checkpoints fail clearly and restore nothing."""
import json

import numpy as np
import pytest
import torch

import torchdali as dali
from torchdali import fn, types
from torchdali.sample_data import write_sample_dataset


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return {"ten": write_sample_dataset(str(root / "ten"), num_images=10, num_classes=2, min_size=16,
                                        max_size=24),
            "six": write_sample_dataset(str(root / "six"), num_images=6, num_classes=2, min_size=16,
                                        max_size=24, seed=1)}


def image_source(info):
    rng = np.random.default_rng(info.idx_in_epoch + 1000 * info.epoch_idx)
    return rng.integers(0, 255, (12, 10, 3), dtype=np.uint8)


def images():
    return fn.external_source(source=image_source, batch=False, layout="HWC")


# Each entry builds the outputs of one pipeline (given the dataset folder) around one
# stateful operator.
DEFINITIONS = {
    "random.uniform": lambda d: fn.random.uniform(range=(-1, 1), shape=[3]),
    "random.uniform_values": lambda d: fn.random.uniform(values=[1, 5, 7]),
    "random.normal": lambda d: fn.random.normal(mean=fn.random.uniform(range=(0, 9))),
    "random.coin_flip": lambda d: fn.random.coin_flip(probability=0.3),
    "random.choice": lambda d: fn.random.choice(np.int32([2, 4, 6]), p=[0.2, 0.3, 0.5]),
    "jitter": lambda d: fn.jitter(images(), nDegree=3),
    "random_resized_crop": lambda d: fn.random_resized_crop(images(), size=(6, 6)),
    "flip_by_coin": lambda d: fn.flip(images(), horizontal=fn.random.coin_flip()),
    "external_source": lambda d: images(),
    "readers.file_shuffled": lambda d: fn.readers.file(file_root=d, random_shuffle=True, initial_fill=3,
                                                       seed=11),
    "readers.file_shuffle_after_epoch": lambda d: fn.readers.file(file_root=d, shuffle_after_epoch=True),
    "decoders.image_random_crop": lambda d: fn.decoders.image_random_crop(
        fn.readers.file(file_root=d, random_shuffle=True)[0], output_type=types.RGB),
}


def make(name, root, **kwargs):
    @dali.pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=9, enable_checkpointing=True)
    def pipe():
        return DEFINITIONS[name](root)

    return pipe(**kwargs)


def batches(pipe, n):
    out = []
    for _ in range(n):
        out.append([[s.clone() for s in x.as_torch_list()] for x in pipe.run()])
    return out


def same(a, b):
    return len(a) == len(b) and all(len(s) == len(t) and all(torch.equal(p, q) for p, q in zip(s, t))
                                    for x, y in zip(a, b) for s, t in zip(x, y))


def assert_same(a, b):
    assert same(a, b)


@pytest.mark.parametrize("at", [1, 2, 5], ids=["mid_epoch", "crossing_epoch", "epoch_end"])
@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_resumed_pipeline_continues_as_the_uninterrupted_one(files, name, at):
    # 10 files, batches of 4: the epoch ends inside iteration 3; 5 iterations = 2 epochs.
    ref = make(name, files["ten"])
    batches(ref, at)
    ckpt = ref.checkpoint()
    expected = batches(ref, 4)
    resumed = make(name, files["ten"], checkpoint=ckpt)
    assert not resumed.is_restored_from_checkpoint  # as DALI: restored when built
    assert_same(batches(resumed, 4), expected)
    assert resumed.is_restored_from_checkpoint
    assert not same(batches(make(name, files["ten"]), 4), expected)  # the state mattered


@pytest.mark.parametrize("exec_async", [True, False])
def test_checkpoint_describes_the_last_returned_batch_despite_prefetching(files, exec_async):
    kwargs = dict(exec_async=exec_async, exec_pipelined=exec_async, prefetch_queue_depth=3)
    ref = make("readers.file_shuffled", files["ten"], **kwargs)
    batches(ref, 2)
    ckpt = ref.checkpoint()
    expected = batches(ref, 3)
    assert_same(batches(make("readers.file_shuffled", files["ten"], checkpoint=ckpt, **kwargs), 3), expected)


def test_external_source_epochs_and_iterations_are_restored(tmp_path):
    def source(info):
        if info.iteration >= 2:
            raise StopIteration
        return np.int32([info.epoch_idx, info.iteration, info.idx_in_batch])

    @dali.pipeline_def(batch_size=2, num_threads=1, device_id=None, enable_checkpointing=True)
    def pipe():
        return fn.external_source(source=source, batch=False)

    p = pipe()
    p.run()
    p.run()
    with pytest.raises(StopIteration):
        p.run()
    p.reset()
    p.run()
    path = tmp_path / "ckpt.json"
    text = p.checkpoint(filename=str(path))
    assert path.read_text() == text
    state = json.loads(text)["operators"]
    assert list(state.values()) == [{"iteration": 1, "epoch": 1}]
    resumed = pipe(checkpoint=path.read_text())
    (out,) = resumed.run()
    assert out.as_torch().tolist() == [[1, 1, 0], [1, 1, 1]]
    with pytest.raises(StopIteration):
        resumed.run()


@pytest.mark.parametrize("text, match", [
    ("not json {", "not a torchdali checkpoint"),
    ("[1, 2]", "not a torchdali checkpoint"),
    ('{"format": "dali"}', "not a torchdali checkpoint"),
    ('{"format": "torchdali-checkpoint", "version": 99, "operators": {}}', "version 99"),
    ('{"format": "torchdali-checkpoint", "version": 1, "operators": [1]}', "malformed"),
    ('{"format": "torchdali-checkpoint", "version": 1}', "malformed"),
    ('{"format": "torchdali-checkpoint", "version": 1, "operators": {"other#0": {}}}', "operators differ"),
])
def test_corrupted_or_foreign_checkpoints_are_rejected(files, text, match):
    with pytest.raises(ValueError, match=match):
        make("random.uniform", files["ten"], checkpoint=text).build()


def test_checkpoint_of_another_definition_is_rejected(files):
    ckpt = make("random.normal", files["ten"]).checkpoint()
    with pytest.raises(ValueError, match="does not match this pipeline"):
        make("random.coin_flip", files["ten"], checkpoint=ckpt).build()


def test_a_rejected_state_restores_nothing(files):
    def two_readers(second):
        @dali.pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=2, enable_checkpointing=True)
        def pipe():
            a, _ = fn.readers.file(file_root=files["ten"], random_shuffle=True, name="a")
            b, _ = fn.readers.file(file_root=files[second], random_shuffle=True, name="b")
            return a, b
        return pipe

    ref = two_readers("ten")()
    batches(ref, 2)
    ckpt = ref.checkpoint()  # reader "b" listed 10 files; the new "b" lists 6
    broken = two_readers("six")(checkpoint=ckpt)
    with pytest.raises(ValueError, match="operator 'b' rejects its state.*10 files"):
        broken.build()
    assert not broken.is_restored_from_checkpoint
    assert_same(batches(broken, 3), batches(two_readers("six")(), 3))  # reader "a" is at its start


def test_checkpoint_needs_enable_checkpointing(files):
    with pytest.raises(RuntimeError, match="enable_checkpointing"):
        make("random.uniform", files["ten"], enable_checkpointing=False).checkpoint()


def test_operator_names_must_be_unique():
    @dali.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.random.uniform(name="u"), fn.random.normal(name="u")

    with pytest.raises(RuntimeError, match=r"operator names are not unique: \['u'\]"):
        pipe().build()
