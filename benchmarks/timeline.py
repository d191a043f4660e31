"""Where a pipelined (async) run of the main benchmark's stage spends its time, thread by
thread: every stage of every iteration is timed (the CPU stage, the decode stage, the GPU
stage, and the caller's wait for the next batch), and so are the hardware decoder's start
and finish ops. Prints, per thread, the share of the wall time spent in each stage and
waiting, and, per batch, the median of each span and of the gaps between them: the chain
of waits that bounds the rate shows up as the stage whose start waits for another's end.

    python benchmarks/timeline.py [--device gpu|cpu] [--stage train|val] [--batch-size 64]
                                  [--threads 16] [--batches 300]"""
import argparse
import collections
import os
import statistics
import tempfile
import threading
import time

import torch

import torchdali
from torchdali import executor
from torchdali.bench.stages import define_pipeline
from torchdali.kernels import nvjpeg
from torchdali.sample_data import write_photo_dataset

SPANS = collections.defaultdict(list)  # name -> [(thread, start, end, iteration or None)]
_LOCK = threading.Lock()


def timed(name, fn, iteration=lambda args, result: None):
    """`fn`, recording each call's span under `name` (with the iteration it served)."""
    def call(*a, **kw):
        start = time.perf_counter()
        result = None
        try:
            result = fn(*a, **kw)
            return result
        finally:
            end = time.perf_counter()
            with _LOCK:
                SPANS[name].append((threading.current_thread().name, start, end, iteration(a, result)))
    return call


def instrument():
    """Times the executor's stages (by iteration), the caller's wait and the decoder's ops."""
    ex = executor.Executor
    ex.run_cpu_stage = timed("cpu stage", ex.run_cpu_stage, lambda a, it: it.index if it is not None else None)
    ex.run_decode_stage = timed("decode stage", ex.run_decode_stage, lambda a, it: a[1].index)
    ex.run_gpu_stage = timed("gpu stage", ex.run_gpu_stage, lambda a, it: a[1].index)
    executor.AsyncRunner.next = timed("caller waits", executor.AsyncRunner.next)
    nvjpeg.decode_jpegs_start = timed("decode_jpegs_start", nvjpeg.decode_jpegs_start)
    nvjpeg.decode_jpegs_finish = timed("decode_jpegs_finish", nvjpeg.decode_jpegs_finish)


def report(wall, batches, batch_size):
    print(f"{batches} batches in {wall:.2f} s: {batches * batch_size / wall:,.0f} images/s, "
          f"{wall / batches * 1e3:.2f} ms a batch\n")
    print(f"{'span':<22}{'thread':<18}{'calls':>7}{'median ms':>11}{'share of wall':>15}")
    for name, spans in SPANS.items():
        by_thread = collections.defaultdict(list)
        for thread, start, end, _ in spans:
            by_thread[thread].append(end - start)
        for thread, d in by_thread.items():
            print(f"{name:<22}{thread:<18}{len(d):>7}{statistics.median(d) * 1e3:>11.2f}{sum(d) / wall:>14.0%}")
    print("\nmedian gaps of one iteration, ms (a stage's end to the next stage's start):")
    for a, b in (("cpu stage", "decode stage"), ("decode stage", "gpu stage")):
        ends = {k: e for _, _, e, k in SPANS[a] if k is not None}
        gaps = [s - ends[k] for _, s, _, k in SPANS[b] if k in ends]
        if gaps:
            print(f"  {a} -> {b}: {statistics.median(gaps) * 1e3:.2f}")
    for name in ("decode stage", "gpu stage"):
        starts = sorted(s for _, s, _, _ in SPANS[name])
        if len(starts) > 1:
            print(f"  {name}, start to next start: {statistics.median(b - a for a, b in zip(starts, starts[1:])) * 1e3:.2f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=("cpu", "gpu"), default="gpu" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--stage", choices=("train", "val"), default="train")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--num-images", type=int, default=4096)
    args = parser.parse_args()
    gpu = args.device == "gpu"
    data = write_photo_dataset(os.path.join(tempfile.gettempdir(), f"torchdali-photos-{args.num_images}"),
                               num_images=args.num_images)
    instrument()
    pipe = define_pipeline(torchdali, args.stage)(data, gpu, batch_size=args.batch_size, num_threads=args.threads,
                                                   device_id=0 if gpu else None, seed=0)
    pipe.build()
    for _ in range(30):  # warm-up
        pipe.run()
    SPANS.clear()
    start = time.perf_counter()
    for _ in range(args.batches):
        pipe.run()
    if gpu:
        torch.cuda.synchronize()
    report(time.perf_counter() - start, args.batches, args.batch_size)


if __name__ == "__main__":
    main()
