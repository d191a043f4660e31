"""readers.caffe and readers.caffe2: LMDB databases of Caffe Datum and Caffe2 TensorProtos
records written here (random encoded and raw images, labels, multi-labels, additional
tensors, boxes), compared with NVIDIA DALI's readers output by output, sample order and
reader meta included, over shards, padding, shuffling and several epochs; the protobuf
corner cases; checkpoints, lazy_init and errors."""
import collections
import json
import re
import sys

import numpy as np
import pytest

import torchdali
from torchdali.operators.base import Args, RunContext

from conftest import jpeg, make_reader, NO_DALI, optional_dali, photo

lmdb = pytest.importorskip("lmdb")

dali = optional_dali()
needs_dali = pytest.mark.skipif(dali is None, reason=NO_DALI)


# --- a protobuf writer (the wire format, by hand: Datum and TensorProtos) ---

def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def field(number, wire, payload):
    """One field: a varint value (wire 0) or a length-delimited payload (wire 2)."""
    if wire == 0:
        return varint(number << 3) + varint(payload)
    return varint(number << 3 | 2) + varint(len(payload)) + bytes(payload)


def datum(channels=None, height=None, width=None, data=None, label=None, float_data=None, encoded=None):
    """A Caffe Datum with the fields given."""
    out = b""
    for number, value in ((1, channels), (2, height), (3, width)):
        out += field(number, 0, value) if value is not None else b""
    out += field(4, 2, data) if data is not None else b""
    out += field(5, 0, label) if label is not None else b""
    out += field(6, 2, np.asarray(float_data, "<f4").tobytes()) if float_data is not None else b""
    return out + (field(7, 0, int(encoded)) if encoded is not None else b"")


FLOAT, INT32, BYTE, STRING, INT64 = 1, 2, 3, 4, 10


def tensor(data_type=None, dims=(), floats=None, int32s=None, int64s=None, byte_data=None, strings=(), packed=True):
    """A Caffe2 TensorProto; int lists packed or one varint field per value."""
    out = b"".join(field(1, 0, d) for d in dims)
    out += field(2, 0, data_type) if data_type is not None else b""
    out += field(3, 2, np.asarray(floats, "<f4").tobytes()) if floats is not None else b""
    for number, values in ((4, int32s), (10, int64s)):
        if values is not None:
            out += field(number, 2, b"".join(varint(int(v)) for v in values)) if packed else \
                b"".join(field(number, 0, int(v)) for v in values)
    out += field(5, 2, byte_data) if byte_data is not None else b""
    return out + b"".join(field(6, 2, s) for s in strings)


def protos(*tensors):
    return b"".join(field(1, 2, t) for t in tensors)


