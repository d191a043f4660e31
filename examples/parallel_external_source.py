"""Parallel external_source with the 'fork' start method, as DALI's tutorial "Parallel
External Source - Fork" writes it, on the built-in sample data (or an image folder, --data).

A per-sample callable reads one JPEG file and its label, picked by `sample_info.idx_in_epoch`,
and ends the epoch by raising StopIteration. With `parallel=True` it runs in each pipeline's
`py_num_workers` worker processes. Forked workers must start before anything in this
process touches CUDA, so the steps are, in this order:

1. define every pipeline (without building it): here a training pipeline with a random
   contrast and a validation pipeline with a fixed one;
2. call `start_py_workers()` on each;
3. only then build and run them (which, on a GPU, creates the CUDA context).

Runs on the GPU (mixed decoding) when one is present, else on the CPU.

    python examples/parallel_external_source.py [--epochs 2] [--batch-size 4] [--workers 4]
"""
import argparse
import os
import tempfile

import numpy as np
import torch

from torchdali import fn, pipeline_def, types
from torchdali.sample_data import write_sample_dataset


class ExternalInputCallable:
    """One sample per call: the encoded bytes and the label of file `idx_in_epoch`, plus the
    pid of the process that read it (to show the work spread over the workers)."""

    def __init__(self, files, labels, batch_size):
        self.files, self.labels = files, labels
        self.full_iterations = len(files) // batch_size

    def __call__(self, sample_info):
        sample_idx = sample_info.idx_in_epoch
        if sample_info.iteration >= self.full_iterations:
            raise StopIteration()  # the end of the epoch: its last, partial batch is dropped
        with open(self.files[sample_idx], "rb") as f:
            encoded_img = np.frombuffer(f.read(), dtype=np.uint8)
        return encoded_img, np.int32([self.labels[sample_idx]]), np.int32([os.getpid()])


def list_images(root):
    """The JPEGs of an image folder (one sub-folder per class, sorted names give labels 0..N-1)."""
    classes = sorted(d.name for d in os.scandir(root) if d.is_dir())
    pairs = [(os.path.join(root, c, name), label) for label, c in enumerate(classes)
             for name in sorted(os.listdir(os.path.join(root, c))) if name.lower().endswith((".jpg", ".jpeg"))]
    return [p for p, _ in pairs], [label for _, label in pairs]


def parallel_source(source):
    return fn.external_source(source=source, num_outputs=3, batch=False, parallel=True,
                              dtype=[types.UINT8, types.INT32, types.INT32])


@pipeline_def
def training_pipeline(source, gpu):
    jpegs, labels, pids = parallel_source(source)
    decode = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu")
    contrast = fn.random.uniform(range=(1, 3.0))
    enhance = fn.brightness_contrast(decode, contrast=contrast)
    return enhance, labels, pids


@pipeline_def
def validation_pipeline(source, gpu):
    jpegs, labels, pids = parallel_source(source)
    decode = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu")
    enhance = fn.brightness_contrast(decode, contrast=1.5)
    return enhance, labels, pids


def run_epoch(pipe):
    """Run `pipe` until its source raises StopIteration, then reset it for the next epoch;
    return the labels of each batch, the pids of the processes that read the files and the
    images' shapes."""
    labels, pids, shapes = [], set(), []
    while True:
        try:
            images, batch_labels, batch_pids = pipe.run()
        except StopIteration:
            pipe.reset()
            return labels, pids, shapes
        shapes.extend(tuple(s) for s in images.shape())
        labels.append([int(x) for x in batch_labels.as_tensor().as_torch().flatten()])
        pids.update(int(x) for x in batch_pids.as_tensor().as_torch().flatten())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--workers", type=int, default=4, help="py_num_workers of each pipeline")
    p.add_argument("--num-images", type=int, default=22, help="of the sample data")
    p.add_argument("--data", metavar="DIR", help="an image folder (one sub-folder per class) instead")
    args = p.parse_args(argv)
    data = args.data or write_sample_dataset(os.path.join(tempfile.gettempdir(), "torchdali-parallel-source"),
                                             num_images=args.num_images)
    files, labels = list_images(data)
    # is_available() asks the driver but creates no CUDA context: forking is still safe after it.
    gpu = torch.cuda.is_available()
    kwargs = dict(batch_size=args.batch_size, num_threads=2, device_id=0 if gpu else None,
                  py_num_workers=args.workers, py_start_method="fork", seed=6)  # 'fork' is the default

    # 1. Define the pipelines, 2. start their workers, 3. build and run them.
    train_pipe = training_pipeline(ExternalInputCallable(files, labels, args.batch_size), gpu, **kwargs)
    val_pipe = validation_pipeline(ExternalInputCallable(files, labels, args.batch_size), gpu, **kwargs)
    pipelines = [train_pipe, val_pipe]
    for pipe in pipelines:
        pipe.start_py_workers()
    for pipe in pipelines:
        pipe.build()

    print(f"{len(files)} images, batch {args.batch_size}: {len(files) // args.batch_size} batches an epoch, "
          f"{args.workers} workers a pipeline, {'GPU' if gpu else 'CPU'} decoding")
    for epoch in range(args.epochs):
        for name, pipe in (("train", train_pipe), ("val", val_pipe)):
            batch_labels, pids, shapes = run_epoch(pipe)
            in_order = sum(batch_labels, []) == labels[:len(sum(batch_labels, []))]
            print(f"{name} epoch {epoch}: {len(batch_labels)} batches, {len(shapes)} images "
                  f"(first {shapes[0]}), labels in file order: {in_order}, "
                  f"read by {len(pids - {os.getpid()})} worker processes")


if __name__ == "__main__":
    main()
