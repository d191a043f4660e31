"""`torchdali::read_files`, `read_ranges` and `jpeg_headers`: their Python faces and, beside
them, the fake kernels that let `torch.compile` trace them."""
import contextlib
import os
from typing import List, Sequence, Union

import numpy as np
import torch

from . import load_extension, register_fake

load_extension()

__all__ = ["EncodedFiles", "read_files", "read_ranges", "jpeg_headers", "JPEG_FIELDS"]

JPEG_FIELDS = ("is_jpeg", "complete", "orientation", "subsampled", "height", "width")
"""The columns of jpeg_headers' rows."""


class EncodedFiles:
    """A batch of encoded files as the decoding ops take it: one 1-D uint8 CPU buffer
    `data` and the files' `spans` in it, int64 [N, 2] (offset, size). One tensor for the
    batch, not one per file: an op that drops its references to many Python-visible
    tensors retakes the GIL for each, which stalls it behind the other Python threads."""

    def __init__(self, data: torch.Tensor, spans: torch.Tensor):
        self.data, self.spans = data, spans

    @staticmethod
    def back_to_back(data: torch.Tensor, sizes) -> "EncodedFiles":
        """Files of `sizes` bytes (a tensor, an array or a list) laid back to back in `data`.
        The spans are computed in NumPy: torch's calls would each hand the GIL over."""
        sizes = np.asarray(sizes.numpy() if isinstance(sizes, torch.Tensor) else sizes, np.int64).reshape(-1)
        spans = np.empty((len(sizes), 2), np.int64)
        spans[:, 1] = sizes
        np.cumsum(sizes, out=spans[:, 0])
        spans[:, 0] -= sizes
        return EncodedFiles(data, torch.from_numpy(spans))

    @staticmethod
    def of(files: Union["EncodedFiles", List[torch.Tensor]]) -> "EncodedFiles":
        """`files` as they are, or a list of 1-D uint8 tensors copied back to back."""
        if isinstance(files, EncodedFiles):
            return files
        for i, f in enumerate(files):
            if f.dim() != 1 or f.dtype != torch.uint8 or f.device.type != "cpu":
                raise ValueError(f"sample {i} must be encoded bytes (a 1D uint8 CPU tensor), got {tuple(f.shape)} "
                                 f"{f.dtype} on {f.device}")
        data = torch.cat([f.reshape(-1) for f in files]) if len(files) else torch.empty(0, dtype=torch.uint8)
        return EncodedFiles.back_to_back(data, [f.numel() for f in files])

    def __len__(self):
        return self.spans.shape[0]

    def file(self, i: int) -> torch.Tensor:
        """File i, a view of `data`."""
        offset, size = self.spans[i].tolist()
        return self.data[offset:offset + size]

    def subset(self, index) -> "EncodedFiles":
        """The files `index` (this batch itself when that is all of them)."""
        return self if len(index) == len(self) else EncodedFiles(self.data, self.spans[torch.as_tensor(index)])


def read_files(paths: List[str]) -> EncodedFiles:
    """The whole contents of the files `paths`, back to back in one buffer in order, read
    in parallel on torchdali's CPU threads without the GIL. A file that cannot be read (or is
    not a regular file: a FIFO, socket or device) raises a RuntimeError naming it and the
    reason."""
    with _names_for_the_kernel(paths) as names:
        return EncodedFiles.back_to_back(*torch.ops.torchdali.read_files.default(names))


def read_ranges(paths: Sequence[str], starts: Sequence[int], lengths: Sequence[int]) -> torch.Tensor:
    """Byte ranges of files back to back in one 1-D uint8 buffer, in order: range i is
    `lengths[i]` bytes of `paths[i]` from byte `starts[i]` (the members of tar archives),
    read in parallel on torchdali's CPU threads without the GIL. A file that cannot be read,
    or ends before a range does, raises a RuntimeError naming it."""
    with _names_for_the_kernel(paths) as names:
        return torch.ops.torchdali.read_ranges.default(names, np.asarray(starts, np.int64).tolist(),
                                                       np.asarray(lengths, np.int64).tolist())


@contextlib.contextmanager
def _names_for_the_kernel(paths):
    """`paths` as the ops take them (UTF-8): a name that is not UTF-8 (as os.listdir gives
    them, with surrogate escapes) is opened here and passed as its descriptor's
    /proc/self/fd path; the kernel's errors name the path given."""
    names, opened = list(paths), {}  # opened: descriptor -> the path it stands for
    try:
        for i, path in enumerate(names):
            if not path.isascii() and not _is_utf8(path) and path not in opened.values():
                try:
                    fd = os.open(os.fsencode(path), os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
                except OSError as e:
                    raise RuntimeError(f"cannot read {path!r}: {e.strerror}") from None
                opened[fd] = path
        descriptor = {path: f"/proc/self/fd/{fd}" for fd, path in opened.items()}
        yield [descriptor.get(path, path) for path in names]
    except RuntimeError as e:
        if not opened:
            raise
        message = str(e)
        for fd, path in opened.items():
            message = message.replace(f"'/proc/self/fd/{fd}'", repr(path))
        raise RuntimeError(message) from None
    finally:
        for fd in opened:
            os.close(fd)


def _is_utf8(text):
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


@register_fake("torchdali::read_files")
def _read_files_fake(paths):
    ctx = torch.library.get_ctx()
    return torch.empty(ctx.new_dynamic_size(), dtype=torch.uint8), torch.empty(len(paths), dtype=torch.int64)


@register_fake("torchdali::read_ranges")
def _read_ranges_fake(paths, starts, lengths):
    return torch.empty(sum(lengths), dtype=torch.uint8)


def jpeg_headers(files: Union[EncodedFiles, List[torch.Tensor]]) -> torch.Tensor:
    """One int64 row per encoded file (EncodedFiles, or a list of 1-D uint8 CPU tensors) of
    JPEG_FIELDS: is it a JPEG, does it end with its EOI marker (truncated files don't), its
    EXIF orientation (1-8), is its chroma subsampled, its height and width; defaults
    (1, 1, 0, 0) where the header does not tell. Parsed in C++ on torchdali's CPU threads
    without the GIL."""
    files = EncodedFiles.of(files)
    return torch.ops.torchdali.jpeg_headers.default(files.data, files.spans)


@register_fake("torchdali::jpeg_headers")
def _jpeg_headers_fake(data, spans):
    return torch.empty((spans.shape[0], len(JPEG_FIELDS)), dtype=torch.int64)
