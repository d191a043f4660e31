"""readers.caffe and readers.caffe2: the records of Caffe and Caffe2 LMDB databases, without
Caffe or protobuf.

Both are `readers.file` over another list: the entries are the databases' records in key
order (lmdb_db), read in that order as DALI's LMDBLoader reads them, so the shuffle buffer
alone shuffles; sharding, padding and checkpoints are FileReader's. A record is a protobuf
message, walked with torchdali.protowire's wire-format parser: a Caffe `Datum` (readers.caffe)
or Caffe2 `TensorProtos` (readers.caffe2). Source info is '<path> at key <key>', on the
images only, as in DALI.

As in DALI 2.4: a Datum without `encoded` is encoded (1D bytes); encoded=False gives its
bytes as they are, shaped (height, width, channels) (Caffe's raw datums are CHW: DALI does
not transpose them, nor do we); float_data is ignored; a Datum without data or label gives
an empty output. A Caffe2 image is STRING (its first string, encoded) or BYTE (byte_data
shaped (dims[0], dims[1], dims[2] or 1)); labels are INT32 (int32) or FLOAT (float32);
additional tensors are FLOAT, INT32 or INT64, 1D whatever their dims.

Where DALI 2.4 differs (its bugs, not followed): it fails on every record with
label_type MULTI_LABEL_SPARSE or MULTI_LABEL_WEIGHTED_SPARSE (it declares a second label
output it never fills, and an operator-precedence slip makes it read the weights as the
bounding box). Here they give one label output of `num_labels` values (1 at the indices;
float32 weights for the weighted kind, whose weights are the tensor after the indices) and
the record's layout is Caffe2's: image, label tensor(s), additional tensors, box. A record
with a tensor after those is read (the tensor ignored) where `bbox` is False (DALI fails),
and data DALI copies without checking (a raw image whose size disagrees with its shape, a
label index outside num_labels, missing tensors) raises an error naming the record.
"""
import dataclasses

import numpy as np
import torch

from ..protowire import Malformed, decode_varints, fields, varint
from ..schema import BOOL, INT, REQUIRED, STRS, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec
from .lmdb_db import Databases, require_lmdb
from .readers import LOADER_ARGS, FileReader

_OWN_DOCS = {  # loader arguments whose readers.file documentation does not fit LMDB
    "dont_use_mmap": "Accepted for compatibility: LMDB maps its databases in memory.",
    "random_shuffle": "Pick records randomly from a buffer of `initial_fill` records, read in key order.",
    "lazy_init": "Open the databases at the first run instead of at build time.",
}
_PATH = Arg("path", STRS, REQUIRED, "The LMDB databases (folders holding data.mdb), read one after the other.")
_IMAGE_AVAILABLE = Arg("image_available", BOOL, True, "Whether the records hold an image (the first output).")


def _varints(chunks):
    """The int64 values of varints back to back in the byte strings `chunks`."""
    raw = np.frombuffer(bytearray().join(chunks), np.uint8)
    return decode_varints(raw, np.array([len(raw)], np.int64))[0]


def _loader_args():
    args = [FileReader.schema.args[name] for name in LOADER_ARGS]
    return [dataclasses.replace(a, doc=_OWN_DOCS[a.name]) if a.name in _OWN_DOCS else a for a in args]


# --- protobuf wire format: Datum, TensorProto ---

def _int32(value):
    """A varint read as protobuf reads an int32: its low 32 bits, signed."""
    return (value & 0xFFFFFFFF) - ((value & 0x80000000) << 1)


def _packed(buf, wire, start, stop, width):
    """Checks a repeated field's element or packed run as protobuf does: a packed run of
    fixed `width`-byte values is a whole number of them, one of varints (width 0) does not
    end inside a varint."""
    if wire != 2:
        return
    if width and (stop - start) % width:
        raise Malformed(f"a packed field's length ({stop - start}) is not a multiple of {width}")
    if not width and stop > start and buf[stop - 1] >= 0x80:
        raise Malformed("a packed varint field ends inside a varint")


def parse_datum(buf):
    """A Caffe Datum's (data as a memoryview or None, label or None, encoded or None,
    (height, width, channels)); None where the record lacks the field."""
    view = memoryview(buf)
    dims, data, label, encoded = {1: 0, 2: 0, 3: 0}, None, None, None
    for field, wire, start, stop in fields(buf, 0, len(buf)):
        if wire == 0 and field in (1, 2, 3, 5, 7):
            value = varint(buf, start, stop)[0]
            if field == 5:
                label = _int32(value)
            elif field == 7:
                encoded = value != 0
            else:
                dims[field] = _int32(value)
        elif field == 4 and wire == 2:
            data = view[start:stop]
        elif field == 6 and wire in (2, 5):  # float_data: checked, not used
            _packed(buf, wire, start, stop, 4)
    return data, label, encoded, (dims[2], dims[3], dims[1])


