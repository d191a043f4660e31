"""Crop windows planned apart from the crop (their anchors and shapes go to `slice` or a
decoder's crop): roi_random_crop, a fixed-size window placed at random around a region of
interest, and random_crop_generator, a window of random area and aspect ratio as
random_resized_crop draws it. Both draw the whole batch at once."""
import numpy as np
import torch

from ..schema import INTS, REQUIRED, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, RandomOperator, shapes_or_none
from .resize import RandomResizedCrop, pair
from .windows import random_crop_windows


@register("roi_random_crop", inputs=(0, 1), aliases=("ROIRandomCrop",), args=[
    Arg("crop_shape", INTS, REQUIRED, "The window's shape; its length is the number of dims.", per_sample=True),
    Arg("roi_start", INTS, REQUIRED, "Where the region of interest starts (one value: in every dim).",
        per_sample=True),
    Arg("roi_end", INTS, None, "Where the region ends (one past it); or give `roi_shape`.", per_sample=True),
    Arg("roi_shape", INTS, None, "The region's shape; or give `roi_end`.", per_sample=True),
    Arg("in_shape", INTS, None, "The shape of the data to crop: the window stays inside it (not with an "
        "input, whose shape serves instead).", per_sample=True),
])
class ROIRandomCrop(RandomOperator):
    """The anchor (int64) of a `crop_shape` window drawn uniformly among the positions where it
    holds the whole region of interest (a window smaller than the region: where the region
    holds it), and, given the data's shape (`in_shape` or the input's), inside the data."""

    def plan(self, inputs):
        given = {name for name in ("roi_end", "roi_shape", "in_shape")
                 if self.spec.args.get(name) is not None or name in self.spec.arg_input_names}
        if len(given & {"roi_end", "roi_shape"}) != 1:
            raise self.error("give the region's end as `roi_end` or `roi_shape`, one of them", ValueError)
        if "in_shape" in given and inputs:
            raise self.error("`in_shape` cannot be given with an input (its shape is the input's)", ValueError)
        self.end_arg = "roi_end" if "roi_end" in given else "roi_shape"
        return [BatchSpec("cpu", torch.int64, 1, "")], self.step

    def step(self, inputs, args, ctx):
        n = len(inputs[0]) if inputs else ctx.batch_size
        crop = args.rows("crop_shape", n).astype(np.int64)
        ndim = crop.shape[1]
        start = self.rows(args, "roi_start", n, ndim)
        end = self.rows(args, self.end_arg, n, ndim)
        if self.end_arg == "roi_shape":
            end = start + end
        lo, hi = np.minimum(start, end - crop), np.maximum(start, end - crop)
        bounds = self.data_shapes(inputs, args, n, ndim)
        if bounds is not None:
            self.check_bounds(bounds, crop, start, end)
            lo, hi = np.maximum(lo, 0), np.minimum(hi, bounds - crop)
        return [TensorList.make(torch.from_numpy(self.rng.integers(lo, hi + 1).astype(np.int64)))]

    def rows(self, args, name, n, ndim):
        """Argument `name` as [n, ndim] int64 (one value stands for every dim)."""
        v = args.rows(name, n)
        if v.shape[1] not in (1, ndim):
            raise self.error(f"argument '{name}' has {v.shape[1]} values; `crop_shape` has {ndim}", ValueError)
        return np.broadcast_to(v, (n, ndim)).astype(np.int64)

    def data_shapes(self, inputs, args, n, ndim):
        """The shapes [n, ndim] the windows must stay in, or None where not known."""
        if inputs:
            shapes = inputs[0].sample_shapes() if n else np.zeros((0, ndim), np.int64)
            if shapes.shape[1] < ndim:
                raise self.error(f"the input has {shapes.shape[1]} dims; `crop_shape` has {ndim}", ValueError)
            return shapes[:, :ndim]
        if args.batch("in_shape") is None:
            return None
        return self.rows(args, "in_shape", n, ndim)

    def check_bounds(self, shape, crop, start, end):
        """Errors for a window larger than the data, or a region outside it."""
        for problem, bad in (("the shape must not be negative", shape < 0),
                             ("`crop_shape` must not be negative", crop < 0),
                             ("`crop_shape` must fit in the shape", crop > shape),
                             ("the region of interest must lie in the shape", (start < 0) | (end > shape))):
            if bad.any():
                i, d = (int(v[0]) for v in np.nonzero(bad))
                raise self.error(f"sample {i}, dim {d}: {problem} (shape {shape[i].tolist()}, crop_shape "
                                 f"{crop[i].tolist()}, region [{start[i].tolist()}, {end[i].tolist()}))",
                                 ValueError, sample=i)


@register("random_crop_generator", inputs=(1, 1), outputs=2,
          args=[RandomResizedCrop.schema.args[n] for n in ("random_area", "random_aspect_ratio", "num_attempts")])
class RandomCropGenerator(RandomOperator):
    """The anchor (y, x) and shape (h, w) of a random window (int32 each) for images whose
    shapes (HW or HWC, integers) are the input: its area a random part of the image's in
    `random_area`, its aspect ratio (width / height) drawn log-uniformly in
    `random_aspect_ratio`, as random_resized_crop draws it; an empty window for an empty
    image."""

    def plan(self, inputs):
        vec = BatchSpec("cpu", torch.int32, 1, "")
        return [vec, vec], self.step

    def step(self, inputs, args, ctx):
        hw = self.image_sizes(inputs[0])
        empty = (hw <= 0).any(1)
        windows = random_crop_windows(self.rng, np.where(empty[:, None], 1, hw), pair(args["random_area"]),
                                      pair(args["random_aspect_ratio"]), args["num_attempts"])
        windows[empty] = 0
        windows = torch.from_numpy(windows.astype(np.int32))
        return [TensorList.make(windows[:, :2].contiguous()), TensorList.make(windows[:, 2:].contiguous())]

    def image_sizes(self, batch):
        """The images' (height, width) [N, 2] from the shape input: one test over the batch's
        shapes, and sample by sample only to name one that is not 2 or 3 integers."""
        if not len(batch):
            return np.zeros((0, 2), np.int64)
        shapes = shapes_or_none(batch)
        dtype = batch.sample(0).dtype
        if shapes is None or shapes.shape[1] != 1 or not np.isin(shapes[:, 0], (2, 3)).all() or \
                dtype.is_floating_point or dtype == torch.bool:
            i, t = next((i, t) for i, t in enumerate(batch.as_torch_list())
                        if t.dim() != 1 or len(t) not in (2, 3) or t.dtype.is_floating_point or t.dtype == torch.bool)
            raise self.error(f"sample {i} is {tuple(t.shape)} {t.dtype}; expected the image's shape: 2 or 3 "
                             "integers (HW or HWC)", ValueError, sample=i)
        flat = batch.flat()[0].to(torch.int64).numpy()
        first = np.cumsum(shapes[:, 0]) - shapes[:, 0]
        return np.stack([flat[first], flat[first + 1]], 1)
