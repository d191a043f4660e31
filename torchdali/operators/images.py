"""Batches of 2D images as the image operators take them: HWC (or no layout) and CHW
samples of uint8, float16 or float32. The build-time check (`plan_images`) and the
per-batch one (`image_batch`) say the same things with the same words."""
import numpy as np
import torch

from .. import types
from ..settings import MAX_IMAGE_PIXELS_VARIABLE, max_image_pixels

IMAGE_LAYOUTS = ("HWC", "CHW")
IMAGE_DTYPES = (torch.uint8, torch.float16, torch.float32)
_NOT_2D = "3D volumes and sequences are not supported"


def _layout_error(op, layout):
    return op.error(f"input layout '{layout}' is not supported; give HWC or CHW images ({_NOT_2D})", ValueError)


def _dtype_error(op, dtype, dtypes=IMAGE_DTYPES):
    names = ", ".join(str(d).replace("torch.", "") for d in dtypes[:-1]) + " or " + str(dtypes[-1]).replace("torch.", "")
    return op.error(f"input type {types.to_dali_type(dtype)} is not supported; give {names} images", TypeError)


def plan_images(op, spec, dtypes=IMAGE_DTYPES):
    """Build-time: what is known of an image input must fit (unknown properties pass)."""
    if spec.layout and spec.layout not in IMAGE_LAYOUTS:
        raise _layout_error(op, spec.layout)
    if spec.ndim is not None and spec.ndim != 3:
        raise op.error(f"input samples have {spec.ndim} dims; expected {spec.layout or 'HWC'} images ({_NOT_2D})",
                       ValueError)
    if spec.dtype is not None and spec.dtype not in dtypes:
        raise _dtype_error(op, spec.dtype, dtypes)


class ImageBatch:
    """A batch of images for a kernel: each one's (height, width) and channels as int64 arrays
    [N, 2] and [N], the element type, and the pixels as one dense tensor (`dense`, None when
    the samples differ in shape) or per-sample views (`samples`, made only when asked)."""

    def __init__(self, batch, chw, hw, channels, dtype):
        self.batch = batch
        self.chw = chw
        self.hw = hw
        self.channels = channels
        self.dtype = dtype
        self.dense = batch.dense_tensor()

    def __len__(self):
        return len(self.hw)

    @property
    def samples(self):
        return self.batch.as_torch_list()

    @property
    def pixels(self):
        """What a kernel takes: the dense tensor if there is one, else the samples."""
        return self.dense if self.dense is not None else self.samples

    @property
    def layout(self):
        return "CHW" if self.chw else "HWC"


def image_batch(op, batch, dtypes=IMAGE_DTYPES):
    """The batch as an ImageBatch; errors name the operator and the first sample that is
    not an image of the batch's layout and a supported type (one of `dtypes`; a dense batch
    is checked once)."""
    layout = batch.layout() or "HWC"
    if layout not in IMAGE_LAYOUTS:
        raise _layout_error(op, layout)
    chw = layout == "CHW"
    if not len(batch):
        return ImageBatch(batch, chw, np.zeros((0, 2), np.int64), np.zeros(0, np.int64), None)
    shapes = image_shapes(op, batch, layout)
    dtype = types.to_torch_type(batch.dtype)
    if dtype not in dtypes:
        raise _dtype_error(op, dtype, dtypes)
    return ImageBatch(batch, chw, shapes[:, 1:] if chw else shapes[:, :2], shapes[:, 0] if chw else shapes[:, 2],
                      dtype)


def image_shapes(op, batch, layout="HWC"):
    """The samples' shapes as an int64 array [N, 3]; an error naming the first sample that
    is not a 2D image (of `layout`)."""
    try:
        shapes = batch.sample_shapes()
    except ValueError:  # samples of different ndim
        shapes = np.zeros((len(batch), 0), np.int64)
    if shapes.shape[1] != 3:
        i = next(i for i in range(len(batch)) if batch.sample(i).dim() != 3)
        raise op.error(f"sample {i} has shape {tuple(batch.sample(i).shape)}; expected {layout} images "
                       f"({_NOT_2D})", ValueError, sample=i)
    return shapes


def check_channels(op, images):
    """The images of a batch (an ImageBatch) must have channels, and one number of them."""
    channels = images.channels
    if (channels == 0).any():
        i = int(np.argmax(channels == 0))
        raise op.error(f"sample {i} has no channels; give images with channels", ValueError, sample=i)
    if (channels != channels[0]).any():
        i = int(np.argmax(channels != channels[0]))
        raise op.error(f"sample {i} has {channels[i]} channels, sample 0 has {channels[0]}; give images of one "
                       "number of channels", ValueError, sample=i)


def refuse_huge_outputs(op, extents, arguments):
    """Before anything is allocated: an error if an output sample would have more than
    max_image_pixels() pixels, naming the `arguments` that asked for it. `extents`: [N, k]
    output extents without the channels (height and width of images)."""
    extents = np.asarray(extents, np.float64).reshape(len(extents), -1)
    pixels = extents.prod(axis=1)
    limit = max_image_pixels()
    if (pixels > limit).any():
        i = int(np.argmax(pixels > limit))
        named = ", ".join(f"'{a}'" for a in arguments)
        raise op.error(f"{'argument' if len(arguments) == 1 else 'arguments'} {named} ask for an output of "
                       f"{' x '.join(f'{v:.0f}' for v in extents[i])} pixels for sample {i}, more than the "
                       f"{limit:,} allowed (set {MAX_IMAGE_PIXELS_VARIABLE} to allow more)", ValueError, sample=i)