def write_lmdb(path, items):
    """An LMDB database at folder `path` holding (key, value) items; returns the path."""
    env = lmdb.open(str(path), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for key, value in items:
            txn.put(key, value)
    env.close()
    return str(path)


# --- random databases ---

def caffe_items(rng, n, raw=False):
    """Datum records: encoded (JPEGs, random bytes, some without `encoded`, some without a
    label or data) or raw HWC images of random sizes."""
    items = []
    for k in range(n):
        key = f"{k:06d}_{rng.integers(1000)}".encode()
        label = int(rng.integers(-5, 1000))
        if raw:
            h, w, c = (int(v) for v in rng.integers(1, 6, 3))
            items.append((key, datum(c, h, w, rng.integers(0, 256, h * w * c, dtype=np.uint8).tobytes(), label,
                                     encoded=False, float_data=rng.random(2) if k % 3 == 0 else None)))
            continue
        if k % 4 == 0:
            data = jpeg(photo(8 + k % 5, 10, k)).numpy().tobytes()
        else:
            data = rng.integers(0, 256, int(rng.integers(0, 40)), dtype=np.uint8).tobytes()
        kind = k % 7
        items.append((key, datum(3, 8, 10, data if kind != 5 else None, label if kind != 6 else None,
                                 encoded=None if kind in (1, 2) else True)))
    return items


def caffe2_items(rng, n, label="int", additional=(), bbox=False, image="string"):
    """TensorProtos records: an image (STRING encoded or BYTE HWC), a label (int or float:
    one value; dense: 3), additional tensors of the dtypes given, a box."""
    items = []
    for k in range(n):
        tensors = []
        if image == "string":
            tensors.append(tensor(STRING, strings=[rng.integers(0, 256, int(rng.integers(1, 30)),
                                                                dtype=np.uint8).tobytes(), b"ignored"]))
        elif image == "byte":
            h, w, c = (int(v) for v in rng.integers(1, 5, 3))
            dims = [h, w, c] if k % 2 else [h, w]
            size = h * w * (c if k % 2 else 1)
            tensors.append(tensor(BYTE, dims=dims, byte_data=rng.integers(0, 256, size, dtype=np.uint8).tobytes()))
        if label == "int":
            tensors.append(tensor(INT32, int32s=[int(rng.integers(-3, 100))], packed=k % 2 == 0))
        elif label == "float":
            tensors.append(tensor(FLOAT, floats=[rng.random()]))
        elif label == "dense":
            tensors.append(tensor(FLOAT, floats=rng.random(3)))
        for dtype in additional:
            m = int(rng.integers(0, 4))
            if dtype == FLOAT:
                tensors.append(tensor(FLOAT, dims=[m], floats=rng.normal(size=m)))
            elif dtype == INT32:
                tensors.append(tensor(INT32, int32s=rng.integers(-2**31, 2**31, m), packed=k % 2 == 0))
            else:
                tensors.append(tensor(INT64, int64s=rng.integers(-2**62, 2**62, m)))
        if bbox:
            tensors.append(tensor(INT32, int32s=rng.integers(0, 500, 4)))
        items.append((f"rec{k:04d}".encode(), protos(*tensors)))
    return items


@pytest.fixture(scope="module")
def caffe_dbs(tmp_path_factory):
    """Two encoded databases (13 records in all) and a raw one."""
    root = tmp_path_factory.mktemp("caffe")
    rng = np.random.default_rng(1)
    items = caffe_items(rng, 13)
    return {"encoded": [write_lmdb(root / "a", items[:9]), write_lmdb(root / "b", items[9:])],
            "raw": write_lmdb(root / "raw", caffe_items(rng, 11, raw=True))}


@pytest.fixture(scope="module")
def caffe2_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("caffe2")
    rng = np.random.default_rng(2)
    return {"full": write_lmdb(root / "full", caffe2_items(rng, 11, additional=(FLOAT, INT32, INT64), bbox=True)),
            "byte_float": write_lmdb(root / "bf", caffe2_items(rng, 7, label="float", image="byte")),
            "dense": write_lmdb(root / "dense", caffe2_items(rng, 6, label="dense", image=None)),
            "nolabel": write_lmdb(root / "nolabel", caffe2_items(rng, 5, label=None))}


# --- running either library ---

def run_pipe(lib, op, kwargs, batch_size, iterations):
    """Per iteration, per sample: (the first output's source info, per output (dtype, shape,
    values, source info)), from lib's (torchdali or DALI) pipeline; and the reader meta."""
    @lib.pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, prefetch_queue_depth=1, seed=5)
    def pipe():
        out = getattr(lib.fn.readers, op)(name="R", **kwargs)
        return tuple(out) if isinstance(out, (list, tuple)) else out

    p = pipe()
    p.build()
    batches = []
    for _ in range(iterations):
        outputs = p.run()
        assert all(o.layout() == "" for o in outputs)
        batches.append([tuple((str(np.array(o[j]).dtype), np.array(o[j]).shape, np.array(o[j]).tolist(),
                               o[j].source_info()) for o in outputs) for j in range(batch_size)])
    return batches, p.reader_meta("R")


def infos(batches):
    return [sample[0][3] for batch in batches for sample in batch]


def make(op, batch_size=3, **kwargs):
    return make_reader(f"readers.{op}", batch_size, **kwargs)


