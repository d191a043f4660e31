"""Segmentation operators (`segmentation.*`): random choices within masks, for crops centred
on an object."""
import numpy as np
import torch

from ..schema import FLOAT, INT, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, RandomOperator


@register("segmentation.random_mask_pixel", inputs=(1, 1), args=[
    Arg("foreground", INT, 0, "Nonzero: a foreground pixel (any pixel where the mask has none); 0: any "
        "pixel.", per_sample=True),
    Arg("threshold", FLOAT, 0.0, "Foreground: values above this (unless `value` is given).", per_sample=True),
    Arg("value", INT, None, "Foreground: values equal to this (integer masks); takes the place of "
        "`threshold`.", per_sample=True),
])
class RandomMaskPixel(RandomOperator):
    """The coordinates (int64, one per dimension of the mask, channels included) of a pixel
    drawn uniformly from each mask's foreground or from the whole mask. The batch's masks
    are searched as one array: a cumulative count of the candidates, then one search."""

    def plan(self, inputs):
        return [BatchSpec("cpu", torch.int64, 1, "")], self.step

    def step(self, inputs, args, ctx):
        masks = inputs[0].as_torch_list()
        n = len(masks)
        if n == 0:
            return [TensorList.make([], device="cpu")]
        ndim = self.check_rank(masks)
        sizes = np.array([m.numel() for m in masks])
        if (sizes == 0).any():
            i = int(np.argmax(sizes == 0))
            raise self.error(f"sample {i} is empty {tuple(masks[i].shape)}: there is no pixel to choose",
                             ValueError, sample=i)
        flat = torch.cat([m.reshape(-1) for m in masks])
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])

        def per_element(values):  # a value per sample, repeated over its elements
            return torch.from_numpy(np.repeat(values, sizes))

        if args.batch("value") is not None:
            found = flat == per_element(np.broadcast_to(np.asarray(args.batch("value"), np.int64), (n,)))
        else:
            found = flat.double() > per_element(np.broadcast_to(np.asarray(args.batch("threshold"), np.float64), (n,)))
        found_counts = np.add.reduceat(found.numpy().astype(np.int64), starts)
        wanted = np.broadcast_to(np.asarray(args.batch("foreground")), (n,)) != 0
        use_found = wanted & (found_counts > 0)
        candidates = torch.where(per_element(use_found), found, True)
        counts = np.where(use_found, found_counts, sizes)
        ranks = self.rng.integers(0, counts)  # the chosen candidate of each sample
        before = np.concatenate([[0], np.cumsum(counts)[:-1]])
        running = torch.cumsum(candidates, 0).numpy()
        index = np.searchsorted(running, before + ranks + 1) - starts  # within each sample
        shapes = np.array([m.shape for m in masks], np.int64).reshape(n, ndim)
        strides = np.concatenate([np.cumprod(shapes[:, :0:-1], 1)[:, ::-1], np.ones((n, 1), np.int64)], 1)
        coords = (index[:, None] // strides) % shapes
        return [TensorList.make(torch.from_numpy(coords.astype(np.int64)), device="cpu")]