FLOAT, INT32, BYTE, STRING, INT64 = 1, 2, 3, 4, 10
_DATA_TYPES = set(range(11)) | {12, 13}  # TensorProto.DataType's values; others stay unknown fields
_TYPE_NAMES = {0: "UNDEFINED", FLOAT: "FLOAT", INT32: "INT32", BYTE: "BYTE", STRING: "STRING", 5: "BOOL", 6: "UINT8",
               7: "INT8", 8: "UINT16", 9: "INT16", INT64: "INT64", 12: "FLOAT16", 13: "DOUBLE"}


@dataclasses.dataclass
class Tensor:
    """The fields of a Caffe2 TensorProto that DALI reads; the numeric lists as the raw
    bytes of their elements (varints, little-endian floats), decoded on demand."""

    dims: list
    data_type: int = FLOAT  # proto2 default
    floats: list = dataclasses.field(default_factory=list)
    int32s: list = dataclasses.field(default_factory=list)
    int64s: list = dataclasses.field(default_factory=list)
    byte_data: memoryview = memoryview(b"")
    strings: list = dataclasses.field(default_factory=list)

    def float_data(self):
        return np.frombuffer(b"".join(self.floats), "<f4").astype(np.float32)

    def int32_data(self):
        return _varints(self.int32s).astype(np.int32)  # wraps, as protobuf's int32

    def int64_data(self):
        return _varints(self.int64s)


def parse_tensor(buf, view, pos, end):
    """The TensorProto at buf[pos:end] (`view`: memoryview(buf))."""
    t, dims = Tensor([]), []
    lists, segment = {1: dims, 4: t.int32s, 10: t.int64s}, None
    for field, wire, start, stop in fields(buf, pos, end):
        if field in lists and wire in (0, 2):
            _packed(buf, wire, start, stop, 0)
            lists[field].append(view[start:stop])
        elif field == 2 and wire == 0:
            value = _int32(varint(buf, start, stop)[0])
            if value in _DATA_TYPES:
                t.data_type = value
        elif field == 3 and wire in (2, 5):
            _packed(buf, wire, start, stop, 4)
            t.floats.append(view[start:stop])
        elif field == 9 and wire in (1, 2):  # double_data: checked, not used
            _packed(buf, wire, start, stop, 8)
        elif field == 5 and wire == 2:
            t.byte_data = view[start:stop]
        elif field == 6 and wire == 2:
            t.strings.append(view[start:stop])
        elif field == 11 and wire == 2:  # segment: its required begin and end, merged over occurrences
            segment = (segment or set()) | {f for f, w, _, _ in fields(buf, start, stop) if w == 0 and f in (1, 2)}
    if segment is not None and segment != {1, 2}:
        raise Malformed("a TensorProto's segment lacks its required begin or end")
    t.dims = _varints(dims).tolist() if dims else []
    return t


def parse_protos(buf):
    """The TensorProto list of a Caffe2 TensorProtos record."""
    view = memoryview(buf)
    return [parse_tensor(buf, view, start, stop) for field, wire, start, stop in fields(buf, 0, len(buf))
            if field == 1 and wire == 2]


# --- the readers ---

class _LMDBReader(FileReader):
    """FileReader over the records of LMDB databases; subclasses parse a batch's records."""

    what = ""  # the record's message, for errors

    def _check_args(self, a):
        require_lmdb(self)
        if not a["path"]:
            raise self.error("path is empty; give the LMDB databases to read", ValueError)

    def _list_entries(self):
        self.db = Databases(self, self.spec.args["path"])
        if not self.db.keys:
            raise self.error(f"the LMDB databases {self.db.paths} hold no records", ValueError)
        return "", [(self.db.name(e), e) for e in range(len(self.db.keys))]

    def _prepare(self):
        super()._prepare()
        if self.shuffle:  # records are read in key order: the shuffle buffer alone shuffles
            self.base_order = np.arange(self.size)
            self._restart()

    def run(self, inputs, args, ctx):
        if self.entries is None:
            self._prepare()
        picks = self._next_batch(ctx.batch_size)
        infos = [self.names[e] for e in picks]
        outputs = [[] for _ in range(self.spec.num_outputs)]
        for i, (record, info) in enumerate(zip(self.db.read(picks), infos)):
            try:
                values = self._parse(record)
            except Malformed as e:
                raise self.error(f"error parsing {info}: not a valid {self.what} ({e})", sample=i) from None
            except ValueError as e:  # a valid message that DALI cannot read
                raise self.error(f"{info}: {e}", sample=i) from None
            for out, value in zip(outputs, values):
                out.append(value)
        return [self._output(k, samples, infos) for k, samples in enumerate(outputs)]

    def _output(self, k, samples, infos):
        """Output k from its NumPy samples; its samples must agree in dtype and dims, as DALI's do."""
        for i, s in enumerate(samples):
            if s.dtype != samples[0].dtype or s.ndim != samples[0].ndim:
                raise self.error(f"output {k}: {infos[i]} gives {s.dtype} of shape {s.shape}, {infos[0]} "
                                 f"{samples[0].dtype} of shape {samples[0].shape}; a batch's samples must "
                                 "have the same type and number of dims", sample=i)
        flat = torch.from_numpy(np.concatenate([s.reshape(-1) for s in samples]))
        shapes = [s.shape for s in samples]
        first = self.image_first and k == 0
        return TensorList.from_flat(flat, shapes, device="cpu", source_info=infos if first else [""] * len(infos))


