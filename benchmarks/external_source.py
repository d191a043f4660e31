"""Parallel external_source reading JPEG bytes from files vs `fn.readers.file` on the same
files vs a single-process source: images/s and ratios (bytes only; --decode adds a CPU decode).

    python benchmarks/external_source.py --images 2000 --batch 64 --workers 8
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torchdali import fn, pipeline_def  # noqa: E402
from torchdali.sample_data import write_sample_dataset  # noqa: E402


class ReadFile:
    """A per-sample source: the bytes of file idx_in_epoch, StopIteration after the last full batch."""

    def __init__(self, files, batch):
        self.files = files
        self.iterations = len(files) // batch

    def __call__(self, info):
        if info.iteration >= self.iterations:
            raise StopIteration
        with open(self.files[info.idx_in_epoch], "rb") as f:
            return np.frombuffer(f.read(), np.uint8)


def make(kind, files, root, args):
    @pipeline_def(batch_size=args.batch, num_threads=args.threads, device_id=None, py_num_workers=args.workers,
                  prefetch_queue_depth=2)
    def pipe():
        if kind == "readers.file":
            data, _ = fn.readers.file(file_root=root, name="r")
        else:
            data = fn.external_source(ReadFile(files, args.batch), batch=False, parallel=kind == "parallel",
                                      prefetch_queue_depth=2)
        return fn.decoders.image(data, device="cpu") if args.decode else data

    return pipe()


def measure(pipe, iterations):
    pipe.build()
    pipe.run()  # warm-up (workers started, files cached)
    done, start = 0, time.perf_counter()
    for _ in range(iterations):
        try:
            (out,) = pipe.run()
        except StopIteration:
            pipe.reset()
            continue
        done += len(out)
    return done / (time.perf_counter() - start)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--iters", type=int, default=8)
    p.add_argument("--decode", action="store_true")
    p.add_argument("--data", default=None, help="a folder of class sub-folders of JPEGs (default: generated)")
    args = p.parse_args(argv)
    root = args.data or write_sample_dataset(os.path.join(tempfile.gettempdir(), "torchdali-es-bench"),
                                             num_images=args.images, num_classes=4, min_size=256, max_size=512)
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.lower().endswith(".jpg"))
    rates = {}
    for kind in ("parallel", "readers.file", "single-process"):
        pipe = make(kind, files, root, args)
        rates[kind] = measure(pipe, args.iters)
        del pipe
        print(f"{kind:>15}: {rates[kind]:10.1f} images/s")
    print(f"parallel / readers.file:   {rates['parallel'] / rates['readers.file']:.2f}x")
    print(f"parallel / single-process: {rates['parallel'] / rates['single-process']:.2f}x")
    return rates


if __name__ == "__main__":
    main()
