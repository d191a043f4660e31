"""Images/s of the benchmark's training stage (torchdali.bench.stages: decode →
RandomResizedCrop 224 → flip → normalize) fed by three readers of the same generated photos:
(a) readers.file over the image folder, (b) readers.webdataset over WebDataset shards of
those images (folder2wds, with index files) on the local disk, and (c) the same shards over
HTTP from a local server (torchdali.tools.serve in a process of its own, so that it does not
take this one's GIL; Range requests, through fsspec).
Where NVIDIA DALI imports, the same pipelines run on it too (the folder and the local shards;
its WebDataset reader does not read over HTTP). Each row: one warm-up epoch, then the best of
--epochs epochs through the library's own DALIGenericIterator.

    python benchmarks/readers.py [--device cpu|gpu] [--num-images 512] [--shard-size 64]
                                 [--batch-size 32] [--threads N] [--epochs 2]"""
import argparse
import contextlib
import importlib
import os
import subprocess
import sys
import tempfile
import time

import torch

import torchdali
from torchdali.bench.stages import STAGES, stage_images
from torchdali.sample_data import describe_dataset, write_photo_dataset
from torchdali.tools.folder2wds import write_shards


def files_pipeline(lib, data_dir, gpu, **settings):
    """The training stage fed by readers.file over the image folder, as a pipeline of `lib`
    (torchdali or nvidia.dali)."""
    @lib.pipeline_def(**settings)
    def pipeline():
        jpegs, labels = lib.fn.readers.file(file_root=data_dir, random_shuffle=True, pad_last_batch=True,
                                            name="Reader")
        return stage_images(lib, "train", jpegs, gpu), labels.gpu() if gpu else labels
    return pipeline()


def shards_pipeline(lib, paths, index_paths, gpu, **settings):
    """The training stage fed by readers.webdataset over the shards, as a pipeline of `lib`."""
    @lib.pipeline_def(**settings)
    def pipeline():
        jpegs, labels = lib.fn.readers.webdataset(paths=paths, index_paths=index_paths, ext=["jpg", "cls"],
                                                  dtypes=[lib.types.UINT8, lib.types.INT32], random_shuffle=True,
                                                  pad_last_batch=True, name="Reader")
        return stage_images(lib, "train", jpegs, gpu), labels.gpu() if gpu else labels
    return pipeline()


@contextlib.contextmanager
def server(folder):
    """torchdali.tools.serve serving `folder` from a process of its own while the block runs;
    yields its base URL."""
    process = subprocess.Popen([sys.executable, "-m", "torchdali.tools.serve", folder, "--port", "0"],
                               stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()  # "serving FOLDER at URL (Ctrl-C stops)"
        if " at http" not in line:
            raise SystemExit(f"the HTTP server did not start: {line!r}")
        yield line.split(" at ")[-1].split()[0]
    finally:
        process.terminate()
        process.wait()


def rate(lib, pipe, epochs, sync):
    """Best images/s over `epochs` epochs of `pipe` through `lib`'s DALIGenericIterator,
    after a warm-up epoch."""
    pipe.build()
    plugin = importlib.import_module(f"{lib.__name__}.plugin.pytorch")
    iterator = plugin.DALIGenericIterator([pipe], ["images", "labels"], reader_name="Reader", auto_reset=True,
                                          last_batch_policy=plugin.LastBatchPolicy.PARTIAL)
    best = 0.0
    for epoch in range(epochs + 1):
        start, n = time.perf_counter(), 0
        for (batch,) in iterator:
            n += batch["images"].shape[0]
        sync()
        if epoch:
            best = max(best, n / (time.perf_counter() - start))
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu", help="gpu: 'mixed' decode on CUDA")
    p.add_argument("--num-images", type=int, default=512)
    p.add_argument("--shard-size", type=int, default=64, help="samples per WebDataset shard")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--epochs", type=int, default=2, help="timed epochs per row (after one warm-up epoch)")
    p.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "torchdali-readers-bench"),
                   help="where the generated photos and their shards are kept")
    args = p.parse_args()
    for name in ("num_images", "shard_size", "batch_size", "threads", "epochs"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    gpu = args.device == "gpu"
    if gpu and not torch.cuda.is_available():
        raise SystemExit("--device gpu: no CUDA device")
    folder = write_photo_dataset(os.path.join(args.cache, f"photos-{args.num_images}"), args.num_images)
    shard_dir = os.path.join(args.cache, f"shards-{args.num_images}-{args.shard_size}")
    shards = write_shards(folder, shard_dir, args.shard_size)
    data = describe_dataset(folder)
    print(f"{data['images']} generated photos ({data['mean_width']:.0f}x{data['mean_height']:.0f} px, "
          f"{data['mean_kib']:.0f} KiB on average) in {data['classes']} classes, {len(shards)} shards of up to "
          f"{args.shard_size}; {args.device}, batch {args.batch_size}, {args.threads} threads, "
          f"best of {args.epochs} epochs")
    print(f"stage: {STAGES['train']}", flush=True)
    settings = dict(gpu=gpu, batch_size=args.batch_size, num_threads=args.threads,
                    device_id=torch.cuda.current_device() if gpu else None, seed=0)
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    tars, indexes = [t for t, _ in shards], [i for _, i in shards]

    def files(lib):
        return rate(lib, files_pipeline(lib, folder, **settings), args.epochs, sync)

    def local_shards(lib):
        return rate(lib, shards_pipeline(lib, tars, indexes, **settings), args.epochs, sync)

    rows = [("readers.file, image folder", files(torchdali)),
            ("readers.webdataset, local shards", local_shards(torchdali))]
    with server(shard_dir) as url:
        def remote(paths):
            return [f"{url}/{os.path.basename(path)}" for path in paths]
        rows.append(("readers.webdataset, shards over HTTP (local server)",
                     rate(torchdali, shards_pipeline(torchdali, remote(tars), remote(indexes), **settings),
                          args.epochs, sync)))
    try:
        dali = importlib.import_module("nvidia.dali")
    except ImportError as e:
        print(f"NVIDIA DALI rows skipped: {e}")
    else:
        rows += [(f"DALI {dali.__version__}: readers.file, image folder", files(dali)),
                 (f"DALI {dali.__version__}: readers.webdataset, local shards", local_shards(dali))]
    print("\n| reader | images/s | × torchdali readers.file |\n| --- | ---: | ---: |")
    for name, value in rows:
        print(f"| {name} | {value:.0f} | {value / rows[0][1]:.2f} |")


if __name__ == "__main__":
    main()
