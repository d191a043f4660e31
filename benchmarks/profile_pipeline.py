"""Profiles the main benchmark's train (or val) pipeline, or the framework-cost chain of
chain.py, synchronously and on one thread so that every Python call is seen: the time per
batch, the functions with the most cumulative time per batch, and the Python functions
called at least once per sample (a per-sample loop on the hot path). For tuning and for
notes:

    python benchmarks/profile_pipeline.py [--device gpu|cpu] [--stage train|val|chain]"""
import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time

import numpy as np
import torch

import torchdali
from torchdali.bench.stages import define_pipeline
from torchdali.sample_data import write_photo_dataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=("cpu", "gpu"), default="gpu" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--stage", choices=("train", "val", "chain"), default="train")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    gpu = args.device == "gpu"
    settings = dict(batch_size=args.batch_size, num_threads=1, device_id=0 if gpu else None, exec_async=False,
                    exec_pipelined=False, seed=0)
    if args.stage == "chain":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from chain import define
        rng = np.random.default_rng(0)
        images = [rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(args.batch_size)]
        pipe = define(torchdali, gpu, images)(**settings)
    else:
        data = write_photo_dataset(os.path.join(tempfile.gettempdir(), "torchdali-photos-512"), num_images=512)
        pipe = define_pipeline(torchdali, args.stage)(data, gpu, **settings)
    pipe.run()
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    for _ in range(args.iterations):
        pipe.run()
    if gpu:
        torch.cuda.synchronize()
    profiler.disable()
    per_batch = (time.perf_counter() - start) / args.iterations
    stats = pstats.Stats(profiler)
    n = args.iterations
    print(f"{args.stage} stage, {args.device}, batch {args.batch_size}, 1 thread: {per_batch * 1e3:.1f} ms a batch "
          "(profiled)\n")
    print("cumulative ms/batch  calls/batch  function")
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][3])
    for (file, line, name), (_, calls, _, cum, _) in rows[:args.top]:
        print(f"{cum / n * 1e3:19.2f}  {calls / n:11.0f}  {_where(file, line, name)}")
    per_sample = [(k, v) for k, v in stats.stats.items()
                  if v[1] / n >= args.batch_size and not k[0].startswith(("~", "<"))]
    print(f"\nPython functions called at least once per sample ({args.batch_size}+ calls a batch): "
          f"{len(per_sample)}")
    for (file, line, name), (_, calls, tot, _, _) in sorted(per_sample, key=lambda kv: -kv[1][2]):
        print(f"  {calls / n:7.0f} calls/batch  {tot / n * 1e3:6.2f} ms/batch own time  {_where(file, line, name)}")


def _where(file, line, name):
    if file == "~":
        return name
    parts = file.split(os.sep)
    short = os.sep.join(parts[parts.index("torchdali"):]) if "torchdali" in parts else os.sep.join(parts[-2:])
    return f"{short}:{line}({name})"


if __name__ == "__main__":
    main()
