"""readers.tfrecord: the features of tf.train.Example records in TFRecord files, without
TensorFlow.

It is `readers.file` with another list: the entries are the records the index files name
(offset and size per record, as `tfrecord2idx` writes them), read in their stored order;
sharding, padding, the shuffle buffer and checkpoints are FileReader's, the reading of
records RecordFileReader's (records.py: mapped in memory, read_ranges, blocks). One call of the C++ kernel `torchdali::tfrecord_parse` walks every record's
protobuf wire format for the features asked for and writes each feature's values for the
whole batch, on torchdali's CPU threads without the GIL. The plain Python parser below
explains the records the kernel rejects (the tests hold the two to the same verdicts and
values).

As in DALI: the CRCs of the framing are not checked; outputs come in the order of the
`features` dict; a record without a feature gives a scalar 0 (so a batch mixing records
with and without it fails unless the feature is a scalar); `default_value` fills nothing;
a FixedLenFeature with fewer values than its shape is padded (with zeros here, where DALI
leaves the memory as it was); a string feature gives its first value's bytes. A mapped
file must not shrink while it is read (reading the bytes it lost raises SIGBUS): use
dont_use_mmap for files that change.
"""
import numpy as np
import torch

from ..kernels.tfrecord import tfrecord_parse
from ..schema import BOOL, REQUIRED, STRS, Arg, ArgType, register
from ..tensor_list import TensorList
from ..protowire import Malformed, decode_varints, fields
from ..tfrecord import Feature, FixedLenFeature, VarLenFeature, float32, int64, string
from .base import BatchSpec
from .readers import FileReader
from .records import DONT_USE_MMAP, LOADER_ARGS, RecordFileReader

_TORCH_DTYPES = {int64: torch.int64, float32: torch.float32, string: torch.uint8}
_FRAMING = 16  # uint64 length, its CRC, the payload's CRC



def _features(value):
    """The features dict, checked; a feature may also come as the plain tuple that
    serialization stores a Feature as."""
    if not isinstance(value, dict):
        raise TypeError("expected a dict of feature name -> tfrecord.Feature")
    out = {}
    for name, feature in value.items():
        if not isinstance(name, str):
            raise TypeError(f"feature names must be strings, got {name!r}")
        if not isinstance(feature, Feature):
            if not (isinstance(feature, (tuple, list)) and len(feature) == 4):
                raise TypeError(f"expected a tfrecord.Feature for '{name}', got {type(feature).__name__}; use "
                                "tfrecord.FixedLenFeature or tfrecord.VarLenFeature to define the features")
            fixed, *rest = feature
            feature = FixedLenFeature(*rest) if fixed else VarLenFeature(*rest)
        out[name] = feature
    return out


FEATURES = ArgType("dict of (str, tfrecord.Feature)", _features)



def _ndim(feature):
    """The dims of a sample that has the feature (one without it is a scalar)."""
    if feature.dtype == string:
        return 1
    return len(feature.shape) if feature.fixed else 1 + len(feature.shape)


@register(
    "readers.tfrecord", aliases=("readers.TFRecord", "TFRecordReader"), deprecated_names=("tfrecord_reader",),
    outputs=lambda args, num_inputs: len(args["features"]),
    output_names=lambda kwargs: list(kwargs["features"]),
    args=[
        Arg("path", STRS, REQUIRED, "TFRecord files to read."),
        Arg("index_path", STRS, REQUIRED, "Their index files, one per file in the same order: an 'offset size' "
            "pair per record (`python -m torchdali.tools.tfrecord2idx` or DALI's tfrecord2idx writes them)."),
        Arg("features", FEATURES, REQUIRED, "Feature name -> tfrecord.FixedLenFeature or tfrecord.VarLenFeature: "
            "the features to extract, one output each, in this order (fn returns a dict by name).",
            check=lambda v: None if v else "give at least one feature"),
        Arg("use_o_direct", BOOL, False, "Read bypassing the system cache; accepted for compatibility (needs "
            "dont_use_mmap=True, as in DALI)."),
        Arg("shuffle_after_epoch", BOOL, False, "Shuffle the order of the files every epoch (the first one "
            "included), identically on every shard; records stay in order within each file."),
    ] + [DONT_USE_MMAP if name == "dont_use_mmap" else FileReader.schema.args[name] for name in LOADER_ARGS])
