"""ssd_random_crop: SSD's training crop of an image with its boxes (DALI's deprecated
predecessor of random_bbox_crop), with DALI's algorithm. Each round picks one of seven
choices uniformly: no crop, or a least IoU of -1 (any), 0.1, 0.3, 0.5, 0.7 or 0.9. A crop
choice draws up to `num_attempts` windows (each side 0.3 to 1 of the image's, width / height
0.5 to 2 in relative units, placed uniformly) and takes the first whose IoU with every box
reaches the least one and that holds the center of at least one box; when none does, the
next round picks again. Attempts are arrays: a draw measures many windows of every sample
still searching against all its boxes at once, in DALI's float32 arithmetic."""
import numpy as np
import torch

from ..schema import INT, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, RandomOperator, sample_shapes
from .bbox_crop import RandomBBoxCrop, intersection
from .windows import round_half_away

MIN_IOUS = np.array([-1.0, 0.1, 0.3, 0.5, 0.7, 0.9], np.float32)  # the crop choices; one more: no crop
NO_CROP = len(MIN_IOUS)
FIRST_DRAW = 4  # windows per sample in a round's first draw, twice as many in each further one
WINDOW_BOX_PAIRS = 1 << 20  # at most this many (window, box) pairs measured by one draw
NUMPY_BITS = {torch.bfloat16: torch.int16}  # torch types NumPy lacks: copied as these bits


