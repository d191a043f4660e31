"""`torchdali::read_files` and `torchdali::jpeg_headers`: their Python faces and, beside
them, the fake kernels that let `torch.compile` trace them."""
from typing import List

import torch

from . import load_extension

load_extension()

__all__ = ["read_files", "jpeg_headers", "JPEG_FIELDS"]

JPEG_FIELDS = ("is_jpeg", "complete", "orientation", "subsampled", "height", "width")
"""The columns of jpeg_headers' rows."""


def read_files(paths: List[str]) -> List[torch.Tensor]:
    """The whole contents of each file of `paths`, as 1-D uint8 tensors in order, read in
    parallel on the intra-op threads without the GIL. A file that cannot be read raises a
    RuntimeError naming it and the reason."""
    return torch.ops.torchdali.read_files.default(list(paths))


@torch.library.register_fake("torchdali::read_files")
def _read_files_fake(paths):
    ctx = torch.library.get_ctx()
    return [torch.empty(ctx.new_dynamic_size(), dtype=torch.uint8) for _ in paths]


def jpeg_headers(data: List[torch.Tensor]) -> torch.Tensor:
    """One int64 row per encoded file (1-D uint8 CPU tensor) of JPEG_FIELDS: is it a JPEG,
    does it end with its EOI marker (truncated files don't), its EXIF orientation (1-8), is
    its chroma subsampled, its height and width; defaults (1, 1, 0, 0) where the header
    does not tell. Parsed in C++ on the intra-op threads without the GIL."""
    if not data:
        return torch.zeros((0, len(JPEG_FIELDS)), dtype=torch.int64)
    return torch.ops.torchdali.jpeg_headers.default(list(data))


@torch.library.register_fake("torchdali::jpeg_headers")
def _jpeg_headers_fake(data):
    return torch.empty((len(data), len(JPEG_FIELDS)), dtype=torch.int64)
