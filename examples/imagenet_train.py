"""ImageNet-style training with DALIClassificationIterator, as the walk-through "nvidia-dali
GPU加速预处理" writes it with DALI's class API: a sharded training pipeline (file reader,
decoding, RandomResizedCrop, CropMirrorNormalize with a random mirror from CoinFlip) and a
validation pipeline (resize the shorter side, centre crop), each behind an iterator that
hands the training loop {"data", "label"} batches as torch tensors.

It trains a torchvision model (resnet18 by default) for a few steps on the built-in sample
data (DIR/train and DIR/val with --data, one sub-folder per class in each), then measures its
accuracy on the validation set. Decodes on the GPU (mixed, nvJPEG) when one is present, else
on the CPU. Under torchrun each process reads its own shard (RANK, WORLD_SIZE); for DDP
itself see examples/ddp_train.py.

    python examples/imagenet_train.py [--steps 10] [--batch-size 16] [--crop 224]
"""
import argparse
import math
import os
import tempfile
import time

import torch
import torchvision

import torchdali.ops as ops
import torchdali.types as types
from torchdali.pipeline import Pipeline
from torchdali.plugin.pytorch import DALIClassificationIterator, LastBatchPolicy
from torchdali.sample_data import write_sample_dataset

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


class HybridTrainPipe(Pipeline):
    def __init__(self, batch_size, num_threads, device_id, data_dir, crop, dali_cpu=False, local_rank=0,
                 world_size=1):
        super().__init__(batch_size, num_threads, device_id, seed=12 + local_rank)
        dali_device = "cpu" if dali_cpu else "gpu"
        self.input = ops.FileReader(file_root=data_dir, shard_id=local_rank, num_shards=world_size,
                                    random_shuffle=True)
        self.decode = ops.ImageDecoder(device="cpu" if dali_cpu else "mixed", output_type=types.RGB)
        self.res = ops.RandomResizedCrop(device=dali_device, size=crop, random_area=[0.08, 1.25])
        # The walk-through's output_dtype= and image_type= still work (deprecated: dtype=, and
        # nothing, as in DALI).
        self.cmnp = ops.CropMirrorNormalize(device=dali_device, dtype=types.FLOAT, output_layout=types.NCHW,
                                            mean=MEAN, std=STD)
        self.coin = ops.CoinFlip(probability=0.5)
        print(f'DALI "{dali_device}" variant')

    def define_graph(self):
        rng = self.coin()
        self.jpegs, self.labels = self.input(name="Reader")
        images = self.decode(self.jpegs)
        images = self.res(images)
        output = self.cmnp(images, mirror=rng)
        return [output, self.labels]


class HybridValPipe(Pipeline):
    def __init__(self, batch_size, num_threads, device_id, data_dir, crop, size, dali_cpu=False, local_rank=0,
                 world_size=1):
        super().__init__(batch_size, num_threads, device_id, seed=12 + local_rank)
        dali_device = "cpu" if dali_cpu else "gpu"
        self.input = ops.FileReader(file_root=data_dir, shard_id=local_rank, num_shards=world_size,
                                    random_shuffle=False)
        self.decode = ops.ImageDecoder(device="cpu" if dali_cpu else "mixed", output_type=types.RGB)
        self.res = ops.Resize(device=dali_device, resize_shorter=size, interp_type=types.INTERP_TRIANGULAR)
        self.cmnp = ops.CropMirrorNormalize(device=dali_device, dtype=types.FLOAT, output_layout=types.NCHW,
                                            crop=(crop, crop), mean=MEAN, std=STD)

    def define_graph(self):
        self.jpegs, self.labels = self.input(name="Reader")
        images = self.decode(self.jpegs)
        images = self.res(images)
        output = self.cmnp(images)
        return [output, self.labels]


