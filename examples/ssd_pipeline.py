"""An SSD-style detection pipeline, as DALI's SSD example writes it, on a small COCO-format
set that this script generates: read boxes and labels, decode, pick a random crop that keeps
the objects (random_bbox_crop), cut it (slice), flip image and boxes together, resize to
300x300, normalize, and encode the boxes against SSD's default boxes (box_encoder).

It writes a PNG of the augmented batch with the boxes drawn on it, so the result can be
looked at. Runs on the GPU (mixed decoding) when one is present, else on the CPU.

    python examples/ssd_pipeline.py [--out ssd_batch.png] [--batches 2]
"""
import argparse
import itertools
import os
import tempfile

import numpy as np
import torch

import torchdali as dali
from torchdali import fn, types
from torchdali.sample_data import write_coco_dataset

SIZE = 300
MEAN, STD = [0.485 * 255, 0.456 * 255, 0.406 * 255], [0.229 * 255, 0.224 * 255, 0.225 * 255]


def default_boxes(grids=(19, 10, 5, 3), scales=(0.1, 0.3, 0.55, 0.8), ratios=(1.0, 2.0, 0.5)):
    """SSD's default boxes: on each grid, one box per aspect ratio centred on every cell, as a
    flat list of (left, top, right, bottom) in [0, 1], the way box_encoder takes them."""
    boxes = []
    for grid, scale in zip(grids, scales):
        for (i, j), ratio in itertools.product(itertools.product(range(grid), repeat=2), ratios):
            cx, cy = (j + 0.5) / grid, (i + 0.5) / grid
            w, h = scale * np.sqrt(ratio), scale / np.sqrt(ratio)
            boxes.append(np.clip([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 0, 1))
    return np.asarray(boxes, np.float32).reshape(-1).tolist()


@dali.pipeline_def(batch_size=8, num_threads=2, seed=5)
def ssd_pipeline(images_dir, annotations, anchors, gpu):
    jpegs, boxes, labels = fn.readers.coco(file_root=images_dir, annotations_file=annotations, ltrb=True,
                                           ratio=True, skip_empty=True, random_shuffle=True, name="Reader")
    crop_begin, crop_size, boxes, labels = fn.random_bbox_crop(
        boxes, labels, aspect_ratio=[0.5, 2.0], thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9], scaling=[0.3, 1.0],
        bbox_layout="xyXY", allow_no_crop=True, num_attempts=50)
    images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
    images = fn.slice(images, crop_begin, crop_size, out_of_bounds_policy="trim_to_shape")
    flip = fn.random.coin_flip(probability=0.5)
    images = fn.flip(images, horizontal=flip)
    boxes = fn.bb_flip(boxes, ltrb=True, horizontal=flip)
    images = fn.resize(images, resize_x=SIZE, resize_y=SIZE)
    normalized = fn.crop_mirror_normalize(images, mean=MEAN, std=STD, dtype=types.FLOAT, output_layout="CHW")
    encoded_boxes, encoded_labels = fn.box_encoder(boxes, labels, anchors=anchors, criteria=0.5, offset=True,
                                                   scale=1.0, stds=[0.1, 0.1, 0.2, 0.2])
    return normalized, encoded_boxes, encoded_labels, images, boxes, labels


def draw(images, boxes, labels, path):
    """A grid of the augmented images (HWC uint8) with their boxes ([k, 4] ltrb in [0, 1]),
    written as a PNG."""
    from torchvision.io import write_png
    from torchvision.utils import draw_bounding_boxes, make_grid

    colours = {1: "red", 2: "yellow", 3: "cyan"}
    drawn = []
    for image, b, l in zip(images, boxes, labels):
        chw = image.permute(2, 0, 1).cpu()
        pixels = torch.as_tensor(b).reshape(-1, 4) * SIZE
        names = [str(int(v)) for v in torch.as_tensor(l).reshape(-1)]
        drawn.append(draw_bounding_boxes(chw, pixels, labels=names, width=2,
                                         colors=[colours.get(int(v), "white") for v in torch.as_tensor(l).reshape(-1)]))
    write_png(make_grid(drawn, nrow=4, padding=4), path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="ssd_batch.png", help="the PNG to write")
    parser.add_argument("--batches", type=int, default=2, help="batches to run")
    args = parser.parse_args()
    gpu = torch.cuda.is_available()
    images_dir, annotations = write_coco_dataset(os.path.join(tempfile.gettempdir(), "torchdali-coco-sample"))
    anchors = default_boxes()
    pipe = ssd_pipeline(images_dir, annotations, anchors, gpu, device_id=0 if gpu else None)
    for _ in range(args.batches):
        normalized, encoded_boxes, encoded_labels, images, boxes, labels = pipe.run()
    matched = int((encoded_labels.as_torch() > 0).sum())
    print(f"images {tuple(normalized.as_torch().shape)}, {len(anchors) // 4} default boxes, encoded boxes "
          f"{tuple(encoded_boxes.as_torch().shape)}, {matched} of them matched to objects in the last batch")
    draw([torch.as_tensor(np.asarray(images.as_cpu().at(i))) for i in range(len(images))],
         [np.asarray(boxes.as_cpu().at(i)) for i in range(len(boxes))],
         [np.asarray(labels.as_cpu().at(i)) for i in range(len(labels))], args.out)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