class TFRecordReader(RecordFileReader):
    """Reads the `features` of tf.train.Example records from TFRecord files, one output per
    feature: int64 (int64), float32 (float32) or string (uint8 bytes, 1D); FixedLenFeature
    gives its shape, VarLenFeature a 1D array or (n, *partial_shape). Shards, pads and
    shuffles as readers.file does; source info is '<path> at index <offset>'."""

    def __init__(self, spec):
        self.features = spec.args["features"]
        self.keys = list(self.features)
        self.wanted = {name.encode(): k for k, name in enumerate(self.features)}
        self.dtypes = [f.dtype for f in self.features.values()]
        super().__init__(spec)

    def _check_args(self, a):
        if not a["path"]:
            raise self.error("path is empty; give the TFRecord files to read", ValueError)
        if len(a["index_path"]) != len(a["path"]):
            raise self.error(f"got {len(a['index_path'])} index_path entries for {len(a['path'])} files in path; "
                             "give one index file per TFRecord file", ValueError)
        if a["use_o_direct"] and not a["dont_use_mmap"]:
            raise self.error("use_o_direct needs dont_use_mmap=True", ValueError)
        for name, f in self.features.items():
            if f.dtype == string and (not f.fixed or int(np.prod(f.shape)) > 1):
                raise self.error(f"feature '{name}': tensors of strings are not supported; a string feature is a "
                                 "FixedLenFeature of shape [] or [1] (its first value's bytes)", ValueError)
            if f.fixed and any(d < 0 for d in f.shape):
                raise self.error(f"feature '{name}': shape {list(f.shape)} has a negative dim", ValueError)
            if not f.fixed and any(d <= 0 for d in f.shape):
                raise self.error(f"feature '{name}': partial_shape {list(f.shape)} must hold positive dims (the "
                                 "first dim, inferred, is not part of it)", ValueError)

    # --- the dataset ---
    def _list_entries(self):
        """The records of the index files: (source info, record number) pairs."""
        a = self.spec.args
        spans = [self._read_index(index) for index in a["index_path"]]
        counts = np.array([len(s) for s in spans], np.int64)
        if not counts.sum():
            raise self.error(f"the index files {a['index_path']} hold no records", ValueError)
        offsets, sizes = np.concatenate(spans).T.copy()
        return self._index_records(a["path"], np.repeat(np.arange(len(spans)), counts), offsets, sizes,
                                   np.concatenate([[0], np.cumsum(counts)]))

    # --- the operator ---
    def plan(self, inputs):
        """One output per feature, in the order of `features`; a feature's dims are known
        unless a whole batch may lack it (then its samples are scalars, as in DALI)."""
        return [BatchSpec("cpu", _TORCH_DTYPES[f.dtype], 0 if _ndim(f) == 0 else None, "")
                for f in self.features.values()], self.run

    def run(self, inputs, args, ctx):
        infos, buffers, spans = self._next_records(ctx)
        values, counts, status = tfrecord_parse(buffers, torch.from_numpy(spans), self.keys, self.dtypes)
        bad = np.flatnonzero(status.numpy())
        if len(bad):
            i = int(bad[0])
            b, offset, size = spans[i].tolist()
            self._explain(buffers[b][offset:offset + size].numpy().tobytes(), infos[i], i)
        counts = counts.numpy()
        return [self._batch(name, f, values[k], counts[:, k], infos)
                for k, (name, f) in enumerate(self.features.items())]

    def _explain(self, record, info, i):
        """Raises the Python parser's error for a record the kernel rejected (`record`: its
        bytes, framing included)."""
        found = self._parse(record, info)
        for name, f, value in zip(self.features, self.features.values(), found):
            try:
                _decode(f.dtype, [b"" if value is None else value])
            except Malformed as e:
                raise self.error(f"error parsing {info}: not a valid tf.train.Example (feature '{name}': {e})",
                                 sample=i) from None
        raise self.error(f"error parsing {info}: not a valid tf.train.Example", sample=i)

    def _parse(self, record, info):
        """Per feature: the record's values as bytes (packed varints, little-endian floats or
        the first string), or None where the record lacks the feature. The plain Python
        parser: it explains the records the kernel rejects, and tests check the kernel
        against it."""
        size = len(record)
        if size < _FRAMING:
            raise self.error(f"error parsing {info}: the record is too short ({size} bytes, the framing alone "
                             f"takes {_FRAMING})")
        length = int.from_bytes(record[:8], "little")
        if length > size - _FRAMING:
            raise self.error(f"error parsing {info}: the record's payload length is {length} bytes, "
                             f"{size - _FRAMING} are available")
        try:
            return _example_values(record, memoryview(record), 12, 12 + length, self.wanted, self.dtypes)
        except Malformed as e:
            raise self.error(f"error parsing {info}: not a valid tf.train.Example ({e})") from None

    def _batch(self, name, feature, data, counts, infos):
        """One output: the batch's values of one feature (`data`, `counts` per record, -1 where
        it lacks the feature), shaped as the feature says."""
        n, ndim = len(counts), _ndim(feature)
        missing = counts < 0
        if ndim and missing.all():  # DALI's output for a missing feature: a scalar (0 here, DALI's is unset)
            return TensorList.make(torch.zeros(n, dtype=_TORCH_DTYPES[feature.dtype]), device="cpu",
                                   source_info=infos)
        if ndim and missing.any():
            i = int(np.argmax(missing))
            raise self.error(f"feature '{name}' is missing in {infos[i]}, which makes a scalar, while other "
                             f"records of the batch have it with {ndim} dims", ValueError, sample=i)
        counts = np.maximum(counts, 0)  # a scalar feature's missing values are no values: 0
        if feature.dtype == string:
            shapes = counts.reshape(-1, 1)
        elif feature.fixed:
            data, shapes = self._fixed(name, feature, data, counts, infos)
        else:
            m = int(np.prod(feature.shape))
            bad = np.flatnonzero(counts % m)
            if len(bad):
                raise self.error(f"feature '{name}' has {counts[bad[0]]} values in {infos[bad[0]]}, not a multiple "
                                 f"of its partial_shape {list(feature.shape)}", ValueError, sample=int(bad[0]))
            shapes = np.column_stack([counts // m] + [np.full(n, d) for d in feature.shape])
        return TensorList.from_flat(data, shapes, device="cpu", source_info=infos)

    def _fixed(self, name, feature, data, counts, infos):
        """The values of a FixedLenFeature, each sample padded with zeros to its shape."""
        n, volume = len(counts), int(np.prod(feature.shape))
        over = np.flatnonzero(counts > volume)
        if len(over):
            i = int(over[0])
            raise self.error(f"feature '{name}' has {counts[i]} values in {infos[i]}, more than its shape "
                             f"{list(feature.shape)} holds", ValueError, sample=i)
        if (counts != volume).any():
            out = torch.zeros(n * volume, dtype=data.dtype)
            firsts = np.cumsum(counts) - counts
            out[torch.from_numpy(np.arange(len(data)) + np.repeat(np.arange(n) * volume - firsts, counts))] = data
            data = out
        return data, np.tile(np.array(feature.shape, np.int64), (n, 1))


# --- the protobuf wire format of tf.train.Example ---

def _example_values(buf, view, pos, end, wanted, dtypes):
    """Per wanted feature: its values as bytes (see _values; slices of `view`, the memoryview
    of `buf`), or None if the Example lacks it. Example.features (1) -> Features.feature (1):
    map entries of key (1) and Feature (2)."""
    found = [None] * len(dtypes)
    for field, wire, start, stop in fields(buf, pos, end):
        if field != 1 or wire != 2:
            continue
        for entry, entry_wire, e_start, e_stop in fields(buf, start, stop):
            if entry != 1 or entry_wire != 2:
                continue
            key, value = b"", None
            for part, part_wire, p_start, p_stop in fields(buf, e_start, e_stop):
                if part_wire == 2 and part == 1:
                    key = buf[p_start:p_stop]
                elif part_wire == 2 and part == 2:
                    value = (p_start, p_stop)
            k = wanted.get(key)
            if k is not None:  # a later entry of the same key replaces an earlier one
                found[k] = _values(buf, view, value, dtypes[k])
    return found


# Feature's oneof: bytes_list (1), float_list (2), int64_list (3).
_LIST_FIELD = {string: 1, float32: 2, int64: 3}


def _values(buf, view, span, dtype):
    """The values of a Feature message (at `span`, None for an empty one) as bytes, read as
    `dtype`: the first string; little-endian floats; int64 varints back to back (packed and
    unpacked elements alike). A Feature holding another kind of list has no values."""
    kind, lists = 0, []
    for field, wire, start, stop in (fields(buf, *span) if span else ()):
        if field in (1, 2, 3) and wire == 2:
            if field != kind:  # the oneof's last kind wins; lists of one kind merge
                kind, lists = field, []
            lists.append((start, stop))
    if kind != _LIST_FIELD[dtype]:
        return b""
    chunks = []
    for start, stop in lists:
        for field, wire, v_start, v_stop in fields(buf, start, stop):
            if field != 1:
                continue
            if dtype == string:
                if wire == 2:
                    return view[v_start:v_stop]
            elif dtype == float32 and wire in (2, 5):
                if (v_stop - v_start) % 4:
                    raise Malformed("a packed float list's length is not a multiple of 4")
                chunks.append(view[v_start:v_stop])
            elif dtype == int64 and wire in (0, 2):
                if wire == 2 and v_stop > v_start and buf[v_stop - 1] >= 0x80:
                    raise Malformed("a packed int64 list ends inside a varint")
                chunks.append(view[v_start:v_stop])
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _decode(dtype, values):
    """(the values of all samples back to back as a NumPy array, the count per sample)."""
    raw = np.frombuffer(bytearray().join(values), np.uint8)  # one copy, writable
    sizes = np.array([len(v) for v in values], np.int64)
    if dtype == string:
        return raw, sizes
    if dtype == float32:
        return raw.view("<f4").astype(np.float32, copy=False), sizes // 4
    return decode_varints(raw, sizes)