def _caffe_outputs(args, num_inputs):
    return int(args["image_available"]) + int(args["label_available"])


@register(
    "readers.caffe", aliases=("CaffeReader",), deprecated_names=("caffe_reader",), outputs=_caffe_outputs,
    args=[_PATH, _IMAGE_AVAILABLE,
          Arg("label_available", BOOL, True, "Whether the records hold a label (the last output)."),
          ] + _loader_args())
class CaffeReader(_LMDBReader):
    """Reads Caffe LMDB databases of Datum records: the image (encoded: 1D uint8; a raw
    datum, encoded=False: uint8 (height, width, channels)) and the label (int32, shape (1,));
    an empty output where the record lacks either. Shards, pads and shuffles as
    readers.file does."""

    what = "Caffe Datum"

    def _check_args(self, a):
        super()._check_args(a)
        if not (a["image_available"] or a["label_available"]):
            raise self.error("image_available and label_available are both False: there is nothing to output",
                             ValueError)
        self.image_first = a["image_available"]
        self.label = a["label_available"]

    def plan(self, inputs):
        """The images (uint8, 1D or HWC) and the labels (int32, 1D)."""
        specs = [BatchSpec("cpu", torch.uint8, None, "")] if self.image_first else []
        return specs + ([BatchSpec("cpu", torch.int32, 1, "")] if self.label else []), self.run

    def _parse(self, record):
        data, label, encoded, hwc = parse_datum(record)
        out = []
        if self.image_first:
            image = np.frombuffer(data if data is not None else b"", np.uint8)
            if data is not None and encoded is False:
                if min(hwc) < 0 or np.prod(hwc) != len(image):
                    raise ValueError(f"a raw Datum of {len(image)} bytes has height, width, channels {hwc}")
                image = image.reshape(hwc)
            out.append(image)
        if self.label:
            out.append(np.array([] if label is None else [label], np.int32))
        return out


_LABEL_TYPES = {0: "SINGLE_LABEL", 1: "MULTI_LABEL_SPARSE", 2: "MULTI_LABEL_DENSE", 3: "MULTI_LABEL_WEIGHTED_SPARSE",
                4: "NO_LABEL"}
_SINGLE, _SPARSE, _DENSE, _WEIGHTED, _NO_LABEL = range(5)


def _caffe2_outputs(args, num_inputs):
    return (int(args["image_available"]) + int(args["label_type"] != _NO_LABEL) + args["additional_inputs"]
            + int(args["bbox"]))


@register(
    "readers.caffe2", aliases=("Caffe2Reader",), deprecated_names=("caffe2_reader",), outputs=_caffe2_outputs,
    args=[_PATH, _IMAGE_AVAILABLE,
          Arg("label_type", INT, 0, "The label's kind: 0 SINGLE_LABEL (one value), 1 MULTI_LABEL_SPARSE (the "
              "active class indices, output as num_labels 0/1 values), 2 MULTI_LABEL_DENSE (the values as "
              "stored), 3 MULTI_LABEL_WEIGHTED_SPARSE (indices, then a tensor of their weights: num_labels "
              "float32 values), 4 NO_LABEL.", choices=tuple(_LABEL_TYPES)),
          Arg("num_labels", INT, 1, "Number of classes: the length of sparse labels.",
              check=lambda v: None if v >= 1 else "must be at least 1"),
          Arg("additional_inputs", INT, 0, "Number of tensors after the label to output (1D each).",
              check=lambda v: None if v >= 0 else "must be at least 0"),
          Arg("bbox", BOOL, False, "Output the tensor after those: a box of 4 int32 values."),
          ] + _loader_args())
