"""A picture of what the augmentations do: one pipeline decodes a batch of the built-in sample
images (or an image folder, --data) and applies each augmentation to the same images, one row
each: the image (resized, centre crop), random_resized_crop, random flips, a random rotation,
color_twist, hsv and TrivialAugment Wide (torchdali.auto_aug). It writes the grid as a PNG,
a row per augmentation and a column per image.

Runs on the GPU (mixed decoding) when one is present, else on the CPU.

    python examples/augmented_grid.py [--out docs/images/samples.png] [--columns 6] [--tile 104]
"""
import argparse
import os
import tempfile

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from torchdali import fn, pipeline_def, types
from torchdali.auto_aug import trivial_augment
from torchdali.sample_data import write_sample_dataset

ROWS = ["image", "random_resized_crop", "flip (random h, v)", "rotate (±30°)", "color_twist", "hsv",
        "trivial_augment_wide"]
LABEL_WIDTH, GAP = 150, 4


@pipeline_def(enable_conditionals=True)  # trivial_augment_wide picks an augmentation per sample with `if`
def augmentations(data_dir, tile, gpu):
    jpegs, _ = fn.readers.file(file_root=data_dir, random_shuffle=True, initial_fill=32)
    images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
    base = fn.resize(images, size=[tile, tile], mode="not_smaller")
    base = fn.crop(base, crop=(tile, tile))
    uniform = fn.random.uniform
    return (
        base,
        fn.random_resized_crop(images, size=[tile, tile]),
        fn.flip(base, horizontal=fn.random.coin_flip(), vertical=fn.random.coin_flip()),
        fn.rotate(base, angle=uniform(range=(-30.0, 30.0)), keep_size=True, fill_value=0),
        fn.color_twist(base, brightness=uniform(range=(0.6, 1.4)), contrast=uniform(range=(0.6, 1.4)),
                       saturation=uniform(range=(0.0, 2.0)), hue=uniform(range=(-45.0, 45.0))),
        fn.hsv(base, hue=uniform(range=(-90.0, 90.0)), saturation=uniform(range=(0.3, 1.7)),
               value=uniform(range=(0.7, 1.3))),
        trivial_augment.trivial_augment_wide(base),
    )


def grid(rows, tile):
    """A white canvas with the batches of `rows` ([N, tile, tile, 3] uint8 each) as rows of
    tiles, each row labelled on its left."""
    columns = len(rows[0])
    canvas = Image.new("RGB", (LABEL_WIDTH + columns * (tile + GAP), len(rows) * (tile + GAP) + GAP), "white")
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default(size=14)
    for r, (name, batch) in enumerate(zip(ROWS, rows)):
        top = GAP + r * (tile + GAP)
        draw.text((GAP, top + tile // 2), name, fill="black", font=font, anchor="lm")
        for c, image in enumerate(batch):
            canvas.paste(Image.fromarray(image), (LABEL_WIDTH + c * (tile + GAP), top))
    return canvas


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join("docs", "images", "samples.png"))
    p.add_argument("--columns", type=int, default=6, help="images (the batch size)")
    p.add_argument("--tile", type=int, default=104, help="side of each picture in pixels")
    p.add_argument("--colors", type=int, default=256, help="palette size of the PNG (0: full colour)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--data", metavar="DIR", help="an image folder (one sub-folder per class) instead")
    args = p.parse_args(argv)
    gpu = torch.cuda.is_available()
    data_dir = args.data or write_sample_dataset(os.path.join(tempfile.gettempdir(), "torchdali-sample-data"),
                                                 num_images=64)
    pipe = augmentations(data_dir, args.tile, gpu, batch_size=args.columns, num_threads=2,
                         device_id=0 if gpu else None, seed=args.seed)
    rows = [np.asarray(out.as_torch().cpu()) for out in pipe.run()]
    picture = grid(rows, args.tile)
    if args.colors:
        picture = picture.quantize(args.colors, dither=Image.Dither.NONE)  # a palette PNG: a few times smaller
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    picture.save(args.out, optimize=True)
    print(f"wrote {args.out}: {picture.width}x{picture.height}, {len(ROWS)} augmentations x {args.columns} images, "
          f"{os.path.getsize(args.out) // 1024} KiB")


if __name__ == "__main__":
    main()
