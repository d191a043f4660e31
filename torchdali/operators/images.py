"""Batches of 2D images as the image operators take them: HWC (or no layout) and CHW
samples of uint8, float16 or float32 (an operator may take more types), and, for operators
wrapped by `over_frames`, FHWC / FCHW sequences taken frame by frame (FDHWC / FCDHW sequences
of volumes too, where the operator takes volumes). The build-time check (`plan_images`) and
the per-batch one (`image_batch`) say the same things with the same words."""
import dataclasses

import numpy as np
import torch

from .. import types
from ..tensor_list import TensorList
from ..settings import MAX_IMAGE_PIXELS_VARIABLE, max_image_pixels
from .conversions import convert_saturate
from .sequences import run_frames

IMAGE_LAYOUTS = ("HWC", "CHW")
SEQUENCE_LAYOUTS = ("FHWC", "FCHW")
VOLUME_LAYOUTS = ("DHWC", "CDHW")  # volumes: depth, height, width and channels, either way round
VOLUME_SEQUENCE_LAYOUTS = ("FDHWC", "FCDHW")
IMAGE_DTYPES = (torch.uint8, torch.float16, torch.float32)
_NOT_2D = "3D volumes and sequences are not supported"


def _layout_error(op, layout, sequences=False, volumes=False):
    if sequences and volumes:
        accepted = "HWC or CHW images, FHWC or FCHW sequences, DHWC or CDHW volumes, or FDHWC or FCDHW sequences " \
                   "of volumes"
    elif volumes:
        accepted = "HWC or CHW images, or DHWC or CDHW volumes (sequences are not supported)"
    else:
        accepted = f"HWC or CHW images ({_NOT_2D})"
    return op.error(f"input layout '{layout}' is not supported; give {accepted}", ValueError)


def _what(layout):
    """What samples of `layout` are called in messages."""
    if layout in VOLUME_SEQUENCE_LAYOUTS:
        return "sequences of volumes"
    return "sequences" if layout in SEQUENCE_LAYOUTS else "volumes" if layout in VOLUME_LAYOUTS else \
        f"images ({_NOT_2D})"


def dtype_error(op, dtype, dtypes=IMAGE_DTYPES):
    names = [str(d).replace("torch.", "") for d in dtypes]
    names = ", ".join(names[:-1]) + " or " + names[-1]
    return op.error(f"input type {types.to_dali_type(dtype)} is not supported; give {names} images", TypeError)


def plan_images(op, spec, dtypes=IMAGE_DTYPES, sequences=False, volumes=False):
    """Build-time: what is known of an image input must fit (unknown properties pass).
    `sequences`: the operator also takes sequences of images (FHWC, FCHW; see over_frames);
    `volumes`: volumes too (DHWC, CDHW), and with `sequences` sequences of them (FDHWC, FCDHW)."""
    if (sequences and spec.layout in SEQUENCE_LAYOUTS) or (volumes and spec.layout in VOLUME_LAYOUTS) or \
            (sequences and volumes and spec.layout in VOLUME_SEQUENCE_LAYOUTS):
        if spec.ndim is not None and spec.ndim != len(spec.layout):
            raise op.error(f"input samples have {spec.ndim} dims; expected {spec.layout} {_what(spec.layout)}",
                           ValueError)
    else:
        if spec.layout and spec.layout not in IMAGE_LAYOUTS:
            raise _layout_error(op, spec.layout, sequences, volumes)
        if spec.ndim is not None and spec.ndim != 3:
            raise op.error(f"input samples have {spec.ndim} dims; expected {spec.layout or 'HWC'} images "
                           f"({_NOT_2D})", ValueError)
    if spec.dtype is not None and spec.dtype not in dtypes:
        raise dtype_error(op, spec.dtype, dtypes)


class ImageBatch:
    """A batch of images for a kernel: each one's (height, width) and channels as int64 arrays
    [N, 2] and [N], the element type, and the pixels as one dense tensor (`dense`, None when
    the samples differ in shape), one flat buffer and the shapes (`flat`, a tensor [N, 3], where
    the batch is held that way) or per-sample views (`samples`, made only when asked)."""

    def __init__(self, batch, chw, hw, channels, dtype):
        self.batch = batch
        self.chw = chw
        self.hw = hw
        self.channels = channels
        self.dtype = dtype
        self.dense = batch.dense_tensor()
        held = batch.held_flat()
        self.flat = None if held is None else (held[0], torch.from_numpy(np.ascontiguousarray(held[1])))

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


# DALI's other image types, which the kernels (IMAGE_DTYPES) take through float32: exact for
# 16-bit values, as DALI's own float arithmetic is for int32.
WIDENED_DTYPES = (torch.uint16, torch.int16, torch.int32)


