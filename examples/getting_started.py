"""Getting started, after DALI's Pipeline reference and its getting-started walk-through: the
three ways to define a pipeline, what a run returns (TensorList: is_dense_tensor, as_tensor,
at, as_cpu), shuffling with random_shuffle and initial_fill, argument inputs (a random
angle per sample), .gpu() and device stages, and a conditional (`if` on a DataNode).

The legacy class API (ops.FileReader, ops.ImageDecoder, ... in define_graph) is in
examples/legacy_ops_api.py; running the definition operator by operator, to print and step
through it, is debug mode (docs/debug_mode.md). Runs the GPU parts when a GPU is present, else the CPU only.

    python examples/getting_started.py [--data DIR] [--batch-size 8]
"""
import argparse
import os
import tempfile

import numpy as np
import torch

from torchdali import fn, pipeline_def, types
from torchdali.pipeline import Pipeline
from torchdali.sample_data import write_sample_dataset


# 1. A function decorated with @pipeline_def: calling it returns a Pipeline.
@pipeline_def
def simple_pipeline(image_dir):
    jpegs, labels = fn.readers.file(file_root=image_dir)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    return images, labels


# 2. A Pipeline object, its graph built inside `with pipe:` and closed by set_outputs.
def simple_pipeline_with_set_outputs(image_dir, batch_size):
    pipe = Pipeline(batch_size=batch_size, num_threads=1, device_id=None, seed=12)
    with pipe:
        jpegs, labels = fn.readers.file(file_root=image_dir)
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
        pipe.set_outputs(images, labels)
    return pipe


# 3. A subclass of Pipeline overriding define_graph (the oldest way).
class SimplePipeline(Pipeline):
    def __init__(self, image_dir, batch_size, num_threads, device_id):
        super().__init__(batch_size, num_threads, device_id, seed=12)
        self.image_dir = image_dir

    def define_graph(self):
        jpegs, labels = fn.readers.file(file_root=self.image_dir)
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
        return images, labels


@pipeline_def
def shuffled_pipeline(image_dir):
    # Samples pass through a buffer of `initial_fill` samples, drawn from at random.
    jpegs, labels = fn.readers.file(file_root=image_dir, random_shuffle=True, initial_fill=21)
    return fn.decoders.image(jpegs, device="cpu", output_type=types.RGB), labels


@pipeline_def
def random_rotated_pipeline(image_dir, gpu):
    jpegs, labels = fn.readers.file(file_root=image_dir, random_shuffle=True, initial_fill=21)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    # An argument input: a CPU operator's output, one angle per sample, new every iteration.
    angle = fn.random.uniform(range=(-10.0, 10.0))
    if gpu:
        images = images.gpu()  # from here on, the GPU stage: rotate runs on the GPU
    return fn.rotate(images, angle=angle), labels, angle


@pipeline_def(enable_conditionals=True)
def conditional_pipeline(image_dir):
    jpegs, _ = fn.readers.file(file_root=image_dir)
    images = fn.decoders.image(jpegs, device="cpu")
    do_rotate = fn.random.coin_flip(probability=0.25, dtype=types.BOOL)
    # Per sample: a quarter of the images are rotated by 10-30 degrees, the others pass.
    if do_rotate:
        result = fn.rotate(images, angle=fn.random.uniform(range=(10, 30)), fill_value=0)
    else:
        result = images
    return result, do_rotate


def show_tensor_lists(images, labels, batch_size):
    print("  outputs:", type(images).__name__, type(labels).__name__)
    print("  images is_dense_tensor:", images.is_dense_tensor(), "| labels is_dense_tensor:", labels.is_dense_tensor())
    labels_tensor = labels.as_tensor()  # dense: one tensor [batch, 1]
    print("  labels as_tensor:", labels_tensor.shape(), np.array(labels_tensor).ravel().tolist())
    print("  images at(i) shapes:", [images.at(j).shape for j in range(batch_size)])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", metavar="DIR", help="an image folder (one sub-folder per class); "
                                                 "default: the built-in sample data")
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args(argv)
    image_dir = args.data or write_sample_dataset(os.path.join(tempfile.gettempdir(), "torchdali-sample-data"),
                                                  num_images=64)
    batch_size, gpu = args.batch_size, torch.cuda.is_available()

    print("Three ways to define a pipeline:")
    pipes = {"@pipeline_def": simple_pipeline(image_dir, batch_size=batch_size, num_threads=1, device_id=None,
                                              seed=12),
             "set_outputs": simple_pipeline_with_set_outputs(image_dir, batch_size),
             "define_graph": SimplePipeline(image_dir, batch_size, 1, None)}
    results = {}
    for name, pipe in pipes.items():
        pipe.build()
        results[name] = pipe.run()
    images, labels = results["@pipeline_def"]
    same = all(all(np.array_equal(a.at(i), b.at(i)) for a, b in zip(out, results["@pipeline_def"])
                   for i in range(batch_size)) for out in results.values())
    print("  the three give the same batch:", same)
    show_tensor_lists(images, labels, batch_size)

    print("Shuffled (random_shuffle=True, initial_fill=21):")
    images, labels = shuffled_pipeline(image_dir, batch_size=batch_size, num_threads=1, device_id=None,
                                       seed=12).run()
    print("  labels:", np.array(labels.as_tensor()).ravel().tolist())

    print(f"Random rotation, angle as an argument input ({'GPU' if gpu else 'CPU'}):")
    images, labels, angles = random_rotated_pipeline(image_dir, gpu, batch_size=batch_size, num_threads=1,
                                                     device_id=0 if gpu else None, seed=12).run()
    print("  outputs:", type(images).__name__, type(labels).__name__)
    images = images.as_cpu() if gpu else images  # TensorListGPU -> TensorListCPU
    print("  angles:", [round(float(a), 1) for a in np.array(angles.as_tensor()).ravel()])
    print("  rotated shapes (the canvas grows to hold the turned image):", [images.at(j).shape for j in range(2)])

    print("Conditional rotation (enable_conditionals=True):")
    images, rotated = conditional_pipeline(image_dir, batch_size=batch_size, num_threads=1, device_id=None,
                                           seed=3).run()
    print("  rotated:", [bool(r) for r in np.array(rotated.as_tensor()).ravel()])


if __name__ == "__main__":
    main()
