"""`torchdali::decode_jpegs`: our GPU JPEG decoder (csrc/nvjpeg/), built where nvJPEG was
found: the hardware decoder takes its share of a batch, the hybrid path (Huffman on the
intra-op threads, IDCT on the GPU) the rest, each image decoded only within its window.
Its Python face and, beside it, the fake kernel that lets `torch.compile` trace it."""
from typing import List, Tuple, Union

import torch

from . import load_extension
from .io import EncodedFiles

load_extension()

__all__ = ["available", "decode_jpegs", "has_hardware_decoder", "BY_HARDWARE", "BY_HYBRID", "DECODERS"]

BY_HARDWARE, BY_HYBRID = -1, 0  # decode_jpegs' status of an image each path decoded
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


def has_hardware_decoder(device: torch.device) -> bool:
    """Whether `device` has the hardware JPEG decoder (NVJPG: A100, H100, H200 ...)."""
    return torch.ops.torchdali.jpeg_hardware_decoder.default(torch.device(device))


@torch.library.register_fake("torchdali::decode_jpegs")
def _decode_jpegs_fake(data, spans, windows, hw_load, device):
    torch._check_value(windows.dim() == 2 and windows.shape[1] == 4 and windows.shape[0] == spans.shape[0],
                       lambda: "decode_jpegs: `windows` must be [N, 4] (y, x, h, w), one row per image")
    ctx = torch.library.get_ctx()
    return (torch.empty(ctx.new_dynamic_size(), dtype=torch.uint8, device=device),
            torch.empty(spans.shape[0], dtype=torch.int32))
