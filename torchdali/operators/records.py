"""Readers of records at indexed places in files (readers.tfrecord, readers.mxnet): the
entries are records, each a (file, offset, size), read in their stored order; sharding, padding,
the shuffle buffer and checkpoints are FileReader's. Local files are mapped in memory once
(DALI's default); with dont_use_mmap a batch's records are read by positional reads in C++ over
torchdali's threads (read_ranges); files at URLs stream in blocks (BlockReader)."""
import os
import re

import numpy as np
import torch

from .. import storage
from ..kernels.io import read_ranges
from ..schema import BOOL, Arg
from .blocks import BlockReader
from .readers import LOADER_ARGS as READER_LOADER_ARGS, FileReader

# The loader arguments of readers.file these readers take; each declares its own
# shuffle_after_epoch (it shuffles the files, the records of a file staying in order).
LOADER_ARGS = READER_LOADER_ARGS + ("shuffle_after_epoch_seed",)

_INDEX_NUMBERS = re.compile(rb"(?:\s*[+-]?\d+)*")  # what C++'s `stream >> int64` pairs read
DONT_USE_MMAP = Arg("dont_use_mmap", BOOL, False, "Read local files with plain I/O instead of mapping them in "
                     "memory (files at URLs are always read).")


class RecordFileReader(FileReader):
    """A FileReader of records: `_list_entries` gives them through `_index_records`."""

    def _check_order(self, a):
        # Unlike readers.file, random_shuffle combines with shuffle_after_epoch (as in DALI).
        if a["shuffle_after_epoch"] and a["stick_to_shard"]:
            raise self.error("shuffle_after_epoch and stick_to_shard cannot both be True", ValueError)

    def _read_index(self, path):
        """[n, 2] integer pairs (tfrecord: offset, size; mxnet: key, offset): the leading
        integers of the file, read in pairs."""
        try:
            data = storage.read_bytes(path)
        except OSError as e:
            raise self.error(f"cannot open index_path '{path}': {e.strerror}", ValueError) from None
        numbers = re.findall(rb"[+-]?\d+", _INDEX_NUMBERS.match(data).group())
        numbers = np.array(numbers[:len(numbers) // 2 * 2], dtype="S").astype(np.int64)
        return numbers.reshape(-1, 2)

    def _index_records(self, files, record_file, offsets, sizes, file_starts):
        """Keeps the records (record k: `sizes[k]` bytes at `offsets[k]` of file
        `record_file[k]`, the records of file f from `file_starts[f]` on) and returns the
        entries: (source info, record number) pairs."""
        a = self.spec.args
        self.files, self.record_file, self.offsets, self.sizes = files, record_file, offsets, sizes
        self.file_starts = file_starts
        self.at_url = np.array([storage.is_url(p) for p in files])
        self.mappable = ~self.at_url & (not a["dont_use_mmap"])
        self.maps = {}  # file index -> the file mapped in memory, made at its first read
        self.blocks = None  # a BlockReader, for files at URLs
        names = [f"{files[f]} at index {o}" for f, o in zip(record_file.tolist(), offsets.tolist())]
        return "", list(zip(names, range(len(names))))

    def _prepare(self):
        super()._prepare()
        if self.shuffle:  # records are read in their stored order: the shuffle buffer alone shuffles
            self.base_order = np.arange(self.size)
            self._restart()

    def _order_for(self, epoch):
        """The records in the files' order of this epoch (a permutation of the files when
        shuffle_after_epoch, equal on every shard)."""
        if not self.shuffle_after_epoch:
            return self.base_order
        files = np.random.Generator(np.random.PCG64([self._epoch_seed, epoch])).permutation(len(self.files))
        starts, ends = self.file_starts[files], self.file_starts[files + 1]
        counts = ends - starts
        return np.arange(self.size) - np.repeat(np.cumsum(counts) - counts - starts, counts)

    # --- reading ---
    def _next_records(self, ctx):
        """The next batch's records: their source infos, the buffers holding them and their
        (buffer, offset, size) in those, int64 [N, 3] (see _records)."""
        if self.entries is None:
            self._prepare()
        picks = np.array(self._next_batch(ctx.batch_size), np.int64)
        return [self.names[e] for e in picks.tolist()], *self._records(picks, ctx)

    def _records(self, picks, ctx):
        """Buffers holding the picked records and their (buffer, offset, size) in them, int64
        [N, 3]. Local files are mapped in memory (unless dont_use_mmap, as in DALI), each once
        for the reader's life, and parsed in place; the records of the others are read."""
        files, offsets, sizes = self.record_file[picks], self.offsets[picks], self.sizes[picks]
        negative = np.flatnonzero((offsets < 0) | (sizes < 0))
        if len(negative):
            k = negative[0]
            path = self.files[files[k]]
            what = f"offset {offsets[k]}" if offsets[k] < 0 else f"size {sizes[k]}"
            raise self.error(f"'{path}': the index gives the invalid {what}", file=path)
        spans = np.column_stack([np.zeros_like(files), offsets, sizes])
        mapped = self.mappable[files]
        buffers = []
        if mapped.any():
            used, spans[mapped, 0] = np.unique(files[mapped], return_inverse=True)
            buffers = [self._mapping(f) for f in used.tolist()]
            lengths = np.array([len(b) for b in buffers], np.int64)
            short = np.flatnonzero(mapped & (offsets + sizes > lengths[spans[:, 0]]))
            if len(short):
                self._short(files[short[0]], offsets[short[0]], sizes[short[0]])
        for rows, read in ((np.flatnonzero(~mapped & ~self.at_url[files]), self._read_local),
                           (np.flatnonzero(self.at_url[files]), self._read_remote)):
            if len(rows):
                spans[rows, 0], spans[rows, 1] = len(buffers), np.cumsum(sizes[rows]) - sizes[rows]
                buffers.append(read(files[rows], offsets[rows], sizes[rows], ctx))
        return buffers, spans

    def _mapping(self, f):
        """File f mapped in memory as a uint8 tensor: privately (nothing is written back),
        without keeping a descriptor open."""
        if f not in self.maps:
            path = self.files[f]
            try:
                size = os.stat(path).st_size
                self.maps[f] = torch.from_file(path, shared=False, size=size, dtype=torch.uint8) if size else \
                    torch.empty(0, dtype=torch.uint8)
            except OSError as e:
                raise self.error(f"cannot read '{path}': {e.strerror}", file=path) from None
            except RuntimeError as e:  # torch's, where the file cannot be mapped
                raise self.error(f"cannot read '{path}': {str(e).splitlines()[0]}", file=path) from None
        return self.maps[f]

    def _short(self, f, offset, size):
        """Raises the error of a file that ends before the record at `offset`."""
        path = self.files[f]
        raise self.error(f"'{path}' ends before the record its index puts at offset {offset} ({size} bytes)",
                         file=path)

    def _read_local(self, files, offsets, sizes, ctx):
        """The records of local `files` at `offsets` back to back in one uint8 tensor, read by
        the C++ kernel; a file shorter than its index names the first record it lacks."""
        paths = [self.files[f] for f in files.tolist()]
        try:
            return read_ranges(paths, offsets, sizes)
        except RuntimeError as e:
            message = str(e).splitlines()[0]
        for k, path in enumerate(paths):
            try:
                if offsets[k] + sizes[k] > os.stat(path).st_size:
                    self._short(files[k], offsets[k], sizes[k])
            except OSError:
                pass
        path = re.match(r"cannot read '(.*?)': ", message)
        raise self.error(message, file=path.group(1) if path else None) from None

    def _read_remote(self, files, offsets, sizes, ctx):
        """The records of `files` at URLs back to back in one uint8 tensor, read in blocks."""
        if self.blocks is None:
            self.blocks = BlockReader(self.files, self.fill + ctx.batch_size, self.sizes.mean(),
                                      lambda path, reason: self.error(f"cannot read '{path}': {reason}", file=path))
        return torch.from_numpy(np.concatenate(self.blocks.read(files, offsets, sizes, ctx.thread_pool)))