def run_op(reader, iterations, batch_size=3):
    """The reader's batches, run directly: per sample, per output (dtype, shape, values)."""
    out = []
    for i in range(iterations):
        outputs = reader.run([], Args(reader, {}), RunContext(iteration=i, batch_size=batch_size, thread_pool=None))
        samples = [o.as_torch_list() for o in outputs]
        out.append([tuple((str(s[j].dtype).replace("torch.", ""), tuple(s[j].shape), s[j].tolist()) for s in samples)
                    for j in range(batch_size)])
    return out


# --- against DALI ---

LOADER_CASES = [
    dict(),
    dict(num_shards=2, shard_id=1),
    dict(num_shards=3, shard_id=0, pad_last_batch=True),
    dict(num_shards=3, shard_id=2, pad_last_batch=True),
    dict(num_shards=3, shard_id=1, stick_to_shard=True),
    dict(num_shards=2, shard_id=0, stick_to_shard=True, pad_last_batch=True),
    dict(random_shuffle=True, initial_fill=1),  # a buffer of one: the stored order, as in DALI
    dict(num_shards=3, shard_id=1, random_shuffle=True, initial_fill=1, pad_last_batch=True),
]


@needs_dali
@pytest.mark.parametrize("loader", LOADER_CASES)
@pytest.mark.parametrize("batch_size", [3, 4])
def test_caffe_matches_dali(caffe_dbs, loader, batch_size):
    """Outputs, order over 2+ epochs and meta, across two databases."""
    kwargs = dict(path=caffe_dbs["encoded"], **loader)
    iterations = 2 * 13 // batch_size + 2
    ours = run_pipe(torchdali, "caffe", kwargs, batch_size, iterations)
    assert ours == run_pipe(dali, "caffe", kwargs, batch_size, iterations)
    if "num_shards" not in loader:
        assert {s.split(" at key ")[0] for s in infos(ours[0])} == set(caffe_dbs["encoded"])


@needs_dali
@pytest.mark.parametrize("kwargs", [dict(), dict(image_available=False), dict(label_available=False),
                                    dict(num_shards=2, shard_id=1, pad_last_batch=True)])
def test_caffe_raw_datums_match_dali(caffe_dbs, kwargs):
    kwargs = dict(path=caffe_dbs["raw"], **kwargs)
    ours = run_pipe(torchdali, "caffe", kwargs, 4, 7)
    assert ours == run_pipe(dali, "caffe", kwargs, 4, 7)
    assert len(ours[0][0][0]) == 2 - ("image_available" in kwargs) - ("label_available" in kwargs)


CAFFE2_CASES = [
    ("full", dict(additional_inputs=3, bbox=True)),
    ("full", dict(additional_inputs=2)),  # the remaining tensors are not read
    ("full", dict(additional_inputs=3, bbox=True, num_shards=3, shard_id=2, pad_last_batch=True)),
    ("full", dict(additional_inputs=1, num_shards=2, shard_id=0, stick_to_shard=True)),
    ("byte_float", dict()),
    ("byte_float", dict(num_shards=2, shard_id=1, random_shuffle=True, initial_fill=1)),
    ("dense", dict(image_available=False, label_type=2)),
    ("nolabel", dict(label_type=4)),
]


@needs_dali
@pytest.mark.parametrize("db,kwargs", CAFFE2_CASES)
def test_caffe2_matches_dali(caffe2_db, db, kwargs):
    kwargs = dict(path=caffe2_db[db], **kwargs)
    ours = run_pipe(torchdali, "caffe2", kwargs, 3, 9)
    assert ours == run_pipe(dali, "caffe2", kwargs, 3, 9)


