"""A segmentation pipeline on a small COCO-format set that this script generates: each image
with its mask of class labels (readers.coco with pixelwise_masks), and the same random crop,
flip and resize applied to both, the mask with nearest-neighbour interpolation so that it
keeps whole labels.

It writes a PNG of the augmented batch with the masks drawn over the images, so the result
can be looked at. Runs on the GPU (mixed decoding) when one is present, else on the CPU.

    python examples/segmentation_pipeline.py [--out segmentation_batch.png] [--batches 2]
"""
import argparse
import os
import tempfile

import numpy as np
import torch

import torchdali as dali
from torchdali import fn, types
from torchdali.sample_data import write_coco_dataset

SIZE = 256
COLOURS = torch.tensor([[0, 0, 0], [230, 25, 75], [255, 225, 25], [70, 240, 240]], dtype=torch.uint8)


@dali.pipeline_def(batch_size=8, num_threads=2, seed=7)
def segmentation_pipeline(images_dir, annotations, gpu):
    jpegs, _, _, masks = fn.readers.coco(file_root=images_dir, annotations_file=annotations, pixelwise_masks=True,
                                         random_shuffle=True, name="Reader")
    images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
    masks = fn.cast(masks, dtype=types.UINT8)  # labels 0 (background) .. 3
    if gpu:
        masks = masks.gpu()
    # One window for both: its start and size relative to the image, drawn once per sample.
    start = fn.random.uniform(range=[0.0, 0.3], shape=[2])
    size = fn.random.uniform(range=[0.7, 1.0], shape=[2])
    images = fn.slice(images, start, size, out_of_bounds_policy="trim_to_shape")
    masks = fn.slice(masks, start, size, out_of_bounds_policy="trim_to_shape")
    flip = fn.random.coin_flip(probability=0.5)
    images = fn.flip(images, horizontal=flip)
    masks = fn.flip(masks, horizontal=flip)
    images = fn.resize(images, resize_x=SIZE, resize_y=SIZE)
    masks = fn.resize(masks, resize_x=SIZE, resize_y=SIZE, interp_type=types.INTERP_NN, antialias=False)
    return images, masks


def draw(images, masks, path):
    """A grid of the augmented images (HWC uint8) with their masks (HW1 labels) blended over
    them in each label's colour (the background darkened), written as a PNG."""
    from torchvision.io import write_png
    from torchvision.utils import make_grid

    drawn = []
    for image, mask in zip(images, masks):
        labels = mask[..., 0].long().clamp(max=len(COLOURS) - 1)
        overlay = COLOURS[labels].float()
        inside = (labels > 0)[..., None]
        blended = torch.where(inside, 0.3 * image.float() + 0.7 * overlay, 0.45 * image.float())
        drawn.append(blended.round().to(torch.uint8).permute(2, 0, 1))
    write_png(make_grid(drawn, nrow=4, padding=4), path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="segmentation_batch.png", help="the PNG to write")
    parser.add_argument("--batches", type=int, default=2, help="batches to run")
    args = parser.parse_args()
    gpu = torch.cuda.is_available()
    images_dir, annotations = write_coco_dataset(os.path.join(tempfile.gettempdir(), "torchdali-coco-sample"))
    pipe = segmentation_pipeline(images_dir, annotations, gpu, device_id=0 if gpu else None)
    for _ in range(args.batches):
        images, masks = pipe.run()
    images, masks = images.as_torch().cpu(), masks.as_torch().cpu()
    found = sorted(set(np.unique(masks.numpy()).tolist()))
    print(f"images {tuple(images.shape)} {images.dtype}, masks {tuple(masks.shape)} {masks.dtype}, labels {found}")
    draw(images, masks, args.out)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
