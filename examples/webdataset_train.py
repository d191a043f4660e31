"""Train from WebDataset shards: converts an image folder (one sub-folder per class; by
default the built-in sample data) into tar shards with index files, then trains a tiny
ResNet from them through readers.webdataset and DALIGenericIterator, reading the shards from
the local disk or from a URL.

    python examples/webdataset_train.py                      # shards on the local disk
    python examples/webdataset_train.py --serve              # over HTTP from a local server
    python examples/webdataset_train.py --url-root https://host/shards   # where you put them

The same conversion as a command: python -m torchdali.tools.folder2wds FOLDER OUT_DIR.
"""
import argparse
import os
import tempfile
import time

import torch
from torch import nn

from ddp_train import MEAN, STD, tiny_resnet  # examples/ddp_train.py, beside this file
from torchdali import fn, pipeline_def, types
from torchdali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
from torchdali.sample_data import write_sample_dataset
from torchdali.tools.folder2wds import class_files, write_shards
from torchdali.tools.serve import serving


@pipeline_def
def shards_pipeline(paths, index_paths, image_size, gpu):
    # Each sample: KEY.jpg (the image's bytes) and KEY.cls (its label, one int32).
    jpegs, labels = fn.readers.webdataset(paths=paths, index_paths=index_paths, ext=["jpg", "cls"],
                                          dtypes=[types.UINT8, types.INT32], random_shuffle=True,
                                          initial_fill=64, pad_last_batch=True, name="Reader")
    images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
    images = fn.random_resized_crop(images, size=[image_size, image_size])
    images = fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(), mean=MEAN, std=STD,
                                      dtype=types.FLOAT, output_layout="CHW")
    return images, labels.gpu() if gpu else labels


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", metavar="DIR", help="the image folder (default: the built-in sample data)")
    p.add_argument("--num-images", type=int, default=256, help="size of the sample data")
    p.add_argument("--shards", metavar="DIR", default=os.path.join(tempfile.gettempdir(), "torchdali-wds-shards"),
                   help="where the shards are written")
    p.add_argument("--shard-size", type=int, default=64, help="samples per shard")
    p.add_argument("--url-root", help="read the shards from this URL (a copy of --shards) instead of the disk")
    p.add_argument("--serve", action="store_true", help="serve --shards over HTTP from a local server and read "
                   "them from there")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many steps in all")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--image-size", type=int, default=96)
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args(argv)
    if args.serve and args.url_root:
        p.error("--serve and --url-root exclude each other")
    return args


def train(args, paths, index_paths, num_classes):
    """Train for the epochs asked; returns the losses (a tensor) and the images/s."""
    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    pipe = shards_pipeline(paths, index_paths, args.image_size, gpu, batch_size=args.batch_size,
                           num_threads=os.cpu_count() or 1, device_id=0 if gpu else None, seed=1234)
    data = DALIGenericIterator([pipe], ["images", "labels"], reader_name="Reader", auto_reset=True,
                               last_batch_policy=LastBatchPolicy.DROP)
    model = tiny_resnet(num_classes).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    losses, images, start = [], 0, time.perf_counter()
    for epoch in range(args.epochs):
        for i, (batch,) in enumerate(data):
            loss = nn.functional.cross_entropy(model(batch["images"]), batch["labels"].flatten().long())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
            images += batch["images"].shape[0]
            if i % 5 == 0:
                print(f"epoch {epoch} batch {i + 1}/{len(data)} loss {loss.item():.4f}", flush=True)
            if len(losses) == args.max_steps:
                break
        if len(losses) == args.max_steps:
            break
    return torch.stack(losses), images / (time.perf_counter() - start)


def main(argv=None):
    args = parse_args(argv)
    folder = args.data or write_sample_dataset(os.path.join(tempfile.gettempdir(), "torchdali-sample-data"),
                                               num_images=args.num_images)
    shards = write_shards(folder, args.shards, args.shard_size)
    num_classes = max(label for _, label in class_files(folder)) + 1
    print(f"{folder}: {len(shards)} shards (with index files) in {args.shards}")
    tars, indexes = [t for t, _ in shards], [i for _, i in shards]

    def at(root):  # the shards' URLs under `root`
        return [[f"{root.rstrip('/')}/{os.path.basename(p)}" for p in files] for files in (tars, indexes)]

    if args.serve:
        with serving(args.shards) as url:
            print(f"reading the shards from {url}")
            losses, rate = train(args, *at(url), num_classes)
    elif args.url_root:
        print(f"reading the shards from {args.url_root}")
        losses, rate = train(args, *at(args.url_root), num_classes)
    else:
        losses, rate = train(args, tars, indexes, num_classes)
    if not torch.isfinite(losses).all():
        raise SystemExit("a loss was not finite")
    print(f"done: {len(losses)} steps, {rate:,.0f} images/s, final loss {losses[-1].item():.4f}")
    return losses


if __name__ == "__main__":
    main()