@needs_dali
@pytest.mark.parametrize("op,db", [("caffe", "encoded"), ("caffe2", "full")])
def test_shuffled_epochs_hold_the_same_records_as_dalis(caffe_dbs, caffe2_db, op, db):
    """With a real shuffle buffer the picks differ from DALI's (another generator); each
    epoch of a stuck shard still holds every record of the shard once, in both."""
    path = caffe_dbs[db] if op == "caffe" else caffe2_db[db]
    kwargs = dict(path=path, random_shuffle=True, initial_fill=4, num_shards=2, shard_id=1, stick_to_shard=True)
    size = run_pipe(dali, op, kwargs, 1, 1)[1]["epoch_size"]
    shard = size - size // 2
    orders = []
    for lib in (torchdali, dali):
        got = infos(run_pipe(lib, op, kwargs, shard, 3)[0])
        epochs = [collections.Counter(got[shard * e:shard * (e + 1)]) for e in range(3)]
        assert all(e == epochs[0] for e in epochs) and set(epochs[0].values()) == {1}
        orders.append(epochs[0])
    assert orders[0] == orders[1]


@needs_dali
@pytest.mark.parametrize("op,record", [
    # Datum: repeated fields (the last wins), a label beyond int32 (its low 32 bits), a
    # negative label, `encoded` as any non-zero varint, unknown fields and a field of the
    # wrong wire type (skipped), float_data packed and not, an empty data field.
    ("caffe", datum(data=b"abc", label=(1 << 40) + 7) + field(5, 0, -3) + field(4, 2, b"xy")),
    ("caffe", datum(data=b"abc", label=(1 << 40) + 7, encoded=True)),
    ("caffe", datum(data=b"abc", label=-12345) + field(7, 0, 2) + field(99, 2, b"unknown") + field(5, 2, b"zz")),
    ("caffe", datum(3, 1, 2, b"abcdef", 4, encoded=False) + field(6, 2, b"\0" * 8) + b"\x35\0\0\x80\x3f"),
    ("caffe", datum(data=b"", label=0)),
    ("caffe", datum(data=b"q") + field(3, 0, 5)),
    # TensorProtos: unpacked int32s, int32 values from 64-bit varints, an unknown data type
    # (the default FLOAT stays), later fields winning, unknown fields, segments.
    ("caffe2", protos(tensor(STRING, strings=[b"one", b"two"]), tensor(INT32, int32s=[2**33 + 9], packed=False))),
    ("caffe2", protos(tensor(STRING, strings=[b"i"]), tensor(99, floats=[0.5]))),
    ("caffe2", protos(tensor(INT32, strings=[b"i"]) + field(2, 0, STRING),
                      tensor(INT32, int32s=[-1]) + field(8, 0, 1))),
    ("caffe2", protos(tensor(STRING, strings=[b"s"]) + field(11, 2, field(1, 0, 0) + field(2, 0, 3)),
                      tensor(FLOAT, floats=[1.0])) + field(5, 2, b"unknown")),
    ("caffe2", protos(tensor(BYTE, dims=[1, 2, 2], byte_data=b"zz") + field(5, 2, b"abcd"), tensor(INT32, int32s=[1]))),
])
def test_protobuf_corner_cases_match_dali(tmp_path, op, record):
    path = write_lmdb(tmp_path / "db", [(b"k", record)])
    assert run_pipe(torchdali, op, dict(path=path), 2, 1) == run_pipe(dali, op, dict(path=path), 2, 1)


@needs_dali
@pytest.mark.parametrize("op,record", [
    ("caffe", b"\x22\xff\xff"),  # a length past the end
    ("caffe", b"\x28"),  # a varint cut short
    ("caffe", datum(data=b"a") + field(6, 2, b"\0" * 5)),  # packed floats of 5 bytes
    ("caffe", datum(data=b"a") + b"\x2f"),  # wire type 7
    ("caffe2", field(1, 2, b"\x22\x01\x80")),  # packed int32s ending inside a varint
    ("caffe2", protos(tensor(STRING, strings=[b"s"]) + field(11, 2, field(1, 0, 0)), tensor(INT32, int32s=[1]))),
])
def test_malformed_records_fail_in_both(tmp_path, op, record):
    path = write_lmdb(tmp_path / "db", [(b"key one", record)])
    with pytest.raises(RuntimeError, match="Error while parsing"):
        run_pipe(dali, op, dict(path=path), 1, 1)
    with pytest.raises(RuntimeError, match=f"error parsing {re.escape(path)} at key key one: not a valid"):
        run_pipe(torchdali, op, dict(path=path), 1, 1)


