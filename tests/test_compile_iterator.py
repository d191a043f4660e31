"""torch.compile and the iterators: batches of one static shape under FILL and DROP, so a
compiled model compiles once for all batches and epochs; PARTIAL's short last batch
recompiles unless the batch dimension is marked dynamic; torchdali ops called on an
iterator's batch inside torch.compile(fullgraph=True)."""
import pytest
import torch

from tests.conftest import requires_cuda
from torchdali import fn, pipeline_def, types
from torchdali.kernels.geometry import flip
from torchdali.kernels.resize import resize
from torchdali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
from torchdali.sample_data import write_sample_dataset


@pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=3)
def features(files, pad):
    _, label = fn.readers.file(files=files, random_shuffle=True, pad_last_batch=pad, name="Reader")
    return fn.random.uniform(range=[0, 1], shape=[3]), label


@pytest.fixture
def files(tmp_path):
    paths = [str(tmp_path / f"f{i:02d}") for i in range(14)]  # 3 whole batches and 2 samples
    for p in paths:
        open(p, "wb").close()
    return paths


def count_compilations(policy, files, mark_dynamic=False, epochs=3):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    @torch.compile(backend=backend, fullgraph=True)
    def step(x, label):
        return (x * 2).sum(1) + label.flatten()

    torch._dynamo.reset()
    it = DALIGenericIterator(features(files=files, pad=policy == LastBatchPolicy.PARTIAL), ["x", "label"],
                             reader_name="Reader", last_batch_policy=policy)
    sizes = set()
    for _ in range(epochs):
        for (batch,) in it:
            if mark_dynamic:
                torch._dynamo.mark_dynamic(batch["x"], 0)
                torch._dynamo.mark_dynamic(batch["label"], 0)
            step(batch["x"], batch["label"])
            sizes.add(len(batch["x"]))
    return len(graphs), sizes


@pytest.mark.parametrize("policy", [LastBatchPolicy.FILL, LastBatchPolicy.DROP])
def test_fill_and_drop_compile_once(files, policy):
    assert count_compilations(policy, files) == (1, {4})


def test_partial_last_batch_recompiles_unless_marked_dynamic(files):
    assert count_compilations(LastBatchPolicy.PARTIAL, files) == (2, {4, 2})
    assert count_compilations(LastBatchPolicy.PARTIAL, files, mark_dynamic=True) == (1, {4, 2})


@pipeline_def(batch_size=4, num_threads=1, seed=5)
def images(data_dir, device):
    jpegs, _ = fn.readers.file(file_root=data_dir, name="Reader")
    decoded = fn.decoders.image(jpegs, device="mixed" if device == "gpu" else "cpu", output_type=types.RGB)
    return fn.resize(decoded, size=[24, 32])


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=requires_cuda)])
def test_torchdali_ops_on_a_batch_inside_torch_compile(tmp_path, device):
    data = write_sample_dataset(str(tmp_path / "data"), num_images=8, min_size=40, max_size=64)
    pipe = images(data, device, device_id=0 if device == "gpu" else None)
    (batch,) = next(DALIGenericIterator(pipe, ["images"], reader_name="Reader"))
    x = batch["images"]
    assert x.shape == (4, 24, 32, 3) and x.dtype == torch.uint8

    def augment(x, horizontal, vertical):
        flipped = flip(x, horizontal, vertical)
        small = resize(list(flipped.unbind(0)), [[12, 16]] * 4, dense=True)
        return small.float().sub(128).div(64).permute(0, 3, 1, 2)

    horizontal, vertical = torch.tensor([1, 0, 1, 0]), torch.tensor([0, 0, 1, 1])
    expected = augment(x, horizontal, vertical)
    torch._dynamo.reset()
    got = torch.compile(augment, fullgraph=True, backend="aot_eager")(x, horizontal, vertical)
    assert got.shape == (4, 3, 12, 16) and got.device == x.device
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert torch.equal(flip(x, horizontal, vertical)[0], x[0].flip(1))  # sample 0: left-right
