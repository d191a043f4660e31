"""readers.webdataset: the samples of WebDataset tar archives, one output per extension
group, in DALI's order; and the archives' format: the tar scan and DALI's index files.

The reader is `readers.file` over another list: the entries are the samples, listed once at
prepare time from DALI's index files (v1.1, v1.2; `python -m torchdali.tools.wds2idx`
writes them) or from a scan of the archives' headers, and reading, sharding, padding,
shuffling and checkpoints are FileReader's. The list is kept as arrays (per output: each
sample's member offset, size and name), so that a batch reads its members by offset:
members close to each other in an archive in one ranged read through torchdali.storage,
a sequential stream when the batch follows the archive's order.

The scan reads tar files as Python's tarfile, GNU tar and others write them: ustar (with
its name prefix), GNU long names ('L') and PAX extended headers ('x': path and size). It
reads only the 512-byte headers and extension records, and seeks past the members' data.

Where DALI 2.4 differs (its own quirks, not followed):
- Its scan (without index files) names PAX members by their ustar name (cut at 100
  characters, non-ASCII as '?') instead of their PAX path, adds an empty sample when an
  archive starts with a hidden file, keeps hidden files in folders as a sample keyed by the
  folder, and gives an archive without files one empty sample. We read archives as DALI
  reads them with an index file, as its documentation describes: PAX paths, hidden files
  (a file name starting with a dot) skipped, no samples from an archive without files.
- It counts a sample's matched members, not its filled outputs, to find missing ones: with
  an extension in two groups, 'skip' drops and 'error' rejects complete samples.
- Its wds2idx writes wrong offsets for GNU long names; ours refuses names with whitespace
  (which the index format cannot hold) instead of writing a broken index.
- shuffle_after_epoch permutes the archives differently (the same on every shard, as in
  DALI), and random_shuffle picks differently; each epoch holds the same samples.
- Error messages count index file lines from 1 at the header; DALI counts samples.
"""
import collections
import dataclasses
import re
import string
import warnings
from typing import List

import numpy as np
import torch

from .. import storage, types
from ..kernels.io import read_ranges
from ..schema import BOOL, DTYPE, REQUIRED, STR, STRS, Arg, ArgType, register
from ..tensor_list import TensorList
from .base import BatchSpec
from .blocks import BlockReader
from .coco import _LOADER_ARGS
from .readers import FileReader

_BEHAVIORS = ("empty", "skip", "error")
_SUPPORTED = tuple(types.DALIDataType(v) for v in range(11))  # UINT8 ... FLOAT64 (not BOOL)
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)

# One data type or a list of them (one per output).
_DTYPES = ArgType("DALIDataType or list of DALIDataType",
                  lambda v: [DTYPE.convert(x) for x in (v if isinstance(v, (list, tuple)) else [v])])


# --- tar archives and index files ---

BLOCK = 512
VERSIONS = {b"v1.1": 3, b"v1.2": 4}  # tokens per component: ext offset size [filename]
_ZERO = bytes(BLOCK)
_LOW_BYTES = bytes(range(128))
_EXTENSION_TYPES = (b"x", b"g", b"L", b"K")  # PAX local / global, GNU long name / long link
_NO_DATA_TYPES = (b"1", b"2", b"3", b"4", b"5", b"6")  # links, devices, directories, FIFOs
_WHITESPACE = re.compile(rb"[ \t\n\r\v\f]")

Member = collections.namedtuple("Member", "name offset size")  # offset: of the data
Component = collections.namedtuple("Component", "ext offset size name")


class FormatError(RuntimeError):
    """A tar or index file that cannot be read as one; the message names the file."""


def _text(raw):
    return raw.decode("utf-8", "surrogateescape")


def _cut(field):
    return field.split(b"\0", 1)[0]


def _number(field):
    """A header's number: octal text, or GNU's base-256 when the first byte's high bit is
    set; -1 where the field holds neither (not a tar header)."""
    if field[0] & 0x80:
        value = int.from_bytes(field[1:], "big")
        return value - 256 ** (len(field) - 1) if field[0] == 0xFF else value
    text = _cut(field).strip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError:
        return -1


def _checksum_ok(header):
    """The header's checksum: its bytes' sum (unsigned, or signed as some old tars sum them),
    the checksum field counted as spaces."""
    stored = _number(header[148:156])
    unsigned = sum(header[:148]) + sum(header[156:]) + 8 * 32
    if stored == unsigned:
        return True
    high = len(header[:148].translate(None, _LOW_BYTES)) + len(header[156:].translate(None, _LOW_BYTES))
    return stored == unsigned - 256 * high