@needs_dali
def test_arguments_and_names_are_dalis():
    import nvidia.dali.backend as backend
    from torchdali import schema

    for op, dali_name, cls, old in [("caffe", "readers__Caffe", "CaffeReader", "caffe_reader"),
                                    ("caffe2", "readers__Caffe2", "Caffe2Reader", "caffe2_reader")]:
        sch = schema.get(f"readers.{op}")
        assert set(backend.GetSchema(dali_name).GetArgumentNames()) == set(sch.args) - {"device", "name"}
        assert sch.deprecated_names == (old,) and cls in sch.class_names
        dali_schema = backend.GetSchema(dali_name)
        for name in dali_schema.GetArgumentNames():
            if name != "bytes_per_sample_hint":
                assert dali_schema.HasArgumentDefaultValue(name) != sch.args[name].required, name
                assert not sch.args[name].required and \
                    dali_schema.GetArgumentDefaultValueString(name) == str(sch.args[name].default) or \
                    sch.args[name].required, name


# --- what DALI 2.4 cannot do: sparse labels ---

@pytest.mark.parametrize("label_type,index_type", [(1, INT32), (1, FLOAT), (3, INT32), (3, FLOAT)])
def test_sparse_labels(tmp_path, label_type, index_type):
    """MULTI_LABEL_SPARSE: 1 at the indices (of the indices' type); WEIGHTED: the weights
    (float32). Additional tensors and the box follow the label's tensors."""
    rng = np.random.default_rng(label_type)
    items, expected = [], []
    for k in range(5):
        idx = rng.choice(6, int(rng.integers(0, 4)), replace=False)
        weights = rng.random(len(idx)).astype(np.float32)
        label = tensor(INT32, int32s=idx) if index_type == INT32 else tensor(FLOAT, floats=idx)
        extra = [tensor(FLOAT, floats=weights)] if label_type == 3 else []
        box = rng.integers(0, 9, 4)
        items.append((b"%d" % k, protos(tensor(STRING, strings=[b"img%d" % k]), label, *extra,
                                        tensor(INT64, int64s=[k]), tensor(INT32, int32s=box))))
        dense = np.zeros(6, np.float32 if label_type == 3 or index_type == FLOAT else np.int32)
        dense[idx] = weights if label_type == 3 else 1
        expected.append((list(b"img%d" % k), dense.tolist(), str(dense.dtype), [k], box.tolist()))
    path = write_lmdb(tmp_path / "db", items)
    batches, _ = run_pipe(torchdali, "caffe2", dict(path=path, label_type=label_type, num_labels=6,
                                                    additional_inputs=1, bbox=True), 5, 1)
    assert [(s[0][2], s[1][2], s[1][0], s[2][2], s[3][2]) for s in batches[0]] == expected
    if dali is not None:  # DALI 2.4 fails on every record of these label types
        with pytest.raises(RuntimeError):
            run_pipe(dali, "caffe2", dict(path=path, label_type=label_type, num_labels=6, additional_inputs=1,
                                          bbox=True), 5, 1)


# --- the loader: checkpoints, lazy_init, APIs ---

@pytest.mark.parametrize("kwargs", [dict(random_shuffle=True, initial_fill=5),
                                    dict(num_shards=3, shard_id=2, pad_last_batch=True)])
def test_state_dict_resume(caffe_dbs, kwargs):
    op = make("caffe", batch_size=4, path=caffe_dbs["encoded"], **kwargs)
    run_op(op, 5, 4)
    state = json.loads(json.dumps(op.state_dict()))
    expected = run_op(op, 6, 4)
    fresh = make("caffe", batch_size=4, path=caffe_dbs["encoded"], **kwargs)
    fresh.load_state_dict(state)
    assert run_op(fresh, 6, 4) == expected


def test_lazy_init_opens_the_database_at_the_first_run(tmp_path):
    op = make("caffe2", path=str(tmp_path / "db"), lazy_init=True, label_type=4)
    write_lmdb(tmp_path / "db", [(b"a", protos(tensor(STRING, strings=[b"xy"])))])  # written after the build
    assert run_op(op, 1) == [[(("uint8", (2,), [120, 121]),)] * 3]
    assert op.meta()["epoch_size"] == 1


