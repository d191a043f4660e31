"""readers.mxnet: images and labels of MXNet RecordIO files (as im2rec writes them), without
MXNet.

It is `readers.file` over another list: the entries are the records of the one index file,
read in the order of their offsets; sharding, padding, the shuffle buffer and checkpoints
are FileReader's, the reading of records RecordFileReader's (records.py: local files mapped
in memory once, or read by positional reads in C++ with dont_use_mmap; files at URLs in
blocks). A batch's headers are parsed as arrays; only records that MXNet split into
parts (where the magic number occurs, aligned, in the data) are joined one by one.

As in DALI: `index_path` is one index file for all of `path`, whose offsets count on
through the files as if they were one (`python -m torchdali.tools.rec2idx` writes it for
one or several files; im2rec's .idx serves a single file); its first column (the keys) is
ignored and the records are taken in the order of their offsets, a record's bytes reaching
to the next offset (repeated offsets give one record). The label is float32 of shape (1,)
(IRHeader.label) when the header's flag is 0, else the `flag` floats that follow it.

Where DALI 2.4 differs (quirks not followed):
- A record that MXNet split before its image (a magic number in its header's id or in its
  labels) is joined and read; DALI rejects it ("label size ... available data").
- An index entry at a continuation part of a split record is an error; DALI reads the
  fragment as a record.
- Records go to the file their offset falls in, so an empty file, or one the index gives
  no records, takes none (DALI moves on one file per record and fails to map an empty
  file); a record whose bytes would run into the next file ends with its file.
- shuffle_after_epoch permutes the files differently (identically on every shard, as in
  DALI), and random_shuffle picks differently; each epoch holds the same records.
"""
import struct

import numpy as np
import torch

from .. import storage
from ..schema import BOOL, REQUIRED, STRS, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec
from .readers import FileReader
from .records import DONT_USE_MMAP, LOADER_ARGS, RecordFileReader

MAGIC = 0xCED7230A
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_LENGTH_BITS = 29  # a part's length word: continuation flag (3 bits) above the length
_FRAME = 8  # magic + length word
_HEADER = 24  # IRHeader: flag uint32, label float32, id uint64, id2 uint64
_WHOLE, _FIRST, _MIDDLE, _LAST = range(4)  # continuation flags (3 bits: 4-7 are invalid)


@register(
    "readers.mxnet", aliases=("readers.MXNet", "MXNetReader"), deprecated_names=("mxnet_reader",), outputs=2,
    args=[
        Arg("path", STRS, REQUIRED, "MXNet RecordIO (.rec) files to read."),
        Arg("index_path", STRS, REQUIRED, "A list of one index file for all of `path`: '<key> <offset>' lines, "
            "offsets counting on through the files in order (im2rec's .idx for one file; "
            "`python -m torchdali.tools.rec2idx` or DALI's rec2idx writes them).",
            check=lambda v: None if len(v) == 1 else f"give one index file (got {len(v)}); for several .rec files "
            "it lists the offsets of all, counting on through the files"),
        Arg("shuffle_after_epoch", BOOL, False, "Shuffle the order of the files every epoch (the first one "
            "included), identically on every shard; records stay in order within each file."),
    ] + [DONT_USE_MMAP if name == "dont_use_mmap" else FileReader.schema.args[name] for name in LOADER_ARGS])
