"""`dump_image`: a debugging pass-through that writes every image of the batch to a PPM file."""
import numpy as np
import torch

from .. import types
from ..schema import LAYOUT, STR, Arg, register
from .base import BatchSpec, Operator
from .images import image_shapes


def ppm_text(image):
    """An HWC uint8 image (NumPy, 1 or 3 channels) as DALI's ASCII PPM: P3 (colour) or P2 (gray), then
    'width height', 255 and one line per image row, each value followed by a space."""
    h, w, c = image.shape
    rows = image.reshape(h, w * c).tolist()
    body = "".join("".join(f"{v} " for v in row) + "\n" for row in rows)
    return f"{'P3' if c == 3 else 'P2'}\n{w} {h}\n255\n{body}"


@register("dump_image", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("DumpImage",), args=[
    Arg("suffix", STR, "", "Suffix of the file names: sample i is written to '<i>-<suffix>-0.ppm' in the current "
        "directory (overwritten at every iteration)."),
    Arg("input_layout", LAYOUT, "HWC", "Layout of the input images; only HWC is supported."),
])
class DumpImage(Operator):
    """Save each image of the batch (HWC uint8, 1 or 3 channels) to disk as an ASCII PPM/PGM file, for
    debugging, and pass the batch through unchanged."""

    def plan(self, inputs):
        spec = inputs[0]
        if self.spec.args["input_layout"] != "HWC":
            raise self.error(f"argument 'input_layout' is '{self.spec.args['input_layout']}'; only HWC is "
                             "supported", ValueError)
        if spec.ndim is not None and spec.ndim != 3:
            raise self.error(f"input images must have 3 dimensions (HWC), got {spec.ndim}", ValueError)
        if spec.dtype is not None and spec.dtype != torch.uint8:
            raise self.error(f"input type {types.to_dali_type(spec.dtype).name} is not supported; give UINT8 "
                             "images", TypeError)
        return [BatchSpec(spec.device, spec.dtype, spec.ndim, spec.layout)], self.run

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        if not len(batch):
            return [batch]
        self._check(batch)
        for i, image in enumerate(batch.as_torch_list()):
            name = f"{i}-{self.spec.args['suffix']}-0.ppm"
            try:
                with open(name, "w") as f:
                    f.write(ppm_text(image.cpu().numpy()))
            except OSError as e:
                raise self.error(f"cannot write '{name}': {e.strerror}", OSError, sample=i) from None
        return [batch]

    def _check(self, batch):
        if batch.dtype != types.DALIDataType.UINT8:
            raise self.error(f"input type {batch.dtype.name} is not supported; give UINT8 images", TypeError)
        shapes = image_shapes(self, batch, "HWC")
        bad = np.flatnonzero(~np.isin(shapes[:, 2], (1, 3)))
        if len(bad):
            i = int(bad[0])
            raise self.error(f"sample {i} has {shapes[i, 2]} channels; only 1 (gray) and 3 channel images are "
                             "supported", ValueError, sample=i)
        empty = np.flatnonzero(shapes.prod(axis=1) == 0)
        if len(empty):
            i = int(empty[0])
            raise self.error(f"sample {i} is empty {tuple(shapes[i].tolist())}; give images with pixels", ValueError,
                             sample=i)