def test_keys_and_repeated_paths(tmp_path):
    """Keys in LMDB's byte order, named in the source info as they are (bytes that are not
    UTF-8 escaped as surrogates); a database named twice is read twice."""
    path = write_lmdb(tmp_path / "db", [(b"b\xff", datum(data=b"2")), (b"a\x00b", datum(data=b"1")),
                                        (b"a", datum(data=b"0"))])
    op = make("caffe", batch_size=6, path=[path, path], label_available=False)
    (images,) = op.run([], Args(op, {}), RunContext(iteration=0, batch_size=6, thread_pool=None))
    assert [bytes(s.tolist()) for s in images.as_torch_list()] == [b"0", b"1", b"2"] * 2
    assert images.source_info[:3] == [f"{path} at key a", f"{path} at key a\x00b", f"{path} at key b\udcff"]


def test_random_shuffle_changes_with_the_seed(caffe_dbs):
    orders = [tuple(tuple(s[0][2]) for b in run_op(make("caffe", batch_size=13, seed=seed, path=caffe_dbs["encoded"],
                                                   random_shuffle=True, initial_fill=6), 1, 13) for s in b)
              for seed in (1, 2)]
    assert orders[0] != orders[1] and sorted(orders[0]) == sorted(orders[1])


def test_ops_and_deprecated_names(caffe_dbs):
    kwargs = dict(path=caffe_dbs["encoded"])
    expected = run_pipe(torchdali, "caffe", kwargs, 3, 1)[0]

    @torchdali.pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe(kind):
        if kind == "ops":
            return tuple(torchdali.ops.readers.Caffe(**kwargs)())
        if kind == "legacy class":
            return tuple(torchdali.ops.CaffeReader(**kwargs)())
        with pytest.warns(DeprecationWarning, match="readers.caffe"):
            return tuple(torchdali.fn.caffe_reader(**kwargs))

    for kind in ("ops", "legacy class", "deprecated fn"):
        p = pipe(kind)
        p.build()
        images, labels = p.run()
        assert [np.array(images[j]).tolist() for j in range(3)] == [s[0][2] for s in expected[0]]
        assert [np.array(labels[j]).tolist() for j in range(3)] == [s[1][2] for s in expected[0]]


def test_caffe2_deprecated_name(caffe2_db):
    @torchdali.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        with pytest.warns(DeprecationWarning, match="readers.caffe2"):
            return torchdali.fn.caffe2_reader(path=caffe2_db["nolabel"], label_type=4)

    p = pipe()
    p.build()
    (images,) = p.run()
    assert images[0].source_info() == caffe2_db["nolabel"] + " at key rec0000"


# --- errors ---

@pytest.mark.parametrize("op,kwargs,cls,message", [
    ("caffe", dict(path=[]), ValueError, "path is empty"),
    ("caffe", dict(path="{tmp}/missing"), ValueError, "path '.*missing' does not exist"),
    ("caffe", dict(path="{tmp}"), RuntimeError, "cannot read '.*' as an LMDB database .*No such file"),
    ("caffe", dict(path="{tmp}/garbage"), RuntimeError, "cannot read '.*garbage' as an LMDB database.*not an LMDB"),
    ("caffe", dict(path="{tmp}/empty"), ValueError, "hold no records"),
    ("caffe", dict(path="{tmp}/ok", image_available=False, label_available=False), ValueError, "nothing to output"),
    ("caffe", dict(path="{tmp}/ok", num_shards=3), ValueError, "num_shards = 3 is larger"),
    ("caffe2", dict(path="{tmp}/ok", image_available=False, label_type=4), ValueError, "nothing to output"),
    ("caffe2", dict(path="{tmp}/ok", label_type=5), ValueError, "label_type"),
    ("caffe2", dict(path="{tmp}/ok", num_labels=0), ValueError, "num_labels"),
])
def test_argument_and_database_errors(tmp_path, op, kwargs, cls, message):
    write_lmdb(tmp_path / "ok", [(b"a", datum(data=b"x")), (b"b", datum(data=b"y"))])
    write_lmdb(tmp_path / "empty", [])
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "data.mdb").write_bytes(bytes(range(256)) * 40)
    kwargs = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in kwargs.items()}
    with pytest.raises(cls, match=f"readers.{op}.*{message}"):
        make(op, **kwargs)