@register("ssd_random_crop", inputs=(3, 3), outputs=3, aliases=("SSDRandomCrop",), deprecated_use="fn.random_bbox_crop",
          input_names=("images", "boxes", "labels"), args=[
    Arg("num_attempts", INT, 1, "Windows drawn for each chosen least IoU before choosing again.",
        check=lambda v: None if 0 < v <= 10**6 else "must be in [1, 1,000,000]"),
])
class SSDRandomCrop(RandomOperator):
    """Crops HWC images at random with their boxes (float [N, 4], ltrb, relative to the image)
    and labels (one per box: [N] or [N, 1] rows), as SSD trains: the window is the whole image
    (every box and label kept as given) or one whose IoU with every box reaches a threshold
    chosen at random; the boxes whose centers it holds are kept, mapped into it and clipped to
    [0, 1], with their labels. A sample without boxes is never cropped."""

    labels = RandomBBoxCrop.labels  # the kept boxes' label rows, checked against the boxes

    def plan(self, inputs):
        images, boxes, labels = inputs
        if images.ndim not in (None, 3):
            raise self.error(f"images of {images.ndim} dims are not supported; give HWC images", ValueError)
        self.check_layout(images.layout)
        if boxes.dtype is not None and not boxes.dtype.is_floating_point:
            raise self.error(f"boxes of type {boxes.dtype} are not supported; give float [boxes, 4]", TypeError)
        return [BatchSpec("cpu", images.dtype, 3, images.layout), BatchSpec("cpu", torch.float32, 2, boxes.layout),
                BatchSpec("cpu", labels.dtype, labels.ndim, labels.layout)], self.step

    def check_layout(self, layout):
        if layout not in (None, "", "HWC"):
            raise self.error(f"images of layout '{layout}' are not supported; give HWC images", ValueError)

    def step(self, inputs, args, ctx):
        images, boxes, labels = inputs
        n = len(images)
        self.check_layout(images.layout())
        if not n:
            return list(inputs)
        shapes = sample_shapes(self, images)
        if shapes.shape[1] != 3:
            raise self.error(f"images of {shapes.shape[1]} dims are not supported; give HWC images", ValueError)
        counts = self.box_counts(boxes)
        width = max(int(counts.max()), 1)  # the batch's boxes padded to [n, width, 4]
        valid = np.arange(width) < counts[:, None]
        box = np.zeros((n, width, 4), np.float32)
        box[valid] = torch.cat([b.reshape(-1, 4) for b in boxes.as_torch_list()]).float().numpy()
        no_crop, crops = self.find_crops(box, valid)
        lo, size = crops[:, :2].astype(np.float64), crops[:, 2:].astype(np.float64)
        keep = np.where(no_crop[:, None], valid, holds_centers(box, lo, lo + size) & valid)
        mapped = np.clip((box.reshape(n, width, 2, 2) - lo[:, None, None]) / size[:, None, None], 0, 1)
        out = np.where(no_crop[:, None, None], box, mapped.reshape(n, width, 4).astype(np.float32))
        kept_counts = keep.sum(1).tolist()
        sample, index = np.nonzero(keep)
        return [self.crop_images(images, shapes, no_crop, lo, lo + size),
                TensorList.make(list(torch.from_numpy(out[keep]).split(kept_counts)), boxes.layout()),
                self.labels(labels, counts, sample, index, kept_counts)]

    def box_counts(self, boxes):
        """Each sample's number of boxes; an error naming the first sample whose boxes are not
        [boxes, 4], or for boxes that are not floats."""
        try:
            shapes = boxes.sample_shapes()
            bad = np.ones(len(boxes), bool) if shapes.shape[1] != 2 else shapes[:, 1] != 4
        except ValueError:  # the samples differ in their number of dims
            bad = np.array([s.dim() != 2 or s.shape[1] != 4 for s in boxes.as_torch_list()])
        if bad.any():
            i = int(np.argmax(bad))
            raise self.error(f"sample {i}'s boxes have shape {tuple(boxes.sample(i).shape)}; expected [boxes, 4] "
                             "(ltrb)", ValueError, sample=i)
        if not boxes.as_torch_list()[0].is_floating_point():
            raise self.error(f"boxes of type {boxes.sample(0).dtype} are not supported; give float [boxes, 4]",
                             TypeError)
        return shapes[:, 0]

    def find_crops(self, box, valid):
        """(whether each sample is left whole [n], its window [n, 4] as float32 left, top,
        width, height), drawn round after round until every sample has one."""
        n, attempts = len(box), self.spec.args["num_attempts"]
        crops = np.tile(np.array([0, 0, 1, 1], np.float32), (n, 1))  # the whole image where not cropped
        no_crop = ~valid.any(1)  # a window keeps no box of a sample without any: DALI draws until no crop
        left = np.flatnonzero(~no_crop)
        while len(left):
            choice = self.rng.integers(0, NO_CROP + 1, len(left))
            no_crop[left[choice == NO_CROP]] = True
            pending, min_iou = left[choice != NO_CROP], MIN_IOUS[choice[choice != NO_CROP]]
            done, k = 0, FIRST_DRAW
            while len(pending) and done < attempts:
                k = min(attempts - done, k, max(1, WINDOW_BOX_PAIRS // (len(pending) * box.shape[1])))
                drawn = self.draw(len(pending), k)  # [m, k, 4]
                ok = acceptable(drawn, box[pending], valid[pending], min_iou)  # [m, k]
                found = ok.any(1)
                crops[pending[found]] = drawn[found, ok[found].argmax(1)]
                pending, min_iou = pending[~found], min_iou[~found]
                done, k = done + k, 2 * k
            left = pending  # no window in `attempts`: choose again
        return no_crop, crops

    def draw(self, m, k):
        """[m, k, 4] float32 windows (left, top, width, height) as DALI draws them: sides
        uniform in [0.3, 1), anchors uniform where the window fits; a width / height outside
        [0.5, 2] gets NaN (never acceptable)."""
        size = np.float32(0.3) + np.float32(0.7) * self.rng.random((m, k, 2), np.float32)
        anchor = self.rng.random((m, k, 2), np.float32) * (np.float32(1) - size)
        ratio = size[..., 0] / size[..., 1]
        anchor[(ratio < 0.5) | (ratio > 2)] = np.nan
        return np.concatenate([anchor, size], -1)

    def crop_images(self, images, shapes, no_crop, lo, hi):
        """The images cut to the windows [n, 2] (x, y; relative), rounded to whole pixels as
        DALI rounds them (half away from zero); the image itself where it is not cropped."""
        if no_crop.all():
            return images
        extent = shapes[:, 1::-1]  # W, H
        start, end = (np.clip(round_half_away(v * extent), 0, extent) for v in (lo, hi))
        bounds = np.where(no_crop[:, None], np.concatenate([0 * extent, extent], 1),
                          np.concatenate([start, end], 1)).tolist()
        return TensorList.make([cut(img, *b) for img, b in zip(images.as_torch_list(), bounds)], images.layout())


def cut(image, x0, y0, x1, y1):
    """A copy of the image's window (the image itself where that is all of it), by NumPy:
    torch's copy of a small strided window starts its thread pool, which costs more."""
    bits = NUMPY_BITS.get(image.dtype, image.dtype)
    window = np.ascontiguousarray(image.view(bits).numpy()[y0:y1, x0:x1])
    return torch.from_numpy(window).view(image.dtype)


def acceptable(windows, box, valid, min_iou):
    """[m, k] whether each window (left, top, width, height, float32) is taken for its sample:
    the IoU (float32) of every box with it reaches the sample's `min_iou`, and it holds the
    center of at least one box."""
    lo = windows[..., :2].astype(np.float64)
    hi = lo + windows[..., 2:]
    w_lo, w_hi = windows[..., None, :2], hi.astype(np.float32)[..., None, :]  # [m, k, 1, 2]
    b_lo, b_hi = box[:, None, :, :2], box[:, None, :, 2:]  # [m, 1, B, 2]
    inter = intersection(b_lo, b_hi, w_lo, w_hi)
    union = (b_hi - b_lo).prod(-1) + (w_hi - w_lo).prod(-1) - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        below = (inter / union < min_iou[:, None, None]) & valid[:, None]
    centers = holds_centers(box[:, None], lo, hi) & valid[:, None]
    return ~below.any(-1) & centers.any(-1) & ~np.isnan(lo).any(-1)


def holds_centers(box, lo, hi):
    """[..., B] whether each box's center lies in its window (lo, hi: [..., 2] float64), the
    center computed as DALI does (the float32 sum of the ends, halved in float64)."""
    center = 0.5 * (box[..., :2] + box[..., 2:]).astype(np.float64)
    return ((center >= lo[..., None, :]) & (center <= hi[..., None, :])).all(-1)
