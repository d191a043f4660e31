"""The framework's own cost per batch: a chain whose kernels cost next to nothing, on
torchdali and on NVIDIA DALI in the same run.

    external_source (256 uint8 32x32 HWC images) -> random_resized_crop 16 -> coin_flip ->
    crop_mirror_normalize (mirror, float, CHW)

Both libraries run the same @pipeline_def body (the library is passed in) with the same
batch size, threads, prefetch depth and executor settings. Each row is the median over
--repeats runs of --iterations batches, after a warm-up; the ratio is torchdali's time over
DALI's on the same path (below 1: torchdali is faster).

    python benchmarks/chain.py                  # CPU path; also the GPU path with a GPU
    python benchmarks/chain.py --paths cpu --threads 2 --sync
"""
import argparse
import statistics
import time

import numpy as np
import torch

import torchdali


def define(lib, gpu, images):
    """The chain as a pipeline definition of `lib` (torchdali or nvidia.dali)."""
    fn, types = lib.fn, lib.types

    @lib.pipeline_def
    def chain():
        x = fn.external_source(source=lambda: images, layout="HWC")
        if gpu:
            x = x.gpu()
        x = fn.random_resized_crop(x, size=16)
        return fn.crop_mirror_normalize(x, mirror=fn.random.coin_flip(), dtype=types.FLOAT, output_layout="CHW",
                                        mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                        std=[0.229 * 255, 0.224 * 255, 0.225 * 255])

    return chain


def time_per_batch(lib, gpu, images, args):
    """Median seconds per batch over the repeats."""
    pipe = define(lib, gpu, images)(batch_size=len(images), num_threads=args.threads,
                                    device_id=0 if gpu else None, seed=1, prefetch_queue_depth=2,
                                    exec_async=not args.sync, exec_pipelined=not args.sync)
    pipe.build()
    for _ in range(args.warmup):
        pipe.run()
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.iterations):
            out = pipe.run()
        if gpu:
            out[0].as_tensor()  # the last batch is complete
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / args.iterations)
    del pipe
    return statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--paths", default="cpu,gpu" if torch.cuda.is_available() else "cpu",
                        help="cpu, gpu or both (comma-separated)")
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--sync", action="store_true", help="exec_async=False, exec_pipelined=False")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(args.batch_size)]
    try:
        import nvidia.dali as dali
    except ImportError as e:
        dali = None
        print(f"NVIDIA DALI is not installed ({e}); torchdali only\n")
    mode = "sync" if args.sync else "async, pipelined"
    print(f"chain: batch {args.batch_size}, {args.threads} threads, prefetch 2, {mode}; "
          f"median of {args.repeats} x {args.iterations} batches\n")
    print("| path | torchdali ms/batch | DALI ms/batch | torchdali / DALI |")
    print("|---|---:|---:|---:|")
    for path in args.paths.split(","):
        gpu = path == "gpu"
        ours = time_per_batch(torchdali, gpu, images, args)
        theirs = time_per_batch(dali, gpu, images, args) if dali is not None else None
        ratio = f"{ours / theirs:.2f}" if theirs else "-"
        print(f"| {path} | {ours * 1e3:.2f} | {theirs * 1e3 if theirs else float('nan'):.2f} | {ratio} |",
              flush=True)


if __name__ == "__main__":
    main()