class MXNetReader(RecordFileReader):
    """Reads the records of MXNet RecordIO files: the encoded image (1D uint8) and the
    label(s) (1D float32: the header's label, or the `flag` labels after it). Shards, pads
    and shuffles as readers.file does; source info is '<path> at index <offset>'."""

    def _check_args(self, a):
        if not a["path"]:
            raise self.error("path is empty; give the RecordIO files to read", ValueError)

    # --- the dataset ---
    def _list_entries(self):
        """The records the index names: (source info, record number) pairs in offset order."""
        a = self.spec.args
        files = list(a["path"])
        index = a["index_path"][0]
        lengths = []
        for path in files:
            try:
                lengths.append(storage.size(path))
            except OSError as e:
                raise self.error(f"cannot read '{path}': {e.strerror or e}", ValueError, file=path) from None
        starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        offsets = np.unique(self._read_index(index)[:, 1])  # sorted; a repeated offset is one record
        if len(offsets) and (offsets[0] < 0 or offsets[-1] > starts[-1]):
            bad = offsets[0] if offsets[0] < 0 else offsets[-1]
            raise self.error(f"the index file '{index}' gives offset {bad}, outside the {starts[-1]} bytes of "
                             f"{files} (is it the index of these files?)", ValueError)
        offsets = offsets[offsets < starts[-1]]  # an offset at the end names no record (as in DALI)
        if not len(offsets):
            raise self.error(f"the index file '{index}' holds no records", ValueError)
        record_file = np.searchsorted(starts, offsets, side="right") - 1
        sizes = np.minimum(np.append(offsets[1:], starts[-1]), starts[record_file + 1]) - offsets
        return self._index_records(files, record_file, offsets - starts[record_file], sizes,
                                   np.searchsorted(record_file, np.arange(len(files) + 1)))

    # --- the operator ---
    def plan(self, inputs):
        """The images (1D uint8) and the labels (1D float32)."""
        return [BatchSpec("cpu", torch.uint8, 1, ""), BatchSpec("cpu", torch.float32, 1, "")], self.run

    def run(self, inputs, args, ctx):
        infos, buffers, spans = self._next_records(ctx)
        images, labels, counts = self._parse(buffers, spans, infos)
        return [TensorList.from_flat(images[0], images[1], device="cpu", source_info=infos),
                TensorList.from_flat(labels, counts, device="cpu", source_info=[""] * len(infos))]

    def _parse(self, buffers, spans, infos):
        """((images back to back, their sizes [N, 1]), labels back to back, label counts [N, 1])
        of the records at `spans` (buffer, offset, size) in `buffers`."""
        n = len(spans)
        arrays = [b.numpy() for b in buffers]
        short = np.flatnonzero(spans[:, 2] < _FRAME + _HEADER)
        if len(short):
            k = short[0]
            raise self.error(f"{infos[k]}: the record is {spans[k, 2]} bytes, shorter than a RecordIO record's "
                             f"framing and header ({_FRAME + _HEADER}); is the index file for these files?",
                             sample=int(k))
        heads = np.empty((n, _FRAME + _HEADER), np.uint8)
        for b, data in enumerate(arrays):
            rows = np.flatnonzero(spans[:, 0] == b)
            heads[rows] = data[spans[rows, 1, None] + np.arange(_FRAME + _HEADER)]
        words = heads[:, :16].copy().view("<u4")  # magic, length word, flag, label
        bad = np.flatnonzero(words[:, 0] != MAGIC)
        if len(bad):
            k = bad[0]
            raise self.error(f"{infos[k]}: no RecordIO record there (magic number 0x{words[k, 0]:08x}, expected "
                             f"0x{MAGIC:08x}); is the index file for these files?", sample=int(k))
        cflag, length = words[:, 1] >> _LENGTH_BITS, (words[:, 1] & ((1 << _LENGTH_BITS) - 1)).astype(np.int64)
        flag, label = words[:, 2].astype(np.int64), words[:, 3].view("<f4")
        self._check_whole(spans, cflag, length, flag, infos)
        whole = cflag == _WHOLE
        split = {int(k): self._join(arrays[spans[k, 0]][spans[k, 1]:spans[k, 1] + spans[k, 2]], infos[k], int(k))
                 for k in np.flatnonzero(~whole)}
        for k, payload in split.items():
            flag[k], label[k] = struct.unpack_from("<If", payload)
        counts = np.where(flag == 0, 1, flag)
        # A batch's images back to back: one copy out of the mapped files or the read buffer
        # (NumPy's concatenate: torch.cat of many byte slices on its threads measured up to 25 times slower).
        first = spans[:, 1] + _FRAME + _HEADER + 4 * flag
        size = length - _HEADER - 4 * flag
        views = [np.frombuffer(split[k], np.uint8)[_HEADER + 4 * flag[k]:] if k in split else arrays[b][o:o + z]
                 for k, (b, o, z) in enumerate(zip(spans[:, 0].tolist(), first.tolist(), size.tolist()))]
        images = torch.from_numpy(np.concatenate(views) if views else np.empty(0, np.uint8))
        sizes = np.array([len(v) for v in views], np.int64).reshape(-1, 1)
        return (images, sizes), self._labels(arrays, spans, flag, label, counts, whole, split), counts.reshape(-1, 1)

    def _check_whole(self, spans, cflag, length, flag, infos):
        """Checks that each record starts a record, and that those of one part fit in their
        bytes and hold their labels."""
        for k in np.flatnonzero(cflag > _FIRST):
            what = "a continuation part" if cflag[k] <= _LAST else "a part with an invalid flag"
            raise self.error(f"{infos[k]}: the index names {what} (flag {cflag[k]}), not the start of a record",
                             sample=int(k))
        whole = cflag == _WHOLE
        for k in np.flatnonzero(whole & (_FRAME + length > spans[:, 2])):
            raise self.error(f"{infos[k]}: the record's length is {length[k]} bytes, {spans[k, 2] - _FRAME} are "
                             "left before the next record or the end of the file", sample=int(k))
        for k in np.flatnonzero(whole & (length < _HEADER + 4 * flag)):
            raise self.error(f"{infos[k]}: the header announces {flag[k]} labels, the {length[k]}-byte record "
                             "cannot hold them", sample=int(k))

    def _join(self, raw, info, k):
        """The payload of record `raw` (bytes up to the next record) split into parts: the
        parts joined by the magic number they were split at, as MXNet reads them."""
        parts, pos = [], 0
        while True:
            if pos + _FRAME > len(raw):
                raise self.error(f"{info}: the record's part {len(parts)} runs past the next record or the end "
                                 "of the file", sample=k)
            magic, word = struct.unpack_from("<II", raw, pos)
            if magic != MAGIC:
                raise self.error(f"{info}: part {len(parts)} of the record, at byte {pos} of it, has the magic "
                                 f"number 0x{magic:08x}, not 0x{MAGIC:08x}", sample=k)
            flag, length = word >> _LENGTH_BITS, word & ((1 << _LENGTH_BITS) - 1)
            if parts and flag not in (_MIDDLE, _LAST):
                raise self.error(f"{info}: part {len(parts)} of the record has the continuation flag {flag}, not 2 "
                                 "or 3", sample=k)
            if pos + _FRAME + length > len(raw):
                raise self.error(f"{info}: the record's part {len(parts)} runs past the next record or the end "
                                 "of the file", sample=k)
            parts.append(raw[pos + _FRAME:pos + _FRAME + length].tobytes())
            if flag == _LAST:
                break
            pos += _FRAME + -(-length // 4) * 4
        payload = _MAGIC_BYTES.join(parts)
        if len(payload) < _HEADER or len(payload) < _HEADER + 4 * struct.unpack_from("<I", payload)[0]:
            raise self.error(f"{info}: the record ({len(payload)} bytes) is shorter than its header and labels",
                             sample=k)
        return payload

    @staticmethod
    def _labels(arrays, spans, flag, label, counts, whole, split):
        """The labels back to back (float32): the header's label where the flag is 0, else
        the `flag` floats after the header (of the joined payload for split records)."""
        out = np.repeat(label, counts)
        at = np.cumsum(counts) - counts
        listed = (flag > 0) & whole
        for b, data in enumerate(arrays):
            rows = np.flatnonzero(listed & (spans[:, 0] == b))
            if len(rows):
                n = counts[rows]
                index = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)  # each label's place in its record
                byte = (np.repeat(spans[rows, 1] + _FRAME + _HEADER, n) + 4 * index)[:, None] + np.arange(4)
                out[np.repeat(at[rows], n) + index] = data[byte].reshape(-1).view("<f4")
        for k, payload in split.items():
            if flag[k]:
                out[at[k]:at[k] + flag[k]] = np.frombuffer(payload, "<f4", flag[k], _HEADER)
        return torch.from_numpy(out)
