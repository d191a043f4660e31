"""`torchdali::tfrecord_parse`: the features of a batch of TFRecord records of
tf.train.Example messages, parsed in C++ in one call. Its Python face and, beside it, the fake
kernel that lets `torch.compile` trace it."""
from typing import List, Sequence, Tuple

import torch

from ..tfrecord import float32, int64, string
from . import load_extension, register_fake

load_extension()

__all__ = ["tfrecord_parse", "PARSED", "BAD_FRAMING", "MALFORMED"]

PARSED, BAD_FRAMING, MALFORMED = 0, 1, 2  # tfrecord_parse's status of a record
_TORCH_DTYPES = {int64: torch.int64, string: torch.uint8, float32: torch.float32}


def tfrecord_parse(data: Sequence[torch.Tensor], spans: torch.Tensor, names: Sequence[str],
                   dtypes: Sequence[int]) -> Tuple[List[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Features `names` of the records data[b][offset:offset + size] for (b, offset, size) in
    `spans` (1-D uint8 CPU tensors, int64 [N, 3]; a record with its framing, whose CRCs are
    not checked), read as `dtypes` (torchdali.tfrecord's int64, string: the first value's
    bytes, float32). Returns (values, counts, status): values[k] the records' values of
    feature k back to back, counts int64 [N, K] their number per record (-1: the record
    lacks the feature), status int32 [N] PARSED, BAD_FRAMING (the length does not fit the
    span) or MALFORMED (not a valid Example; the Python parser of readers.tfrecord says
    why). Parsed on torchdali's CPU threads without the GIL."""
    return torch.ops.torchdali.tfrecord_parse.default(list(data), spans, list(names), list(dtypes))


@register_fake("torchdali::tfrecord_parse")
def _tfrecord_parse_fake(data, spans, names, dtypes):
    torch._check_value(len(names) == len(dtypes), lambda: (
        f"tfrecord_parse: got {len(names)} names and {len(dtypes)} dtypes"))
    torch._check_value(all(d in _TORCH_DTYPES for d in dtypes), lambda: (
        f"tfrecord_parse: invalid dtype codes {list(dtypes)} (0: int64, 1: string, 2: float32)"))
    torch._check_value(spans.dim() == 2 and spans.shape[1] == 3, lambda: (
        "tfrecord_parse: `spans` must be an int64 CPU tensor [N, 3] (buffer, offset, size)"))
    ctx = torch.library.get_ctx()
    values = [torch.empty(ctx.new_dynamic_size(), dtype=_TORCH_DTYPES[d]) for d in dtypes]
    n = spans.shape[0]
    return values, torch.empty((n, len(names)), dtype=torch.int64), torch.empty(n, dtype=torch.int32)