@pytest.mark.parametrize("op,kwargs,records,message", [
    ("caffe", {}, [datum(3, 2, 2, b"abc", encoded=False)], "a raw Datum of 3 bytes has height, width, channels"),
    ("caffe", {}, [datum(data=b"ab", encoded=True), datum(1, 1, 2, b"ab", encoded=False)],
     "output 0: .* at key 1 gives uint8 of shape \\(1, 2, 1\\).*same type and number of dims"),
    ("caffe2", {}, [protos(tensor(STRING))], "the record holds 1 tensors; .* read 2"),
    ("caffe2", {}, [protos(tensor(STRING), tensor(INT32, int32s=[1]))], "STRING without any string"),
    ("caffe2", {}, [protos(tensor(FLOAT, floats=[1]), tensor(INT32, int32s=[1]))], "the image tensor is FLOAT"),
    ("caffe2", {}, [protos(tensor(BYTE, dims=[2, 2], byte_data=b"abc"), tensor(INT32, int32s=[1]))],
     "holds 3 bytes for dims \\[2, 2\\]"),
    ("caffe2", {}, [protos(tensor(STRING, strings=[b"s"]), tensor(INT64, int64s=[1]))], "the label tensor is INT64"),
    ("caffe2", {}, [protos(tensor(STRING, strings=[b"s"]), tensor(INT32, int32s=[1, 2]))],
     "holds 2 values; SINGLE_LABEL takes 1"),
    ("caffe2", {}, [protos(tensor(STRING, strings=[b"s"]), tensor(INT32, int32s=[1])),
                    protos(tensor(STRING, strings=[b"s"]), tensor(FLOAT, floats=[1]))],
     "output 1: .* gives float32 .*same type"),
    ("caffe2", dict(label_type=1, num_labels=3), [protos(tensor(STRING, strings=[b"s"]), tensor(INT32, int32s=[3]))],
     "label index 3 is outside num_labels = 3"),
    ("caffe2", dict(label_type=3, num_labels=3),
     [protos(tensor(STRING, strings=[b"s"]), tensor(INT32, int32s=[0, 1]), tensor(FLOAT, floats=[1]))],
     "weights tensor holds 1 values for 2 indices"),
    ("caffe2", dict(additional_inputs=1), [protos(tensor(STRING, strings=[b"s"]), tensor(INT32, int32s=[1]),
                                                  tensor(BYTE, byte_data=b"x"))], "additional tensor is BYTE"),
    ("caffe2", dict(bbox=True), [protos(tensor(STRING, strings=[b"s"]), tensor(INT32, int32s=[1]),
                                        tensor(INT32, int32s=[1, 2, 3]))], "box tensor is INT32 with 3"),
])
def test_record_errors_name_the_key(tmp_path, op, kwargs, records, message):
    path = write_lmdb(tmp_path / "db", [(b"%d" % k, r) for k, r in enumerate(records)])
    reader = make(op, batch_size=len(records), path=path, **kwargs)
    with pytest.raises(RuntimeError, match=f"readers.{op} \\('reader'\\): .*{message}") as e:
        run_op(reader, 1, len(records))
    assert f"{path} at key {len(records) - 1}" in str(e.value)


def test_without_lmdb_the_error_says_how_to_install(monkeypatch, tmp_path):
    path = write_lmdb(tmp_path / "db", [(b"a", datum(data=b"x"))])
    monkeypatch.setitem(sys.modules, "lmdb", None)
    for op in ("caffe", "caffe2"):
        with pytest.raises(ImportError, match=f"readers.{op} \\('reader'\\): .*needs the lmdb package: pip install"):
            make(op, path=path, lazy_init=True)
