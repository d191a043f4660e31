"""`torchdali::decode_jpegs_cpu`: our CPU JPEG decoder (csrc/libjpeg/), built where
libjpeg-turbo was found: a batch decoded on torchdali's CPU threads without the GIL, each
image only within its window, into one buffer. Its Python face and, beside it, the fake
kernel that lets `torch.compile` trace it."""
from typing import List, Optional, Tuple, Union

import torch

from . import load_extension, register_fake
from .io import EncodedFiles

load_extension()

__all__ = ["available", "decode_jpegs", "window_bytes", "DECODED", "DECODERS"]

DECODED = 0  # decode_jpegs' status of an image it decoded; see decode_jpegs for the others
DECODERS = {"CPU JPEG batch decoder (libjpeg-turbo)": DECODED}
"""The decoder's name (as the pipeline's statistics give it) -> its status code."""


def available() -> bool:
    """Whether the extension was built with the CPU JPEG decoder (libjpeg-turbo found at build)."""
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key("torchdali::decode_jpegs_cpu", "CPU")
    except RuntimeError:  # an extension built before the op was declared
        return False


def decode_jpegs(files: Union[EncodedFiles, List[torch.Tensor]], windows: torch.Tensor, fast_idct: bool = False,
                 threads: int = 0, out: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """JPEGs (EncodedFiles, or a list of 1-D uint8 CPU tensors) decoded, image i only within windows[i] = (y, x, h, w)
    (int64 [N, 4]), to interleaved RGB uint8. Returns (flat, status): image i's window as a
    contiguous [h, w, 3] after the windows of the images before it (in `out`, 1-D uint8 of
    window_bytes(windows), where given), and int32 [N] status: DECODED, or 1 (a colour
    space with no conversion to RGB: CMYK, YCCK), 2 (corrupt or truncated) or 3 (the window
    reaches outside the image), where that part of `flat` is not written. `fast_idct`:
    libjpeg's fast integer IDCT, a little less accurate. `threads`: at most this many of
    torchdali's CPU threads decode (0: all of them)."""
    files = EncodedFiles.of(files)
    if out is None:
        out = torch.empty(window_bytes(windows), dtype=torch.uint8)
    return out, torch.ops.torchdali.decode_jpegs_cpu.default(files.data, files.spans, windows, bool(fast_idct),
                                                             int(threads), out)


def window_bytes(windows: torch.Tensor) -> int:
    """The bytes of RGB uint8 images of windows (y, x, h, w) [N, 4]."""
    return int((windows[:, 2] * windows[:, 3]).sum()) * 3


@register_fake("torchdali::decode_jpegs_cpu")
def _decode_jpegs_cpu_fake(data, spans, windows, fast_idct, threads, out):
    torch._check_value(windows.dim() == 2 and windows.shape[1] == 4 and windows.shape[0] == spans.shape[0],
                       lambda: "decode_jpegs_cpu: `windows` must be [N, 4] (y, x, h, w), one row per image")
    return torch.empty(spans.shape[0], dtype=torch.int32)
