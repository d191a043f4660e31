"""`jitter`: DALI's random pixel displacement. Every component of every pixel is read from a
position moved by a random integer offset in x and in y (each in [-(nDegree // 2),
nDegree - nDegree // 2], as DALI's GPU operator draws them), clamped to the image. The
offsets are drawn with a torch generator on the batch's device for a whole run of samples
at once, and applied with one gather (torch.take) over the batch's samples laid back to
back: a copy torch already does at full bandwidth, dense or ragged alike."""
import numpy as np
import torch

from ..schema import FLOAT, INT, INTERP_TYPE, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator
from .images import image_shapes


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

    def plan(self, inputs):
        spec = inputs[0]
        if spec.layout not in (None, "", "HWC"):
            raise self._layout_error(spec.layout)
        if spec.ndim not in (None, 3):
            raise self.error(f"input samples have {spec.ndim} dims; expected HWC images", ValueError)
        return [BatchSpec(spec.device, spec.dtype, 3, "HWC")], self.step

    def _layout_error(self, layout):
        return self.error(f"input layout '{layout}' is not supported; give HWC images", ValueError)

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        if batch.layout() not in ("", "HWC"):
            raise self._layout_error(batch.layout())
        if not len(batch):
            return [batch]
        image_shapes(self, batch)  # HWC images, or an error naming the sample
        flat, shapes = batch.flat()
        mask = np.broadcast_to(np.asarray(args.batch("mask")) != 0, (len(batch),))
        out = self._displace(flat, shapes, mask, args["nDegree"])
        return [TensorList.from_flat(out, shapes, "HWC", device=batch.device)]

    # Components gathered per torch.take: bounds the index arrays' memory (~10 int64 arrays).
    _RUN = 1 << 20

    def _displace(self, flat, shapes, mask, n_degree):
        """The samples laid back to back in `flat` (HWC, sizes `shapes`), each component read
        at offsets in [lo, lo + n_degree] in y and x (none where `mask` is off), clamped to
        its own image: one gather for each run of whole samples."""
        out = torch.empty_like(flat)
        device, gen = flat.device, self._gen(flat.device)
        lo = -(n_degree // 2)
        sizes = shapes.prod(axis=1)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        first = 0
        while first < len(sizes):
            last = max(first + 1, int(np.searchsorted(starts, starts[first] + self._RUN, "right")) - 1)
            begin, end = int(starts[first]), int(starts[last])
            rows = slice(first, last)

            def per_component(values):  # a per-sample value repeated over its components
                return torch.from_numpy(np.repeat(values[rows], sizes[rows])).to(device)

            if end == begin:  # empty images only
                first = last
                continue
            h, w, c = (per_component(shapes[:, k]) for k in range(3))
            origin = per_component(starts[:-1])
            local = torch.arange(begin, end, device=device) - origin
            moves = per_component(mask.astype(np.int64))
            dy, dx = (torch.randint(lo, lo + n_degree + 1, (end - begin,), generator=gen, device=device) * moves
                      for _ in range(2))
            y = torch.minimum((local // (w * c) + dy).clamp_(min=0), h - 1)
            x = torch.minimum((local // c % w + dx).clamp_(min=0), w - 1)
            torch.take(flat, origin + (y * w + x) * c + local % c, out=out[begin:end])
            first = last
        return out
