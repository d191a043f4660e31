"""`jitter`: DALI's random pixel displacement. Every component of every pixel is read from a
position moved by a random integer offset in x and in y (each in [-(nDegree // 2),
nDegree - nDegree // 2], as DALI's GPU operator draws them), clamped to the image. The
offsets are drawn with a torch generator on the batch's device and applied with one
gather per sample (torch.take): a copy torch already does at full bandwidth."""
import torch

from ..schema import FLOAT, INT, INTERP_TYPE, Arg, register
from ..tensor_list import TensorList
from .base import Operator


@register("jitter", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("Jitter",), args=[
    Arg("nDegree", INT, 2, "Each pixel moves by a random amount in [-nDegree/2, nDegree/2] "
        "in x and in y.", check=lambda v: None if v > 0 else "must be positive"),
    Arg("mask", INT, 1, "Jitter the sample where nonzero; copy it unchanged where 0.",
        per_sample=True),
    Arg("fill_value", FLOAT, 0.0, "Accepted for compatibility: displaced positions are "
        "clamped to the image, as in DALI, so nothing is filled."),
    Arg("interp_type", INTERP_TYPE, None, "Accepted for compatibility: offsets are whole "
        "pixels, so every interpolation gives the nearest pixel."),
])
class Jitter(Operator):
    """Move each pixel of HWC images by a random amount (a noise augmentation). Deterministic
    for a seed; the numbers are not DALI's, and differ between 'cpu' and 'gpu'."""

    def __init__(self, spec):
        super().__init__(spec)
        self._generator = None  # made on the batch's device on first use
        self._pending_state = None

    def _gen(self, device):
        if self._generator is None or self._generator.device != device:
            self._generator = torch.Generator(device=device)
            self._generator.manual_seed(self.spec.seed)
            if self._pending_state is not None:
                self._restore()
        return self._generator

    def state_dict(self):
        """The generator's state as a list of bytes (checkpoints are JSON)."""
        if self._generator is None:
            return {"rng": self._pending_state}
        return {"rng": self._generator.get_state().tolist()}

    def load_state_dict(self, state):
        self._pending_state = state["rng"]
        if self._generator is not None and self._pending_state is not None:
            self._restore()

    def _restore(self):
        self._generator.set_state(torch.tensor(self._pending_state, dtype=torch.uint8))
        self._pending_state = None

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        if batch.layout() not in ("", "HWC"):
            raise self.error(f"input layout '{batch.layout()}' is not supported; give HWC images",
                             ValueError)
        images = batch.as_torch_list()
        for i, im in enumerate(images):
            if im.dim() != 3:
                raise self.error(f"sample {i} has shape {tuple(im.shape)}; expected HWC images",
                                 ValueError)
        n_degree = args["nDegree"]
        lo = -(n_degree // 2)
        # A dense batch is written into one dense output (no stacking copy).
        dense = batch.as_torch() if batch.is_dense_tensor() and images else None
        outs = torch.empty_like(dense) if dense is not None else [torch.empty_like(im) for im in images]
        for i, im in enumerate(images):
            if int(args.sample("mask", i)):
                self._displace(im, lo, lo + n_degree, outs[i])
            else:
                outs[i].copy_(im)
        return [TensorList.make(outs, "HWC", device=batch.device)]

    def _displace(self, im, lo, hi, out):
        """Write im (H, W, C) sampled at per-component offsets in [lo, hi], clamped to the
        image, into `out`."""
        h, w, c = im.shape
        if im.numel() == 0:
            return
        gen = self._gen(im.device)
        dy = torch.randint(lo, hi + 1, (h, w, c), generator=gen, device=im.device)
        dx = torch.randint(lo, hi + 1, (h, w, c), generator=gen, device=im.device)
        ys = (torch.arange(h, device=im.device).view(h, 1, 1) + dy).clamp_(0, h - 1)
        xs = (torch.arange(w, device=im.device).view(1, w, 1) + dx).clamp_(0, w - 1)
        index = (ys * w + xs) * c + torch.arange(c, device=im.device)
        torch.take(im.contiguous(), index, out=out)