def get_imagenet_iter_dali(split, image_dir, batch_size, num_threads, device_id, crop, val_size=256,
                           dali_cpu=False, shard_id=0, num_shards=1):
    """The training ('train') or validation ('val') iterator over shard `shard_id` of
    `num_shards` of image_dir/train or image_dir/val."""
    device_id = None if dali_cpu else device_id
    if split == "train":
        pipe = HybridTrainPipe(batch_size=batch_size, num_threads=num_threads, device_id=device_id,
                               data_dir=os.path.join(image_dir, "train"), crop=crop, dali_cpu=dali_cpu,
                               world_size=num_shards, local_rank=shard_id)
        policy = LastBatchPolicy.DROP  # every training batch full
    else:
        pipe = HybridValPipe(batch_size=batch_size, num_threads=num_threads, device_id=device_id,
                             data_dir=os.path.join(image_dir, "val"), crop=crop, size=val_size, dali_cpu=dali_cpu,
                             world_size=num_shards, local_rank=shard_id)
        policy = LastBatchPolicy.PARTIAL  # every validation image once
    pipe.build()
    # reader_name follows this shard's size exactly; the walk-through's
    # size=pipe.epoch_size("Reader") // world_size works too (with DALI's warning).
    return DALIClassificationIterator(pipe, reader_name="Reader", last_batch_policy=policy, auto_reset=True)


def write_sample_imagenet(root, num_train, num_val):
    """The built-in sample data as an ImageNet-like layout: ROOT/train and ROOT/val."""
    write_sample_dataset(os.path.join(root, "train"), num_images=num_train, seed=0)
    write_sample_dataset(os.path.join(root, "val"), num_images=num_val, seed=1)
    return root


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10, help="training steps (batches)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--val-size", type=int, default=256, help="shorter side before the validation crop")
    p.add_argument("--arch", default="resnet18", help="a torchvision model name")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cpu", action="store_true", help="decode and augment on the CPU even with a GPU")
    p.add_argument("--data", metavar="DIR", help="a folder with train/ and val/ image folders; "
                                                 "default: the built-in sample data")
    args = p.parse_args(argv)
    dali_cpu = args.cpu or not torch.cuda.is_available()
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cpu") if dali_cpu else torch.device("cuda", local_rank)
    image_dir = args.data or write_sample_imagenet(os.path.join(tempfile.gettempdir(), "torchdali-sample-imagenet"),
                                                   num_train=128, num_val=32)
    num_classes = len([d for d in os.scandir(os.path.join(image_dir, "train")) if d.is_dir()])

    train_loader = get_imagenet_iter_dali("train", image_dir, args.batch_size, args.threads, local_rank, args.crop,
                                          dali_cpu=dali_cpu, shard_id=rank, num_shards=world_size)
    val_loader = get_imagenet_iter_dali("val", image_dir, args.batch_size, args.threads, local_rank, args.crop,
                                        args.val_size, dali_cpu=dali_cpu, shard_id=rank, num_shards=world_size)
    model = torchvision.models.get_model(args.arch, num_classes=num_classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    print(f"[INFO] train on {len(train_loader)} batches an epoch, {args.steps} steps, crop {args.crop}, "
          f"{args.arch} on {device}")
    model.train()
    step, start = 0, time.perf_counter()
    while step < args.steps:
        for i, data in enumerate(train_loader):
            images = data[0]["data"].to(device, non_blocking=True)
            labels = data[0]["label"].squeeze(-1).long().to(device, non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            print(f"step {step} images {tuple(images.shape)} loss {loss.item():.4f}", flush=True)
            if not math.isfinite(loss.item()):
                raise SystemExit("the loss is not finite")
            if step == args.steps:
                break
    seconds = time.perf_counter() - start
    print(f"[INFO] trained {step} steps in {seconds:.1f} s ({step * args.batch_size / seconds:.1f} images/s)")

    model.eval()
    correct = seen = 0
    with torch.no_grad():
        for data in val_loader:
            labels = data[0]["label"].squeeze(-1).long().to(device)
            correct += (model(data[0]["data"].to(device)).argmax(1) == labels).sum().item()
            seen += len(labels)
    print(f"[INFO] validation: {seen} images, accuracy {correct / seen:.3f}")


if __name__ == "__main__":
    main()
