"""Parallel external_source vs fn.readers.file vs a single-process source: images/s.

Every row produces the same thing, batches of the raw JPEG bytes of the same files (one
uint8 tensor per sample), with the same batch size, pipeline prefetch depth and
iteration count; only the source of the bytes differs:

  parallel external_source  the per-sample callable below, run in --workers processes
                            (parallel=True); samples reach the pipeline through shared memory
  fn.readers.file           torchdali's file reader over the same file list (its reads run in
                            C++ on torch's intra-op threads, torch.get_num_threads())
  single-process source     the same callable, run in the pipeline's process (parallel=False)

The files are read once before any row (page cache warm for all), and each row runs
--warmup iterations before it is timed; epoch ends (StopIteration, reset()) are part of
the timed run, as in training. --decode adds a CPU fn.decoders.image after every source.
A second scenario, --decode-in-source, has every row give decoded RGB images: the two
external_source rows decode in the source with PIL (Python work per sample, as a
DataLoader-style dataset does), fn.readers.file is followed by a CPU fn.decoders.image.

    python benchmarks/external_source.py --images 2000 --batch 64 --workers 8 --threads 8
"""
import argparse
import io
import os
import sys
import tempfile
import time

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torchdali import fn, pipeline_def  # noqa: E402
from torchdali.sample_data import write_sample_dataset  # noqa: E402

ROWS = ("parallel external_source", "fn.readers.file", "single-process source")


class ReadFile:
    """A per-sample source: the bytes of file idx_in_epoch, StopIteration after the last full batch."""

    def __init__(self, files, batch, decode=False):
        self.files = files
        self.iterations = len(files) // batch
        self.decode = decode

    def __call__(self, info):
        if info.iteration >= self.iterations:
            raise StopIteration
        with open(self.files[info.idx_in_epoch], "rb") as f:
            data = f.read()
        if self.decode:
            return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        return np.frombuffer(data, np.uint8)


def make(row, files, args):
    @pipeline_def(batch_size=args.batch, num_threads=args.threads, device_id=None, py_num_workers=args.workers,
                  prefetch_queue_depth=2)
    def pipe():
        source = ReadFile(files, args.batch, decode=args.decode_in_source)
        if row == "fn.readers.file":
            data, _ = fn.readers.file(files=files, name="r")
            if args.decode_in_source:
                return fn.decoders.image(data, device="cpu")
        elif row == "parallel external_source":
            data = fn.external_source(source, batch=False, parallel=True, prefetch_queue_depth=2)
        else:
            data = fn.external_source(source, batch=False)
        return fn.decoders.image(data, device="cpu") if args.decode else data

    return pipe()


def measure(pipe, warmup, iterations):
    """Images/s over `iterations` runs after `warmup` runs (resetting at each epoch's end),
    and the CPU time of the pipeline's process per image (all its threads; not the workers)."""
    def run(n):
        done = 0
        for _ in range(n):
            try:
                (out,) = pipe.run()
            except StopIteration:
                pipe.reset()
                continue
            done += len(out)
        return done

    pipe.build()
    run(warmup)
    start, cpu = time.perf_counter(), time.process_time()
    done = run(iterations)
    return done / (time.perf_counter() - start), (time.process_time() - cpu) / done * 1e6


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--workers", type=int, default=8, help="py_num_workers of the parallel source")
    p.add_argument("--threads", type=int, default=4, help="num_threads of every pipeline")
    p.add_argument("--iters", type=int, default=8)
    p.add_argument("--warmup", type=int, default=None, help="untimed runs first (default: one epoch)")
    p.add_argument("--decode", action="store_true", help="a CPU fn.decoders.image after every source")
    p.add_argument("--decode-in-source", action="store_true",
                   help="sources decode with PIL (readers.file: a CPU fn.decoders.image)")
    p.add_argument("--data", default=None, help="a folder of class sub-folders of JPEGs (default: generated)")
    args = p.parse_args(argv)
    if args.decode and args.decode_in_source:
        p.error("--decode and --decode-in-source are two scenarios; choose one")
    root = args.data or write_sample_dataset(os.path.join(tempfile.gettempdir(), "torchdali-es-bench"),
                                             num_images=args.images, num_classes=4, min_size=256, max_size=512)
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.lower().endswith(".jpg"))
    size = 0
    for name in files:  # page cache warm for every row
        with open(name, "rb") as f:
            size += len(f.read())
    warmup = args.warmup if args.warmup is not None else max(1, len(files) // args.batch)
    print(f"{len(files)} JPEG files, {size / len(files) / 1024:.0f} KiB mean; batch {args.batch}; "
          f"{os.cpu_count()} CPUs; workers {args.workers}; threads {args.threads} (intra-op "
          f"{torch.get_num_threads()}); "
          f"{args.iters} timed runs after {warmup}; output: "
          f"{'RGB images decoded in the sources' if args.decode_in_source else 'the bytes'}"
          f"{' decoded by fn.decoders.image' if args.decode else ''}")
    rates = {}
    for row in ROWS:
        pipe = make(row, files, args)
        rates[row], cpu_us = measure(pipe, warmup, args.iters)
        del pipe
        print(f"{row:>26}: {rates[row]:10.1f} images/s  ({cpu_us:5.1f} us CPU per image in the pipeline's process)")
    par = rates["parallel external_source"]
    goals = ("", "") if args.decode or args.decode_in_source else (" (goal: at least 0.9x)", " (goal: more than 4x)")
    print(f"parallel / readers.file:   {par / rates['fn.readers.file']:.2f}x{goals[0]}")
    print(f"parallel / single-process: {par / rates['single-process source']:.2f}x{goals[1]}")
    return rates


if __name__ == "__main__":
    main()