def widened(batch):
    """`batch` (a TensorList) with float32 elements, held as it was (dense, flat or samples)."""
    dense = batch.dense_tensor()
    if dense is not None:
        return TensorList.make(dense.float(), batch.layout(), device=batch.device)
    held = batch.held_flat()
    if held is not None:
        return TensorList.from_flat(held[0].float(), held[1], batch.layout(), device=batch.device)
    return TensorList.make([s.float() for s in batch.as_torch_list()], batch.layout(), device=batch.device)


def narrowed(batch, dtype):
    """A kernel's float32 output batch in `dtype`, rounded half away from zero and saturated as
    DALI's ConvertSat does; held as it was."""
    dense = batch.dense_tensor()
    if dense is not None:
        return TensorList.make(convert_saturate(dense, dtype), batch.layout(), device=batch.device)
    held = batch.held_flat()
    if held is not None:
        return TensorList.from_flat(convert_saturate(held[0], dtype), held[1], batch.layout(), device=batch.device)
    return TensorList.make([convert_saturate(s, dtype) for s in batch.as_torch_list()], batch.layout(),
                           device=batch.device)


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
        raise dtype_error(op, dtype, dtypes)
    return ImageBatch(batch, chw, shapes[:, 1:] if chw else shapes[:, :2], shapes[:, 0] if chw else shapes[:, 2],
                      dtype)


@dataclasses.dataclass
class VolumeBatch:
    """A batch of DHWC or CDHW volumes for a kernel: each one's (depth, height, width) and
    channels as int64 arrays [N, 3] and [N], and the element type."""
    batch: TensorList
    channel_first: bool
    dhw: np.ndarray
    channels: np.ndarray
    dtype: torch.dtype

    @property
    def samples(self):
        return self.batch.as_torch_list()


def volume_batch(op, batch, dtypes=IMAGE_DTYPES):
    """The batch (of a VOLUME_LAYOUTS layout) as a VolumeBatch; errors name the operator and the
    first sample that is not a volume of a supported type or whose channels differ from the
    first's."""
    layout = batch.layout()
    shapes = image_shapes(op, batch, layout)
    dtype = types.to_torch_type(batch.dtype)
    if dtype not in dtypes:
        raise dtype_error(op, dtype, dtypes)
    channel_first = layout == "CDHW"
    dhw, channels = (shapes[:, 1:], shapes[:, 0]) if channel_first else (shapes[:, :3], shapes[:, 3])
    if (channels != channels[0]).any():
        i = int(np.argmax(channels != channels[0]))
        raise op.error(f"sample {i} has {channels[i]} channels, sample 0 has {channels[0]}; give volumes of one "
                       "number of channels", ValueError, sample=i)
    return VolumeBatch(batch, channel_first, dhw, channels, dtype)


def image_shapes(op, batch, layout="HWC"):
    """The samples' shapes as an int64 array [N, len(layout)]; an error naming the first
    sample that is not a 2D image (or a sequence of them) of `layout`."""
    ndim = len(layout)
    try:
        shapes = batch.sample_shapes()
    except ValueError:  # samples of different ndim
        shapes = np.zeros((len(batch), 0), np.int64)
    if shapes.shape[1] != ndim:
        i = next(i for i in range(len(batch)) if batch.sample(i).dim() != ndim)
        raise op.error(f"sample {i} has shape {tuple(batch.sample(i).shape)}; expected {layout} {_what(layout)}",
                       ValueError, sample=i)
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


def image_ndim(spec):
    """The ndim of an image operator's output for input `spec`: 4 for sequences and volumes,
    5 for sequences of volumes, else 3."""
    if spec.layout in VOLUME_SEQUENCE_LAYOUTS:
        return 5
    return 4 if spec.layout in SEQUENCE_LAYOUTS + VOLUME_LAYOUTS else 3


def over_frames(op, run):
    """An image operator's `run(inputs, args, ctx)` made to take sequences (FHWC, FCHW, and
    FDHWC, FCDHW where plan_images let them through) too, as DALI's operators do: every frame
    is an image (or volume) with its sample's arguments (the arguments' rows repeated per
    frame, or a row per frame where fn.per_frame marked them; the same for further inputs that
    are sequences), one call for all the batch's frames (`ctx.frames`: each sequence's count),
    and each sample's outputs regrouped into a sequence."""
    def run_sequences(inputs, args, ctx):
        batch = inputs[0]
        if batch.layout() not in SEQUENCE_LAYOUTS + VOLUME_SEQUENCE_LAYOUTS or not len(batch):
            return run(inputs, args.without_frames(), ctx)
        shapes = image_shapes(op, batch, batch.layout())
        frames = shapes[:, 0]
        if (frames == 0).any():
            i = int(np.argmax(frames == 0))
            raise op.error(f"sample {i} is a sequence of no frames {tuple(shapes[i].tolist())}", ValueError, sample=i)
        return run_frames(op, run, inputs, args, ctx, frames)

    return run_sequences
