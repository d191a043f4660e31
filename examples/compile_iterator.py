"""torch.compile over a model fed by a torchdali iterator, on the built-in sample data (or an
image folder, --data).

The pipeline reads, decodes and resizes the images to one size; DALIGenericIterator hands
them over as a uint8 tensor [N, H, W, C]. The compiled training step does the rest on that
tensor: a random flip with torchdali's own flip op (a torch op, so it compiles with the rest),
normalization, NHWC -> NCHW, the model, the loss. With LastBatchPolicy.DROP (or FILL) every
batch has the same shape, so the step compiles once for all batches and epochs: the script
counts the graphs compiled and checks that. (PARTIAL's short last batch would compile a second
graph, unless its batch dimension is marked dynamic: torch._dynamo.mark_dynamic(x, 0).)

Runs on the GPU (mixed decoding) when one is present, else on the CPU.

    python examples/compile_iterator.py [--epochs 2] [--batch-size 8] [--backend inductor]
"""
import argparse
import os
import tempfile

import torch
from torch import nn

from ddp_train import MEAN, STD, tiny_resnet  # examples/ddp_train.py, beside this file
from torchdali import fn, pipeline_def, types
from torchdali.kernels.geometry import flip
from torchdali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
from torchdali.sample_data import write_sample_dataset


@pipeline_def
def resized_images(data_dir, image_size, gpu):
    jpegs, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, initial_fill=64, name="Reader")
    images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
    images = fn.resize(images, size=[image_size, image_size])
    return images, labels.gpu() if gpu else labels


def counting(backend):
    """`backend` (a torch.compile backend's name), counting the graphs it compiles."""
    def compile_graph(gm, example_inputs):
        compile_graph.graphs += 1
        return torch._dynamo.lookup_backend(backend)(gm, example_inputs)
    compile_graph.graphs = 0
    return compile_graph


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--backend", default="inductor", help="torch.compile's backend (inductor, aot_eager, eager)")
    p.add_argument("--num-images", type=int, default=64, help="of the sample data")
    p.add_argument("--data", metavar="DIR", help="an image folder (one sub-folder per class) instead")
    args = p.parse_args(argv)
    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    data_dir = args.data or write_sample_dataset(os.path.join(tempfile.gettempdir(), "torchdali-sample-data"),
                                                 num_images=args.num_images)
    num_classes = len([d for d in os.scandir(data_dir) if d.is_dir()])

    pipe = resized_images(data_dir, args.image_size, gpu, batch_size=args.batch_size, num_threads=2,
                          device_id=0 if gpu else None, seed=1)
    loader = DALIGenericIterator(pipe, ["images", "labels"], reader_name="Reader",
                                 last_batch_policy=LastBatchPolicy.DROP)
    model = tiny_resnet(num_classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    backend = counting(args.backend)

    @torch.compile(backend=backend)
    def loss_of(images, labels, horizontal):
        images = flip(images, horizontal, torch.zeros_like(horizontal))  # torchdali's op, per sample
        x = (images.permute(0, 3, 1, 2).float() - mean) / std
        return nn.functional.cross_entropy(model(x), labels.flatten().long())

    print(f"{len(loader)} batches an epoch of {args.batch_size} images, {args.image_size}x{args.image_size}, "
          f"backend {args.backend} on {device}")
    losses = []
    for epoch in range(args.epochs):
        for (batch,) in loader:
            horizontal = torch.randint(0, 2, (len(batch["images"]),))  # the flags may stay on the CPU
            loss = loss_of(batch["images"], batch["labels"], horizontal)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        print(f"epoch {epoch}: {len(loader)} steps, mean loss {sum(losses[-len(loader):]) / len(loader):.4f}, "
              f"graphs compiled so far: {backend.graphs}")
    if not all(torch.isfinite(torch.tensor(losses))):
        raise SystemExit("a loss is not finite")
    print(f"done: {len(losses)} steps, {backend.graphs} compiled graph(s) for all of them")


if __name__ == "__main__":
    main()
