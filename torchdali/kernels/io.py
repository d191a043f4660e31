"""`torchdali::read_files`: its Python face and, beside it, the fake kernel that lets
`torch.compile` trace it."""
from typing import List

import torch

from . import load_extension

load_extension()

__all__ = ["read_files"]


def read_files(paths: List[str]) -> List[torch.Tensor]:
    """The whole contents of each file of `paths`, as 1-D uint8 tensors in order, read in
    parallel on the intra-op threads without the GIL. A file that cannot be read raises a
    RuntimeError naming it and the reason."""
    return torch.ops.torchdali.read_files.default(list(paths))


@torch.library.register_fake("torchdali::read_files")
def _read_files_fake(paths):
    ctx = torch.library.get_ctx()
    return [torch.empty(ctx.new_dynamic_size(), dtype=torch.uint8) for _ in paths]
