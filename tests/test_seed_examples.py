"""The examples of the specification documents (shared seeds 001 and 003) that need only
the core: written as the documents write them, with `nvidia.dali` swapped for `torchdali`."""
import numpy as np
import pytest
import torch

import torchdali as dali
import torchdali.fn as fn
import torchdali.ops as ops
import torchdali.types as types
from torchdali import pipeline_def
from torchdali.pipeline import Pipeline
from torchdali.sample_data import write_sample_dataset

from conftest import requires_cuda

N = 4


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory):
    return write_sample_dataset(str(tmp_path_factory.mktemp("images")), num_images=22, num_classes=2,
                                min_size=64, max_size=96)


def my_source():
    return [np.zeros((2,), np.float32)] * N, [np.ones((3,), np.int32)] * N


def test_001_current_pipeline_with_ops_external_source():
    pipe = dali.Pipeline(batch_size=N, num_threads=3, device_id=0)
    with pipe:
        src = dali.ops.ExternalSource(my_source, num_outputs=2)
        a, b = src()
        pipe.set_outputs(a, b)
    a, b = pipe.run()
    assert a.as_torch().shape == (N, 2) and b.as_torch().shape == (N, 3)


def test_001_pipeline_def_returning_external_source_outputs():
    @dali.pipeline_def(batch_size=N, num_threads=3, device_id=0)
    def my_pipe(my_source):
        return dali.fn.external_source(my_source, num_outputs=2)

    pipe = my_pipe(my_source)
    a, b = pipe.run()
    assert b.as_torch().sum() == 3 * N


def test_001_decorator_arguments_overridden_and_current():
    def my_generator():
        return [np.ones(1)] * 128

    @pipeline_def(batch_size=32, num_threads=3)
    def my_pipe():
        pipe = Pipeline.current()
        assert pipe.batch_size == 128 and pipe.num_threads == 3
        data = fn.external_source(source=my_generator)
        return data

    pipe = my_pipe(batch_size=128, device_id=None)  # batch_size=128 overrides batch_size=32
    assert len(pipe.run()[0]) == 128


def test_001_run_with_named_inputs():
    @pipeline_def
    def my_pipe():
        inp = fn.external_source(name="my_inp")
        return inp

    p = my_pipe(prefetch_queue_depth=1, batch_size=2, num_threads=1, device_id=None)
    (out,) = p.run(my_inp=np.random.random((2, 3, 2)))
    assert out.as_torch().shape == (2, 3, 2)


def test_001_two_readers_cpu(image_dir):
    @pipeline_def
    def my_pipeline():
        img_files, labels = fn.readers.file(file_root=image_dir, seed=1)
        mask_files, _ = fn.readers.file(file_root=image_dir, seed=1)
        images = fn.decoders.image(img_files, device="cpu")
        masks = fn.decoders.image(mask_files, device="cpu")
        return images, masks, labels

    pipe = my_pipeline(batch_size=4, num_threads=2, device_id=None)
    images, masks, labels = pipe.run()
    for i in range(4):
        np.testing.assert_array_equal(images.at(i), masks.at(i))


@requires_cuda
def test_001_two_readers_mixed(image_dir):
    @pipeline_def
    def my_pipeline():
        img_files, labels = fn.readers.file(file_root=image_dir, seed=1)
        mask_files, _ = fn.readers.file(file_root=image_dir, seed=1)
        images = fn.decoders.image(img_files, device="mixed")
        masks = fn.decoders.image(mask_files, device="mixed")
        return images, masks, labels

    pipe = my_pipeline(batch_size=4, num_threads=2, device_id=0)
    images, masks, labels = pipe.run()
    assert torch.equal(images.at(0), masks.at(0))


class SimplePipeline(Pipeline):
    def __init__(self, batch_size, num_threads, device_id, image_dir, shuffle=False):
        super(SimplePipeline, self).__init__(batch_size, num_threads, device_id, seed=12)
        self.input = ops.FileReader(file_root=image_dir, random_shuffle=shuffle, initial_fill=21)
        self.decode = ops.ImageDecoder(device="cpu", output_type=types.RGB)

    def define_graph(self):
        jpegs, labels = self.input()
        images = self.decode(jpegs)
        return (images, labels)


@pytest.mark.parametrize("shuffle", [False, True])
def test_003_simple_and_shuffled_pipeline(image_dir, shuffle):
    batch_size = 8
    pipe = SimplePipeline(batch_size, 1, None, image_dir, shuffle)
    pipe.build()
    images, labels = pipe.run()
    assert not images.is_dense_tensor() and labels.is_dense_tensor()
    labels_tensor = labels.as_tensor()
    assert labels_tensor.shape() == [8, 1]
    assert np.array(labels_tensor).shape == (8, 1)
    for j in range(batch_size):
        assert images.at(j).ndim == 3 and images.at(j).shape[2] == 3
    if not shuffle:
        assert np.array(labels_tensor).ravel().tolist() == [0] * 8


