"""Distributed data-parallel training of a tiny ResNet on the built-in sample data (or an
image folder, --data), with a torchdali pipeline per process: every rank reads its own shard
(shard_id/num_shards="auto"), decodes on its GPU (device="mixed") or on the CPU with its
share of the host's cores, and feeds DDP through DALIIterableDataset.

    torchrun --nproc_per_node=2 examples/ddp_train.py --epochs 1
    torchrun --nproc_per_node=2 examples/ddp_train.py --max-steps 3     # a quick check

Uses NCCL on GPUs and gloo on CPUs. Without torchrun it runs as a single process. At the end
it checks what data-parallel training promises: every loss was finite, and every rank holds
the same parameters.
"""
import argparse
import os
import tempfile
import time

import torch
import torch.distributed as dist
from torch import nn

from torchdali import fn, pipeline_def, types
from torchdali.distributed import threads_per_rank
from torchdali.plugin.pytorch import DALIIterableDataset, LastBatchPolicy
from torchdali.sample_data import write_sample_dataset

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


@pipeline_def
def train_pipeline(data_dir, image_size, gpu):
    jpegs, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, initial_fill=64,
                                    pad_last_batch=True, shard_id="auto", num_shards="auto", name="Reader")
    images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
    images = fn.random_resized_crop(images, size=[image_size, image_size])
    images = fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(), mean=MEAN, std=STD,
                                      dtype=types.FLOAT, output_layout="CHW")
    return images, labels.gpu() if gpu else labels


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = nn.Sequential() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def tiny_resnet(num_classes, width=16):
    return nn.Sequential(nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                         Block(width, width, 1), Block(width, 2 * width, 2), Block(2 * width, 4 * width, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, num_classes))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many steps in all")
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--image-size", type=int, default=96)
    p.add_argument("--num-images", type=int, default=256)
    p.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "torchdali-sample-data"),
                   help="where the sample data is written")
    p.add_argument("--data", metavar="DIR", help="train on this image folder (one sub-folder per class) instead")
    p.add_argument("--lr", type=float, default=0.05)
    return p.parse_args()


def main():
    args = parse_args()
    gpu = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    if "RANK" in os.environ:
        dist.init_process_group("nccl" if gpu else "gloo", device_id=device if gpu else None)
    rank = dist.get_rank() if dist.is_initialized() else 0
    data_dir = args.data or args.data_dir
    if rank == 0 and not args.data:
        write_sample_dataset(args.data_dir, num_images=args.num_images)
    if dist.is_initialized():
        dist.barrier()  # the other ranks read the data once rank 0 has written it
    num_classes = len([d for d in os.scandir(data_dir) if d.is_dir()])

    # device_id defaults to "auto": this rank's GPU (LOCAL_RANK), or None on a CPU-only machine.
    data = DALIIterableDataset(train_pipeline, ["images", "labels"], last_batch_policy=LastBatchPolicy.DROP,
                               data_dir=data_dir, image_size=args.image_size, gpu=gpu,
                               batch_size=args.batch_size, num_threads=threads_per_rank(), seed=1234 + rank)
    model = tiny_resnet(num_classes).to(device)
    if dist.is_initialized():
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if gpu else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    step, images, losses, start = 0, 0, [], time.perf_counter()
    for epoch in range(args.epochs):
        data.set_epoch(epoch)
        for i, batch in enumerate(data):
            loss = nn.functional.cross_entropy(model(batch["images"]), batch["labels"].flatten().long())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
            step += 1
            images += batch["images"].shape[0]
            if rank == 0 and (i % 5 == 0 or i == len(data) - 1):
                print(f"epoch {epoch} batch {i + 1}/{len(data)} loss {loss.item():.4f}", flush=True)
            if args.max_steps is not None and step >= args.max_steps:
                break
        if args.max_steps is not None and step >= args.max_steps:
            break
    seconds = time.perf_counter() - start
    check_training(torch.stack(losses), model, device)
    if rank == 0:
        world = dist.get_world_size() if dist.is_initialized() else 1
        print(f"done: {step} steps in {seconds:.1f} s, {world * images / seconds:,.0f} images/s on {world} "
              f"rank(s), final loss {loss.item():.4f}; losses finite and parameters identical on every rank")
    if dist.is_initialized():
        dist.destroy_process_group()


def check_training(losses, model, device):
    """Fail unless every loss of every rank was finite and every rank ends with rank 0's
    parameters (what DDP's gradient averaging promises)."""
    finite = torch.isfinite(losses).all().to(device=device, dtype=torch.int32)
    params = torch.cat([p.detach().flatten() for p in model.parameters()]).to(device)
    reference = params.clone()
    if dist.is_initialized():
        dist.all_reduce(finite, op=dist.ReduceOp.MIN)
        dist.broadcast(reference, src=0)
    if not finite.item():
        raise SystemExit("a rank saw a loss that is not finite")
    differ = torch.tensor(int(not torch.equal(params, reference)), device=device)
    if dist.is_initialized():
        dist.all_reduce(differ, op=dist.ReduceOp.MAX)
    if differ.item():
        raise SystemExit("the ranks' parameters differ after training")


if __name__ == "__main__":
    main()
