"""`torchdali::lz4_decompress`: LZ4 blocks decoded in one call for a batch (a chunk per CPU
task, or per GPU warp). Its Python face and, beside it, the fake kernel that lets
`torch.compile` trace it."""
import torch

from . import load_extension, register_fake

load_extension()

__all__ = ["lz4_decompress", "DECODED", "PROBLEMS"]

DECODED = 0  # lz4_decompress' status of a chunk it decoded
PROBLEMS = {
    1: "its LZ4 data is truncated (it ends inside a sequence)",
    2: "its LZ4 data is corrupt (a match offset of 0, or one reaching before the start of the output)",
    3: "its LZ4 data expands to more bytes than the output holds",
}
"""lz4_decompress' other status codes -> what they say of a chunk."""


def lz4_decompress(data: torch.Tensor, chunks: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Decodes LZ4 blocks (block format, no frame header) from `data` (1-D uint8) into `out`
    (1-D uint8 on data's device): chunks[k] = (in_offset, in_size, out_offset, out_size) (int64
    [K, 4] on the CPU) decodes data[in_offset:in_offset + in_size] into
    out[out_offset:out_offset + out_size], zeroing what the block leaves of it. Returns int32 [K]
    on data's device: DECODED, or a code of PROBLEMS. Malformed blocks never write outside their
    chunk's output."""
    return torch.ops.torchdali.lz4_decompress.default(data, chunks, out)


@register_fake("torchdali::lz4_decompress")
def _lz4_decompress_fake(data, chunks, out):
    torch._check_value(chunks.dim() == 2 and chunks.shape[1] == 4, lambda: (
        "lz4_decompress: `chunks` must be an int64 CPU tensor [K, 4] (in_offset, in_size, out_offset, out_size)"))
    return torch.empty(chunks.shape[0], dtype=torch.int32, device=data.device)