class RandomRotatedSimplePipeline(Pipeline):
    """Seed 003's random rotation: ops.Rotate() made without an angle, given one per sample
    at call time from ops.Uniform."""

    def __init__(self, batch_size, num_threads, device_id, image_dir, gpu=False):
        super(RandomRotatedSimplePipeline, self).__init__(batch_size, num_threads, device_id, seed=12)
        self.input = ops.FileReader(file_root=image_dir, random_shuffle=True, initial_fill=21)
        self.decode = ops.ImageDecoder(device='cpu', output_type=types.RGB)
        self.rotate = ops.Rotate(device="gpu") if gpu else ops.Rotate()
        self.rng = ops.Uniform(range=(-10.0, 10.0))
        self.gpu = gpu

    def define_graph(self):
        jpegs, labels = self.input()
        images = self.decode(jpegs)
        angle = self.rng()
        rotated_images = self.rotate(images.gpu() if self.gpu else images, angle=angle)
        return (rotated_images, labels)


@pytest.mark.parametrize("gpu", [False, pytest.param(True, marks=requires_cuda)], ids=["cpu", "gpu"])
def test_003_random_rotation_with_the_angle_given_at_call_time(image_dir, gpu):
    pipe = RandomRotatedSimplePipeline(4, 1, 0 if gpu else None, image_dir, gpu)
    pipe.build()
    images, labels = pipe.run()
    assert type(images).__name__ == ("TensorListGPU" if gpu else "TensorListCPU") and len(labels) == 4
    # Rotated by a few degrees with keep_size off: each image grows a little.
    assert all(images.at(j).shape[2] == 3 for j in range(4))


def test_003_a_required_argument_missing_at_call_time_is_still_an_error(image_dir):
    rotate = ops.Rotate()  # the angle may still come when it is called

    class NoAngle(Pipeline):
        def define_graph(self):
            return rotate(fn.external_source(lambda: [np.zeros((4, 4, 3), np.uint8)] * 2, layout="HWC"))

    with pytest.raises(TypeError, match="rotate: argument 'angle' is required"):
        NoAngle(batch_size=2, num_threads=1, device_id=None).build()


@requires_cuda
def test_003_hybrid_pipeline(image_dir):
    class HybridPipeline(Pipeline):
        def __init__(self, batch_size, num_threads, device_id):
            super(HybridPipeline, self).__init__(batch_size, num_threads, device_id, seed=12)
            self.input = ops.FileReader(file_root=image_dir, random_shuffle=True, initial_fill=21)
            self.decode = ops.ImageDecoder(device="mixed", output_type=types.RGB)

        def define_graph(self):
            jpegs, labels = self.input()
            images = self.decode(jpegs)
            return (images, labels)

    pipe = HybridPipeline(8, 1, 0)
    pipe.build()
    images, labels = pipe.run()
    assert type(images).__name__ == "TensorListGPU" and type(labels).__name__ == "TensorListCPU"
    cpu = images.as_cpu()
    assert isinstance(cpu.at(0), np.ndarray) and cpu.at(0).shape[2] == 3


@requires_cuda
def test_002_python_function_on_gpu_with_cupy(image_dir):
    cupy = pytest.importorskip("cupy")

    def edit_images(image1, image2):
        assert image1.shape == image2.shape
        h, w, c = image1.shape
        y, x = cupy.ogrid[0:h, 0:w]
        mask = (x - w / 2) ** 2 + (y - h / 2) ** 2 > h * w / 9
        result1 = cupy.copy(image1)
        result1[mask] = image2[mask]
        result2 = cupy.copy(image2)
        result2[mask] = image1[mask]
        return result1, result2

    mix_channels_kernel = cupy.ElementwiseKernel("uint8 x, uint8 y", "uint8 z", "z = (i % 3) ? x : y",
                                                 "mix_channels")

    def mix_channels_wrapper(tensor1, tensor2):
        array1 = cupy.fromDlpack(tensor1)
        array2 = cupy.fromDlpack(tensor2)
        result = mix_channels_kernel(array1, array2)
        cupy.cuda.get_current_stream().synchronize()
        return result.toDlpack()

    batch_size = 4
    results = []
    for kind in ("python_function", "dl_tensor"):
        pipe = Pipeline(batch_size=batch_size, num_threads=4, device_id=0, exec_async=False,
                        exec_pipelined=False, seed=99)
        with pipe:
            input1, _ = fn.readers.file(file_root=image_dir, random_shuffle=True)
            input2, _ = fn.readers.file(file_root=image_dir, random_shuffle=True)
            im1, im2 = fn.decoders.image([input1, input2], device="mixed", output_type=types.RGB)
            res1, res2 = fn.resize([im1, im2], device="gpu", resize_x=300, resize_y=300)
            if kind == "python_function":
                out1, out2 = fn.python_function(res1, res2, device="gpu", function=edit_images, num_outputs=2)
                out3 = fn.python_function(res1, res2, device="gpu", function=mix_channels_kernel)
                pipe.set_outputs(out1, out2, out3)
            else:
                out = fn.dl_tensor_python_function(res1, res2, device="gpu", function=mix_channels_wrapper,
                                                   synchronize_stream=True, batch_processing=False)
                pipe.set_outputs(out)
        pipe.build()
        outs = pipe.run()
        results.append(outs[-1].as_cpu().at(0))
        assert outs[0].as_cpu().at(0).shape == (300, 300, 3)
    np.testing.assert_array_equal(results[0], results[1])  # "the same result as python_function"
