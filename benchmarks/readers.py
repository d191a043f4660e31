"""Images/s of the benchmark's training stage (torchdali.bench.stages: decode →
RandomResizedCrop 224 → flip → normalize) fed by three readers of the same generated photos:
(a) readers.file over the image folder, (b) readers.webdataset over WebDataset shards of
those images (folder2wds, with index files) on the local disk, and (c) the same shards over
HTTP from a local server in a thread (torchdali.tools.serve, Range requests, through fsspec).
Each row: one warm-up epoch, then the best of --epochs epochs through DALIGenericIterator.

    python benchmarks/readers.py [--device cpu|gpu] [--num-images 512] [--shard-size 64]
                                 [--batch-size 32] [--threads N] [--epochs 2]"""
import argparse
import os
import tempfile
import time

import torch

import torchdali
from torchdali import fn, types
from torchdali.bench.stages import STAGES, stage_images
from torchdali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
from torchdali.sample_data import describe_dataset, write_photo_dataset
from torchdali.tools.folder2wds import write_shards
from torchdali.tools.serve import serving


@torchdali.pipeline_def
def files_pipeline(data_dir, gpu):
    jpegs, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, pad_last_batch=True, name="Reader")
    return stage_images(torchdali, "train", jpegs, gpu), labels.gpu() if gpu else labels


@torchdali.pipeline_def
def shards_pipeline(paths, index_paths, gpu):
    jpegs, labels = fn.readers.webdataset(paths=paths, index_paths=index_paths, ext=["jpg", "cls"],
                                          dtypes=[types.UINT8, types.INT32], random_shuffle=True,
                                          pad_last_batch=True, name="Reader")
    return stage_images(torchdali, "train", jpegs, gpu), labels.gpu() if gpu else labels


def rate(pipe, epochs, sync):
    """Best images/s over `epochs` epochs of `pipe` through DALIGenericIterator, after a
    warm-up epoch."""
    pipe.build()
    iterator = DALIGenericIterator([pipe], ["images", "labels"], reader_name="Reader", auto_reset=True,
                                   last_batch_policy=LastBatchPolicy.PARTIAL)
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
    rows = [("readers.file, image folder", rate(files_pipeline(folder, **settings), args.epochs, sync)),
            ("readers.webdataset, local shards",
             rate(shards_pipeline(tars, indexes, **settings), args.epochs, sync))]
    with serving(shard_dir) as url:
        def remote(paths):
            return [f"{url}/{os.path.basename(path)}" for path in paths]
        rows.append(("readers.webdataset, shards over HTTP (local server)",
                     rate(shards_pipeline(remote(tars), remote(indexes), **settings), args.epochs, sync)))
    print("\n| reader | images/s | × readers.file |\n| --- | ---: | ---: |")
    for name, value in rows:
        print(f"| {name} | {value:.0f} | {value / rows[0][1]:.2f} |")


if __name__ == "__main__":
    main()
