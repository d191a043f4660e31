"""Profiles one synchronous iteration loop of the main benchmark's train pipeline (where the
Python time goes), for tuning: python benchmarks/profile_pipeline.py [--device gpu|cpu]"""
import argparse
import cProfile
import os
import pstats
import tempfile

import torch

import torchdali
from torchdali.bench.stages import define_pipeline
from torchdali.sample_data import write_photo_dataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=("cpu", "gpu"), default="gpu" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--iterations", type=int, default=10)
    args = parser.parse_args()
    gpu = args.device == "gpu"
    data = write_photo_dataset(os.path.join(tempfile.gettempdir(), "torchdali-photos-512"), num_images=512)
    pipe = define_pipeline(torchdali, "train")(data, gpu, batch_size=64, num_threads=os.cpu_count(),
                                               device_id=0 if gpu else None, exec_async=False,
                                               exec_pipelined=False, seed=0)
    pipe.run()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(args.iterations):
        pipe.run()
    if gpu:
        torch.cuda.synchronize()
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