class Caffe2Reader(_LMDBReader):
    """Reads Caffe2 LMDB databases of TensorProtos records: the image (STRING: encoded, 1D
    uint8; BYTE: uint8 HWC), the label (int32 or float32 as stored, by `label_type`), the
    `additional_inputs` tensors (1D float32, int32 or int64) and the box (int32 (4,)), each
    as asked. Shards, pads and shuffles as readers.file does."""

    what = "Caffe2 TensorProtos"

    def _check_args(self, a):
        super()._check_args(a)
        if _caffe2_outputs(a, 0) == 0:
            raise self.error("image_available is False and label_type is NO_LABEL, with no additional inputs "
                             "or bbox: there is nothing to output", ValueError)
        self.image_first = a["image_available"]
        self.label_type, self.num_labels = a["label_type"], a["num_labels"]
        self.additional, self.bbox = a["additional_inputs"], a["bbox"]

    def plan(self, inputs):
        """Image (uint8, 1D or HWC), label (int32 or float32, 1D), additional tensors (1D),
        box (int32 (4,))."""
        specs = [BatchSpec("cpu", torch.uint8, None, "")] if self.image_first else []
        if self.label_type != _NO_LABEL:
            specs.append(BatchSpec("cpu", torch.float32 if self.label_type == _WEIGHTED else None, 1, ""))
        specs += [BatchSpec("cpu", None, 1, "")] * self.additional
        return specs + ([BatchSpec("cpu", torch.int32, 1, "")] if self.bbox else []), self.run

    def _parse(self, record):
        protos = parse_protos(record)
        needed = (int(self.image_first) + (self.label_type != _NO_LABEL) + (self.label_type == _WEIGHTED)
                  + self.additional + int(self.bbox))
        if len(protos) < needed:
            raise ValueError(f"the record holds {len(protos)} tensors; image_available={self.image_first}, "
                             f"label_type={_LABEL_TYPES[self.label_type]}, additional_inputs={self.additional} "
                             f"and bbox={self.bbox} read {needed}")
        protos = iter(protos)
        out = [self._image(next(protos))] if self.image_first else []
        if self.label_type != _NO_LABEL:
            out.append(self._label(protos))
        for _ in range(self.additional):
            out.append(self._additional(next(protos)))
        if self.bbox:
            box = next(protos)
            values = box.int32_data()
            if box.data_type != INT32 or len(values) != 4:
                raise ValueError(f"the box tensor is {_TYPE_NAMES[box.data_type]} with {len(values)} int32 values; "
                                 "expected INT32 with 4")
            out.append(values)
        return out

    @staticmethod
    def _image(t):
        if t.data_type == STRING:
            if not t.strings:
                raise ValueError("the image tensor is STRING without any string")
            return np.frombuffer(t.strings[0], np.uint8)
        if t.data_type != BYTE:
            raise ValueError(f"the image tensor is {_TYPE_NAMES[t.data_type]}; expected STRING (encoded) or BYTE")
        if len(t.dims) < 2:
            raise ValueError(f"the BYTE image tensor has dims {t.dims}; expected [height, width(, channels)]")
        shape = (t.dims[0], t.dims[1], t.dims[2] if len(t.dims) == 3 else 1)
        image = np.frombuffer(t.byte_data, np.uint8)
        if min(shape) < 0 or np.prod(shape) != len(image):
            raise ValueError(f"the BYTE image tensor holds {len(image)} bytes for dims {t.dims}")
        return image.reshape(shape)

    def _label(self, protos):
        t = next(protos)
        if t.data_type not in (INT32, FLOAT):
            raise ValueError(f"the label tensor is {_TYPE_NAMES[t.data_type]}; expected INT32 or FLOAT")
        values = t.int32_data() if t.data_type == INT32 else t.float_data()
        if self.label_type == _SINGLE and len(values) != 1:
            raise ValueError(f"the label tensor holds {len(values)} values; SINGLE_LABEL takes 1")
        if self.label_type in (_SINGLE, _DENSE):
            return values
        indices = values.astype(np.int64)  # DALI casts float indices to int
        bad = (indices < 0) | (indices >= self.num_labels)
        if bad.any():
            raise ValueError(f"label index {values[bad][0]} is outside num_labels = {self.num_labels}")
        if self.label_type == _SPARSE:
            dense = np.zeros(self.num_labels, values.dtype)
            dense[indices] = 1
            return dense
        weights = next(protos).float_data()
        if len(weights) < len(indices):
            raise ValueError(f"the label weights tensor holds {len(weights)} values for {len(indices)} indices")
        dense = np.zeros(self.num_labels, np.float32)
        dense[indices] = weights[:len(indices)]
        return dense

    @staticmethod
    def _additional(t):
        if t.data_type == FLOAT:
            return t.float_data()
        if t.data_type == INT32:
            return t.int32_data()
        if t.data_type == INT64:
            return t.int64_data()
        raise ValueError(f"an additional tensor is {_TYPE_NAMES[t.data_type]}; expected FLOAT, INT32 or INT64")
