"""`torchdali::decode_jpegs`: our GPU JPEG decoder (csrc/nvjpeg/), built where nvJPEG was
found: the hardware decoder takes its share of a batch, the hybrid path (Huffman on the
torchdali's CPU threads, IDCT on the GPU) the rest, each image decoded only within its window.
Its Python face and, beside it, the fake kernel that lets `torch.compile` trace it."""
from typing import List, Tuple, Union

import torch

from . import load_extension, register_fake
from .io import EncodedFiles

load_extension()

__all__ = ["available", "decode_jpegs", "decode_jpegs_start", "decode_jpegs_finish", "has_hardware_decoder",
           "BY_HARDWARE", "BY_HYBRID", "PENDING", "DECODERS"]

BY_HARDWARE, BY_HYBRID = -1, 0  # decode_jpegs' status of an image each path decoded
PENDING = -2  # decode_jpegs_start's status of an image the hardware decoder has yet to decode
DECODERS = {"nvJPEG hardware decoder": BY_HARDWARE, "nvJPEG hybrid path": BY_HYBRID}
"""Each path's name (as the pipeline's statistics give it) -> its status code."""


def available() -> bool:
    """Whether the extension was built with the GPU JPEG decoder (nvJPEG found at build)."""
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key("torchdali::decode_jpegs", "CPU")
    except RuntimeError:  # an extension built before the op was declared
        return False


def decode_jpegs(files: Union[EncodedFiles, List[torch.Tensor]], windows: torch.Tensor, hw_load: float,
                 device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """JPEGs (EncodedFiles, or a list of 1-D uint8 CPU tensors) decoded on `device`, image i only within windows[i] =
    (y, x, h, w) (int64 [N, 4]), to interleaved RGB uint8 on the current stream. Returns
    (flat, status): image i's window as a contiguous [h, w, 3] after the windows of the
    images before it, and int32 [N] status: BY_HARDWARE or BY_HYBRID where decoded, else
    nvJPEG's (positive) status code (that part of `flat` is not written). `hw_load`: the
    hardware decoder's fraction."""
    files = EncodedFiles.of(files)
    return torch.ops.torchdali.decode_jpegs.default(files.data, files.spans, windows, float(hw_load),
                                                    torch.device(device))


def decode_jpegs_start(files: Union[EncodedFiles, List[torch.Tensor]], windows: torch.Tensor, hw_load: float,
                       device: torch.device):
    """decode_jpegs in two halves, so that the caller can go on while the hardware decoder
    works: returns (flat, status, pending) once the hardware decoder has its share (status
    PENDING; its call holds a thread of ours until the engines finish) and the hybrid path
    has decoded the rest. `flat` is complete only after decode_jpegs_finish(pending)."""
    files = EncodedFiles.of(files)
    return torch.ops.torchdali.decode_jpegs_start.default(files.data, files.spans, windows, float(hw_load),
                                                          torch.device(device))


def decode_jpegs_finish(pending) -> torch.Tensor:
    """The final status of a batch decode_jpegs_start began (as decode_jpegs returns it):
    waits on the host for the hardware decoder's share (its images go through the hybrid
    path if the decoder failed) and makes the current stream wait for the GPU's part."""
    return torch.ops.torchdali.decode_jpegs_finish.default(pending)


def has_hardware_decoder(device: torch.device) -> bool:
    """Whether `device` has the hardware JPEG decoder (NVJPG: A100, H100, H200 ...)."""
    return torch.ops.torchdali.jpeg_hardware_decoder.default(torch.device(device))


@register_fake("torchdali::decode_jpegs")
def _decode_jpegs_fake(data, spans, windows, hw_load, device):
    torch._check_value(windows.dim() == 2 and windows.shape[1] == 4 and windows.shape[0] == spans.shape[0],
                       lambda: "decode_jpegs: `windows` must be [N, 4] (y, x, h, w), one row per image")
    ctx = torch.library.get_ctx()
    return (torch.empty(ctx.new_dynamic_size(), dtype=torch.uint8, device=device),
            torch.empty(spans.shape[0], dtype=torch.int32))