def _pax_records(data, where):
    """The records of a PAX extended header: '<length> <key>=<value>\\n' each."""
    records, pos = {}, 0
    while pos < len(data) and data[pos:pos + 1] != b"\0":
        match = re.match(rb"(\d+) ", data[pos:pos + 32])
        length = int(match.group(1)) if match else 0
        if length <= len(match.group(0) if match else b"") or pos + length > len(data):
            raise FormatError(f"{where}: malformed PAX extended header")
        key, _, value = data[pos + len(match.group(0)):pos + length - 1].partition(b"=")
        records[key] = value
        pos += length
    return records


def _round(size):
    return -(-size // BLOCK) * BLOCK


def scan_members(path):
    """The regular-file members of tar file `path`, in order: (name, data offset, size)."""
    with storage.open_stream(path) as f:
        total = f.seek(0, 2)
        pos, long_name, pax = 0, None, {}
        while pos < total:
            f.seek(pos)
            header = f.read(BLOCK)
            where = f"tar file '{path}' at offset {pos}"
            if header == _ZERO:
                return  # the end-of-archive marker
            if len(header) < BLOCK or not _checksum_ok(header):
                raise FormatError(f"{where}: {'truncated' if len(header) < BLOCK else 'corrupted'} header")
            kind, size = header[156:157], _number(header[124:136])
            if size < 0:
                raise FormatError(f"{where}: corrupted header (no valid size)")
            if kind in _EXTENSION_TYPES:
                data = f.read(size)
                if len(data) < size:
                    raise FormatError(f"{where}: truncated extended header")
                if kind == b"x":
                    pax = _pax_records(data, where)
                elif kind == b"L":
                    long_name = _text(_cut(data))
                pos += BLOCK + _round(size)
                continue
            name = _text(_cut(header[:100]))
            if header[257:263] == b"ustar\0" and header[345]:  # POSIX ustar: a name prefix
                name = _text(_cut(header[345:500])) + "/" + name
            if b"path" in pax:
                name = _text(pax[b"path"])
            elif long_name is not None:
                name = long_name
            if b"size" in pax:
                size = _int(pax[b"size"], where)
            regular = kind in (b"0", b"7") or kind == b"\0" and not name.endswith("/")
            if regular:
                if pos + BLOCK + size > total:
                    raise FormatError(f"{where}: member '{name}' ({size} bytes) runs past the end of the file "
                                      "(a truncated archive)")
                yield Member(name, pos + BLOCK, size)
            pos += BLOCK + (0 if kind in _NO_DATA_TYPES else _round(size))
            long_name, pax = None, {}


def split_name(name):
    """(key, extension) of a member, as DALI splits them: at the first dot of the file name
    (after the last '/'); a name without a dot is both its key and its extension."""
    dot = name.find(".", name.rfind("/") + 1)
    return (name, name) if dot < 0 else (name[:dot], name[dot + 1:])


def group_samples(members):
    """Samples of consecutive members with the same key, as lists of Components. Hidden
    members (a file name starting with a dot) belong to no sample."""
    samples, last = [], None
    for m in members:
        key, ext = split_name(m.name)
        if not key or key.endswith("/"):
            continue
        if key != last:
            samples.append([])
            last = key
        samples[-1].append(Component(ext, m.offset, m.size, m.name))
    return samples


def _int(token, where):
    try:
        return int(token)
    except ValueError:
        raise FormatError(f"{where}: {_text(token)!r} is not an integer") from None


def read_index(path):
    """The samples of an index file (lists of Components, in order); sample k is on line k + 2."""
    try:
        lines = storage.read_bytes(path).split(b"\n")
    except OSError as e:
        raise FormatError(f"cannot read index file '{path}': {e.strerror}") from None
    head = lines[0].split()
    if not head or head[0] not in VERSIONS:
        found = f"version {_text(head[0])!r}" if head else "no version"
        raise FormatError(f"index file '{path}' line 1: {found}; expected v1.1 or v1.2")
    width = VERSIONS[head[0]]
    count = _int(head[1], f"index file '{path}' line 1") if len(head) > 1 else 0
    if count <= 0:
        raise FormatError(f"index file '{path}' line 1: the sample count must be positive")
    samples = []
    for line in range(2, count + 2):
        tokens = lines[line - 1].split() if line <= len(lines) else []
        where = f"index file '{path}' line {line}"
        if not tokens or len(tokens) % width:
            layout = "<ext> <offset> <size>" + (" <filename>" if width == 4 else "")
            problem = "no components" if not tokens else "incomplete components"
            raise FormatError(f"{where}: {problem} (the header announces {count} samples; each component "
                              f"reads `{layout}`)")
        sample = []
        for j in range(0, len(tokens), width):
            offset, size = _int(tokens[j + 1], where), _int(tokens[j + 2], where)
            if offset % BLOCK or offset < 0 or size < 0:
                problem = "a negative size" if size < 0 else \
                    f"offset {offset} is not a non-negative multiple of the tar block size ({BLOCK})"
                raise FormatError(f"{where}: {problem}")
            name = _text(tokens[j + 3]) if width == 4 else ""
            sample.append(Component(_text(tokens[j]), offset, size, name))
        samples.append(sample)
    return samples


def format_index(samples, archive):
    """The v1.2 index text of `samples` (of tar file `archive`, named in errors)."""
    lines = [f"v1.2 {len(samples)}"]
    for sample in samples:
        for c in sample:
            raw = c.name.encode("utf-8", "surrogateescape")
            if not c.ext or _WHITESPACE.search(raw):
                problem = "an empty extension" if not c.ext else "whitespace in its name"
                raise FormatError(f"tar file '{archive}': member {c.name!r} has {problem}, which the index "
                                  "format cannot hold; read the archive without an index")
        lines.append(" ".join(f"{c.ext} {c.offset} {c.size} {c.name}" for c in sample))
    return "\n".join(lines) + "\n"



# --- the reader ---

def _ext_groups(exts, case_sensitive):
    """The extension set of each output: its group split at ';' (as C++'s getline splits:
    no empty last item), lower-cased (ASCII) unless case-sensitive."""
    groups = []
    for group in exts:
        parts = group.split(";")
        if parts[-1] == "":
            parts.pop()
        groups.append({p if case_sensitive else p.translate(_ASCII_LOWER) for p in parts})
    return groups


@register(
    "readers.webdataset", outputs=lambda args, num_inputs: len(args["ext"]),
    args=[
        Arg("paths", STRS, REQUIRED, "The WebDataset tar archives."),
        Arg("index_paths", STRS, None, "Their index files (wds2idx), one per archive; without them the "
            "archives' headers are scanned at prepare time."),
        Arg("ext", STRS, REQUIRED, "Per output, the extensions (text after the first dot of a member's file "
            "name) it takes, separated by ';', e.g. 'jpg;png'.", check=lambda v: None if v else "give at least one"),
        Arg("missing_component_behavior", STR, "", "A sample without a member for some output: 'empty' (the "
            "default: an empty output), 'skip' the sample, or 'error'."),
        Arg("dtypes", _DTYPES, None, "The outputs' data types (UINT8 by default); each member's size must be a "
            "multiple of its type's."),
        Arg("case_sensitive_extensions", BOOL, True, "Match the extensions case-sensitively."),
        FileReader.schema.args["skip_cached_images"],
    ] + [FileReader.schema.args[name] for name in _LOADER_ARGS])
class WebdatasetReader(FileReader):
    """Reads the samples of WebDataset tar archives: per output (one per `ext` group) the
    sample's member with one of the group's extensions (1D, uint8 or the given dtype),
    empty where it has none; shards, pads and shuffles as readers.file does, with
    `shuffle_after_epoch` reordering whole archives."""

    def _check_args(self, a):
        """Check the arguments and keep what they decide (the extension groups, dtypes)."""
        if not a["paths"]:
            raise self.error("paths is empty: give at least one archive", ValueError)
        if a["index_paths"] and len(a["index_paths"]) != len(a["paths"]):
            raise self.error(f"got {len(a['index_paths'])} index_paths for {len(a['paths'])} paths; give one "
                             "index file per archive, or none", ValueError)
        behavior = a["missing_component_behavior"].translate(_ASCII_LOWER) or "empty"
        if behavior not in _BEHAVIORS:
            raise self.error(f"missing_component_behavior = {a['missing_component_behavior']!r} is not one of "
                             "'empty', 'skip', 'error'", ValueError)
        dtypes = a["dtypes"] or [types.UINT8] * len(a["ext"])
        if len(dtypes) != len(a["ext"]):
            raise self.error(f"got {len(dtypes)} dtypes for {len(a['ext'])} ext groups; give one per output",
                             ValueError)
        for d in dtypes:
            if d not in _SUPPORTED:
                raise self.error(f"dtypes: {d} is not supported; use one of "
                                 f"{', '.join(t.name for t in _SUPPORTED)}", ValueError)
        self.behavior = behavior
        self.dtypes = [types.to_torch_type(d) for d in dtypes]
        self.itemsizes = [torch.empty(0, dtype=d).element_size() for d in self.dtypes]
        self.outputs_of = {}  # extension -> the outputs that take it, in order
        for k, group in enumerate(_ext_groups(a["ext"], a["case_sensitive_extensions"])):
            for ext in group:
                self.outputs_of.setdefault(ext, []).append(k)

    def _check_order(self, a):
        # Unlike readers.file, random_shuffle may go with shuffle_after_epoch (archives reordered).
        if a["shuffle_after_epoch"] and a["stick_to_shard"]:
            raise self.error("shuffle_after_epoch and stick_to_shard cannot both be True", ValueError)

    # --- the sample list ---
    def _list_entries(self):
        """Index or scan every archive; the entries are the samples kept, in order."""
        a = self.spec.args
        self.archives = list(a["paths"])
        self._warned = False
        rows, archive_of, counts = [], [], []
        for t, path in enumerate(self.archives):
            index = a["index_paths"][t] if a["index_paths"] else None
            try:
                samples = read_index(index) if index else group_samples(scan_members(path))
            except FormatError as e:
                raise self.error(str(e)) from None
            except OSError as e:
                raise self.error(f"cannot read tar file '{path}': {e.strerror}") from None
            except ImportError as e:
                raise self.error(str(e), ImportError) from None
            kept = 0
            for k, sample in enumerate(samples):
                where = f"index file '{index}', line {k + 2}" if index else f"tar file '{path}', sample {k}"
                row = self._choose(sample, where)
                if row is not None:
                    rows.append(row)
                    kept += 1
            archive_of += [t] * kept
            counts.append(kept)
        if not rows:
            raise self.error(f"no samples in paths {self.archives} with ext {a['ext']}", ValueError)
        self.samples = _Samples.of(rows, archive_of, counts)
        self._check_within_archives()
        return None, [(str(i), i) for i in range(len(rows))]

    def _choose(self, sample, where):
        """Per output, the sample's member its extensions select (the first where several
        do), None where none does; or None for the whole sample where it is dropped
        (missing_component_behavior='skip')."""
        chosen = [None] * len(self.dtypes)
        lower = not self.spec.args["case_sensitive_extensions"]
        for c in sample:
            for k in self.outputs_of.get(c.ext.translate(_ASCII_LOWER) if lower else c.ext, ()):
                if chosen[k] is not None:
                    if not self._warned:  # once per reader, as DALI warns
                        warnings.warn(f"{self.name}: several members of a sample match output {k} at {where}; "
                                      f"the first ({chosen[k].name or chosen[k].ext}) is read", stacklevel=2)
                        self._warned = True
                    continue
                if c.size % self.itemsizes[k]:
                    raise self.error(f"{where}: member {c.name or c.ext!r} has {c.size} bytes, not a multiple of "
                                     f"the {self.dtypes[k]} of output {k}")
                chosen[k] = c
        missing = [k for k, c in enumerate(chosen) if c is None]
        if missing and self.behavior == "error":
            raise self.error(f"{where}: the sample has no member for output {missing[0]} "
                             f"(ext {self.spec.args['ext'][missing[0]]!r}; missing_component_behavior='error')")
        return None if missing and self.behavior == "skip" else chosen

    def _check_within_archives(self):
        """Every member lies inside its archive (an index file may be stale)."""
        s = self.samples
        ends = [np.where(p, o + z, 0) for p, o, z in zip(s.present, s.offsets, s.sizes)]
        furthest = np.max(ends, axis=0)  # per sample
        filled = np.flatnonzero(s.count)
        self._blocks = None  # a BlockReader, where archives are at URLs
        self._at_url = any(storage.is_url(path) for path in self.archives)
        for t, end in zip(filled.tolist(), np.maximum.reduceat(furthest, s.first[filled]).tolist()):
            path = self.archives[t]
            try:
                size = storage.size(path)
            except OSError as e:
                raise self.error(f"cannot read tar file '{path}': {e.strerror}") from None
            if end > size:
                i = s.first[t] + int(np.argmax(furthest[s.first[t]:s.first[t] + s.count[t]] > size))
                k = next(k for k in range(len(ends)) if ends[k][i] > size)
                raise self.error(f"member '{s.names[k][i]}' at offset {s.offsets[k][i]} ends past the end of "
                                 f"tar file '{path}' (a stale index file or a truncated archive)")

    def _order_for(self, epoch):
        """The samples in archive order; with shuffle_after_epoch, whole archives permuted
        anew every epoch (the same permutation on every shard), each still read in order."""
        if not self.shuffle_after_epoch:
            return np.arange(self.size)
        s = self.samples
        perm = np.random.Generator(np.random.PCG64([self._epoch_seed, epoch])).permutation(len(s.first))
        counts = s.count[perm]
        return np.repeat(s.first[perm] - (np.cumsum(counts) - counts), counts) + np.arange(self.size)

    # --- the operator ---
    def plan(self, inputs):
        return [BatchSpec("cpu", dtype, 1, "") for dtype in self.dtypes], self.run

    def run(self, inputs, args, ctx):
        if self.entries is None:
            self._prepare()
        picks = np.array(self._next_batch(ctx.batch_size), np.int64)
        s = self.samples
        archive = s.archive[picks]
        present = [p[picks] for p in s.present]
        offsets = [o[picks] for o in s.offsets]
        sizes = [z[picks] for z in s.sizes]  # 0 where absent
        flats = self._read_outputs([(archive[p], o[p], z[p]) for p, o, z in zip(present, offsets, sizes)], ctx)
        outs = []
        for k, (dtype, flat) in enumerate(zip(self.dtypes, flats)):
            info = [f"{self.archives[t]}:{o}:{s.names[k][i]}" if p else ""
                    for t, o, i, p in zip(archive.tolist(), offsets[k].tolist(), picks.tolist(), present[k])]
            shapes = sizes[k] // self.itemsizes[k]
            outs.append(TensorList.from_flat(flat.view(dtype), shapes[:, None], device="cpu", source_info=info))
        return outs

    def _read_outputs(self, members, ctx):
        """Per output, the bytes of its members (archive, offset, size arrays) back to back
        in one uint8 tensor, all read into one buffer: from local archives by positional
        reads in C++ over torchdali's threads, without the GIL; from URLs in blocks
        (BlockReader)."""
        archive, offsets, sizes = (np.concatenate(column) for column in zip(*members))
        if self._at_url:
            if self._blocks is None:
                mean = sum(int(z.sum()) for z in self.samples.sizes) / self.size
                self._blocks = BlockReader(self.archives, self.fill + ctx.batch_size, mean, lambda path, reason:
                                           self.error(f"cannot read tar file '{path}': {reason}"))
            data = self._blocks.read(archive, offsets, sizes, ctx.thread_pool)
            flat = torch.from_numpy(np.concatenate(data)) if data else torch.empty(0, dtype=torch.uint8)
        else:
            try:
                flat = read_ranges([self.archives[t] for t in archive.tolist()], offsets, sizes)
            except RuntimeError as e:  # the kernel's message names the tar file and the reason
                raise self.error(str(e).splitlines()[0].replace("cannot read '", "cannot read tar file '")) from None
        bounds = np.cumsum([0] + [int(z.sum()) for _, _, z in members]).tolist()
        outs = []
        for begin, end, itemsize in zip(bounds, bounds[1:], self.itemsizes):
            part = flat[begin:end]  # viewed as its type, it must start at a multiple of the type's size
            outs.append(part if begin % itemsize == 0 else part.clone())
        return outs


@dataclasses.dataclass
class _Samples:
    """The sample list as arrays: per sample its archive; per output, each sample's member
    (offset, size, name) and whether it has one; per archive, its first sample and count."""

    archive: np.ndarray
    offsets: List[np.ndarray]
    sizes: List[np.ndarray]
    present: List[np.ndarray]
    names: List[list]
    first: np.ndarray
    count: np.ndarray

    @staticmethod
    def of(rows, archive_of, counts):
        """From the chosen members of each sample (rows), their archives and the archives' counts."""
        columns = list(zip(*rows))
        count = np.array(counts, np.int64)
        return _Samples(
            archive=np.array(archive_of, np.int64),
            offsets=[np.array([m.offset if m else 0 for m in col], np.int64) for col in columns],
            sizes=[np.array([m.size if m else 0 for m in col], np.int64) for col in columns],
            present=[np.array([m is not None for m in col], bool) for col in columns],
            names=[[m.name if m else None for m in col] for col in columns],
            first=np.cumsum(count) - count, count=count)
