"""The main job: an ImageNet-style training input pipeline over the built-in sample
dataset, printing images/s. Uses the mixed (nvJPEG) path when a GPU is present.

    python -m torchdali.bench [--data DIR] [--batch-size 64] [--epochs 3] [--device auto|cpu|gpu]
"""
import argparse
import os
import sys
import tempfile
import time

import torch

from . import fn, pipeline_def, types
from .sample_data import write_sample_dataset

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


@pipeline_def
def imagenet_train_pipeline(data_dir, gpu, size=224):
    """read -> decode -> RandomResizedCrop -> random flip -> normalize -> float NCHW: the
    stage of the anchors in the design notes."""
    jpegs, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, name="Reader")
    images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
    images = fn.random_resized_crop(images, size=(size, size))
    images = fn.crop_mirror_normalize(
        images, mirror=fn.random.coin_flip(probability=0.5), mean=MEAN, std=STD,
        dtype=types.FLOAT, output_layout=types.NCHW)
    return images, labels.gpu() if gpu else labels


def progress(done, total, start, width=30, stream=sys.stderr):
    """A one-line progress bar with the running rate."""
    frac = done / total
    rate = done / max(time.perf_counter() - start, 1e-9)
    bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
    stream.write(f"\r[{bar}] {done}/{total} batches, {rate:.1f} batches/s")
    if done == total:
        stream.write("\n")
    stream.flush()


def run(data_dir, batch_size, epochs, gpu, threads, warmup=2):
    pipe = imagenet_train_pipeline(data_dir, gpu, batch_size=batch_size, num_threads=threads,
                                   device_id=0 if gpu else None, seed=0, prefetch_queue_depth=2)
    pipe.build()
    epoch_size = pipe.epoch_size("Reader")
    iters = max(1, epoch_size // batch_size) * epochs
    for _ in range(warmup):
        pipe.run()
    if gpu:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(iters):
        images, labels = pipe.run()
        progress(i + 1, iters, start)
    if gpu:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    shape = tuple(images.as_torch().shape)
    return iters * batch_size / elapsed, shape


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="image folder (class sub-folders); default: the built-in sample set")
    parser.add_argument("--num-images", type=int, default=512, help="size of the generated sample set")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    args = parser.parse_args(argv)
    gpu = torch.cuda.is_available() if args.device == "auto" else args.device == "gpu"
    data = args.data or write_sample_dataset(
        os.path.join(tempfile.gettempdir(), "torchdali-sample-data"), num_images=args.num_images)
    print(f"torchdali benchmark: {data}, batch {args.batch_size}, {args.threads} threads, "
          f"{'mixed (nvJPEG) decode + GPU augmentation' if gpu else 'CPU decode + CPU augmentation'}")
    rate, shape = run(data, args.batch_size, args.epochs, gpu, args.threads)
    print(f"output batch {shape} float32 NCHW; {rate:.1f} images/s")
    return rate


if __name__ == "__main__":
    main()
