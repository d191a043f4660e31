"""readers.tfrecord, the tfrecord namespace and the tfrecord2idx tool: records written here
by a small TFRecord / tf.train.Example writer (no TensorFlow), decoded features, shapes and
errors, sharding, shuffling and checkpoints; an optional class compares everything with
NVIDIA DALI when `nvidia.dali` is importable."""
import collections
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch

import torchdali
import torchdali.tfrecord as tfrec
from torchdali import fn, schema
from torchdali.operators.base import Args, OpSpec, RunContext
from torchdali.tools import tfrecord2idx

# --- a TFRecord writer ---


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for byte in data:
        c = _CRC_TABLE[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, wire, payload):
    head = varint(number << 3 | wire)
    return head + (varint(len(payload)) + payload if wire == 2 else payload)


def bytes_feature(values):
    return field(1, 2, b"".join(field(1, 2, v) for v in values))


def float_feature(values, packed=True):
    if packed:
        return field(2, 2, field(1, 2, struct.pack(f"<{len(values)}f", *values)) if values else b"")
    return field(2, 2, b"".join(field(1, 5, struct.pack("<f", v)) for v in values))


def int64_feature(values, packed=True):
    if packed == "mixed":  # a packed run, then unpacked elements (a valid, if unusual, encoding)
        half = len(values) // 2
        return field(3, 2, field(1, 2, b"".join(map(varint, values[:half])))
                     + b"".join(field(1, 0, varint(v)) for v in values[half:]))
    if packed:
        return field(3, 2, field(1, 2, b"".join(map(varint, values))) if values else b"")
    return field(3, 2, b"".join(field(1, 0, varint(v)) for v in values))


def example(features):
    entries = b"".join(field(1, 2, field(1, 2, name.encode()) + field(2, 2, value))
                       for name, value in features.items())
    return field(1, 2, entries)


def tf_record(payload):
    length = struct.pack("<Q", len(payload))
    return length + struct.pack("<I", masked_crc(length)) + payload + struct.pack("<I", masked_crc(payload))


def write_tfrecord(path, examples):
    """Write the records; returns their (offset, size) spans."""
    spans, offset = [], 0
    with open(path, "wb") as f:
        for payload in examples:
            rec = tf_record(payload)
            f.write(rec)
            spans.append((offset, len(rec)))
            offset += len(rec)
    return spans


def random_example(rng, k):
    """A record with an image, a label, ids (packed, unpacked or mixed), boxes, a fixed 2x3
    matrix, extreme int64s and a feature nobody asks for."""
    n_ids, n_boxes = int(rng.integers(0, 6)), int(rng.integers(0, 4))
    ids = rng.integers(-2**40, 2**40, n_ids).tolist()
    return example({
        "unused": bytes_feature([b"x" * int(rng.integers(0, 300))]),
        "image": bytes_feature([rng.bytes(int(rng.integers(0, 200))), b"second value"]),
        "label": int64_feature([k], packed=bool(k % 2)),
        "ids": int64_feature(ids, packed=["mixed", True, False][k % 3]),
        "boxes": float_feature(rng.random(4 * n_boxes, np.float32).tolist(), packed=k % 3 != 1),
        "matrix": float_feature((rng.standard_normal(6) * 100).astype(np.float32).tolist()),
        "extremes": int64_feature([-2**63, 2**63 - 1, -1, 0, 1]),
    }), ids


FEATURES = {
    "image": tfrec.FixedLenFeature([], tfrec.string, ""),
    "label": tfrec.FixedLenFeature([], tfrec.int64, -1),
    "ids": tfrec.VarLenFeature(tfrec.int64, 0),
    "boxes": tfrec.VarLenFeature([4], tfrec.float32, 0.0),
    "matrix": tfrec.FixedLenFeature([2, 3], tfrec.float32, 0.0),
    "extremes": tfrec.FixedLenFeature([5], tfrec.int64, 0),
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Three files of 4, 7 and 2 records with their indexes; returns (paths, index paths, ids
    per record)."""
    root = tmp_path_factory.mktemp("tfrecords")
    rng = np.random.default_rng(5)
    paths, indexes, all_ids, k = [], [], [], 0
    for f, count in enumerate([4, 7, 2]):
        examples = []
        for _ in range(count):
            ex, ids = random_example(rng, k)
            examples.append(ex)
            all_ids.append(ids)
            k += 1
        paths.append(str(root / f"part{f}.tfrecord"))
        indexes.append(str(root / f"part{f}.idx"))
        write_tfrecord(paths[-1], examples)
        assert tfrecord2idx.main([paths[-1], indexes[-1]]) == 0
    return paths, indexes, all_ids


def make(batch_size=3, seed=1234, **kwargs):
    sch = schema.get("readers.tfrecord")
    args = sch.check_args(kwargs)
    spec = OpSpec(schema=sch, name="reader", device="cpu", args=args, arg_input_names=(),
                  num_outputs=sch.outputs_for(args, 0), seed=seed, max_batch_size=batch_size, num_threads=1,
                  device_id=None)
    return sch.impl(spec)


def make_on(data, **kwargs):
    paths, indexes, _ = data
    return make(path=paths, index_path=indexes, **{"features": FEATURES, **kwargs})


def run(op, iterations, batch_size=3):
    """Per batch, per sample: (source_info, tuple of the features as (dtype, shape, values))."""
    out = []
    for i in range(iterations):
        outputs = op.run([], Args(op, {}), RunContext(iteration=i, batch_size=batch_size, thread_pool=None))
        assert all(len(o) == batch_size and o.layout() == "" for o in outputs)
        assert all(o.source_info == outputs[0].source_info for o in outputs)
        out.append([(outputs[0].source_info[j],
                     tuple(_sample(o.as_torch_list()[j]) for o in outputs)) for j in range(batch_size)])
    return out


def _sample(t):
    return str(t.dtype).replace("torch.", ""), tuple(t.shape), t.tolist()


def infos(batches):
    return [s[0] for b in batches for s in b]


# --- the writer, the tfrecord namespace and the index tool ---

def test_crc32c_of_the_writer():
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(b"") == 0


def test_feature_helpers():
    assert (tfrec.int64, tfrec.string, tfrec.float32) == (0, 1, 2)
    f = tfrec.FixedLenFeature([2, 3], tfrec.int64, 7)
    assert f == (True, (2, 3), tfrec.int64, 7) and repr(f) == "FixedLenFeature([2, 3], int64, 7)"
    assert tfrec.VarLenFeature(tfrec.float32, 0.5) == tfrec.VarLenFeature([], tfrec.float32, 0.5)
    assert tfrec.VarLenFeature((4,), tfrec.string, "").shape == (4,)
    assert torchdali.tfrecord is tfrec


@pytest.mark.parametrize("call,message", [
    (lambda: tfrec.FixedLenFeature([2], tfrec.int64, 1.5), "expected an int"),
    (lambda: tfrec.FixedLenFeature([2], tfrec.float32, 1), "expected a float"),
    (lambda: tfrec.FixedLenFeature([], tfrec.string, 0), "expected a str"),
    (lambda: tfrec.FixedLenFeature([2], 5, 0), "invalid feature dtype"),
    (lambda: tfrec.FixedLenFeature(2, tfrec.int64, 0), "shape must be a list"),
    (lambda: tfrec.FixedLenFeature([2.5], tfrec.int64, 0), "shape must be a list"),
    (lambda: tfrec.VarLenFeature(tfrec.int64), "takes"),
    (lambda: tfrec.FixedLenFeature([2], tfrec.int64), "missing"),
])
def test_feature_helper_errors(call, message):
    with pytest.raises(TypeError, match=message):
        call()


def test_index_tool(tmp_path):
    payloads = [example({"a": int64_feature([i] * i)}) for i in range(5)] + [b""]
    spans = write_tfrecord(tmp_path / "a.tfrecord", payloads)
    assert tfrecord2idx.record_spans(str(tmp_path / "a.tfrecord")) == spans
    assert tfrecord2idx.main([str(tmp_path / "a.tfrecord"), str(tmp_path / "a.idx")]) == 0
    assert (tmp_path / "a.idx").read_text() == "".join(f"{o} {s}\n" for o, s in spans)
    (tmp_path / "empty.tfrecord").write_bytes(b"")
    assert tfrecord2idx.main([str(tmp_path / "empty.tfrecord"), str(tmp_path / "e.idx")]) == 0
    assert (tmp_path / "e.idx").read_text() == ""
    done = subprocess.run([sys.executable, "-m", "torchdali.tools.tfrecord2idx", str(tmp_path / "a.tfrecord"),
                           str(tmp_path / "m.idx")], capture_output=True, text=True)
    assert done.returncode == 0 and (tmp_path / "m.idx").read_text() == (tmp_path / "a.idx").read_text()


@pytest.mark.parametrize("cut", [3, 20])  # inside a header; inside a payload
def test_index_tool_rejects_a_truncated_file(tmp_path, capsys, cut):
    data = tf_record(example({"a": int64_feature([1])})) * 2
    (tmp_path / "t.tfrecord").write_bytes(data[:len(data) // 2 + cut])
    assert tfrecord2idx.main([str(tmp_path / "t.tfrecord"), str(tmp_path / "t.idx")]) == 1
    assert f"offset {len(data) // 2} " in capsys.readouterr().err and not (tmp_path / "t.idx").exists()


# --- features ---

def test_features_decoded(dataset):
    paths, _, ids = dataset
    op = make_on(dataset, batch_size=13)
    assert op.meta()["epoch_size"] == 13
    got = run(op, 1, 13)[0]
    sources = [f"{paths[0]} at index "] * 4 + [f"{paths[1]} at index "] * 7 + [f"{paths[2]} at index "] * 2
    assert [s[0].rsplit(" ", 1)[0] + " " for s in got] == sources
    assert [s[0].endswith(" at index 0") for s in got] == [True] + [False] * 3 + [True] + [False] * 6 + [True, False]
    for k, (_, (image, label, got_ids, boxes, matrix, extremes)) in enumerate(got):
        assert image[:2] == ("uint8", (len(image[2]),))
        assert label == ("int64", (), k)
        assert got_ids == ("int64", (len(ids[k]),), ids[k])
        assert boxes[0] == "float32" and len(boxes[1]) == 2 and boxes[1][1] == 4
        assert matrix[:2] == ("float32", (2, 3))
        assert extremes == ("int64", (5,), [-2**63, 2**63 - 1, -1, 0, 1])


@pytest.mark.parametrize("packed", [True, False, "mixed"])
def test_int64_and_float_encodings(tmp_path, packed):
    values = [0, 1, 127, 128, 300, -1, -300, 2**62, -2**63, 2**63 - 1, 5]
    floats = [0.5, -2.25, 2.0 ** 100, float("inf")]
    write_tfrecord(tmp_path / "a.tfrecord", [example({
        "i": int64_feature(values, packed), "f": float_feature(floats, packed is True)})])
    tfrecord2idx.main([str(tmp_path / "a.tfrecord"), str(tmp_path / "a.idx")])
    op = make(path=str(tmp_path / "a.tfrecord"), index_path=str(tmp_path / "a.idx"), batch_size=2,
              features={"i": tfrec.VarLenFeature(tfrec.int64, 0), "f": tfrec.VarLenFeature(tfrec.float32, 0.0)})
    (_, (i, f)), _ = run(op, 1, 2)[0]
    assert i == ("int64", (11,), values) and f == ("float32", (4,), floats)


def _one_record(tmp_path, features, example_features, batch_size=2):
    write_tfrecord(tmp_path / "a.tfrecord", [example(example_features)])
    tfrecord2idx.main([str(tmp_path / "a.tfrecord"), str(tmp_path / "a.idx")])
    op = make(path=str(tmp_path / "a.tfrecord"), index_path=str(tmp_path / "a.idx"), features=features,
              batch_size=batch_size)
    return run(op, 1, batch_size)[0][0][1]


@pytest.mark.parametrize("feature,stored,expected", [
    (tfrec.FixedLenFeature([2, 3], tfrec.int64, 9), int64_feature(range(6)), ((2, 3), [[0, 1, 2], [3, 4, 5]])),
    (tfrec.FixedLenFeature([3, 2], tfrec.int64, 9), int64_feature(range(6)), ((3, 2), [[0, 1], [2, 3], [4, 5]])),
    (tfrec.FixedLenFeature([4], tfrec.int64, 9), int64_feature([7, 8]), ((4,), [7, 8, 0, 0])),  # padded, not 9
    (tfrec.FixedLenFeature([], tfrec.int64, 9), int64_feature([]), ((), 0)),
    (tfrec.FixedLenFeature([1], tfrec.int64, 9), int64_feature([4]), ((1,), [4])),
    (tfrec.FixedLenFeature([0], tfrec.int64, 9), int64_feature([]), ((0,), [])),
    (tfrec.FixedLenFeature([3], tfrec.int64, 9), float_feature([1.0, 2.0]), ((3,), [0, 0, 0])),  # other kind
    (tfrec.VarLenFeature([3], tfrec.int64, 9), int64_feature(range(6)), ((2, 3), [[0, 1, 2], [3, 4, 5]])),
    (tfrec.VarLenFeature([1, 2], tfrec.int64, 9), int64_feature(range(4)), ((2, 1, 2), [[[0, 1]], [[2, 3]]])),
    (tfrec.VarLenFeature([3], tfrec.int64, 9), int64_feature([]), ((0, 3), [])),
    (tfrec.VarLenFeature(tfrec.int64, 9), bytes_feature([b"ab"]), ((0,), [])),
    (tfrec.FixedLenFeature([], tfrec.string, ""), bytes_feature([b"ab", b"cde"]), ((2,), [97, 98])),
    (tfrec.FixedLenFeature([1, 1], tfrec.string, ""), bytes_feature([b"z"]), ((1,), [122])),
    (tfrec.FixedLenFeature([], tfrec.string, ""), bytes_feature([]), ((0,), [])),
])
def test_feature_shapes(tmp_path, feature, stored, expected):
    out = _one_record(tmp_path, {"x": feature}, {"x": stored, "y": int64_feature([1])})
    assert out[0][1:] == expected


def test_missing_features(tmp_path):
    """A record without the feature gives a scalar (0), whatever the feature; a batch mixing
    records with and without a feature of other dims fails (DALI's batches share the dims)."""
    features = {"gone": tfrec.FixedLenFeature([2], tfrec.float32, 1.0), "also": tfrec.VarLenFeature(tfrec.int64, 3),
                "text": tfrec.FixedLenFeature([], tfrec.string, "d"), "scalar": tfrec.FixedLenFeature([], tfrec.int64, 4)}
    out = _one_record(tmp_path, features, {"y": int64_feature([1])})
    assert out == (("float32", (), 0.0), ("int64", (), 0), ("uint8", (), 0), ("int64", (), 0))
    write_tfrecord(tmp_path / "b.tfrecord", [example({"v": int64_feature([5])}), example({}),
                                             example({"v": int64_feature([6])})])
    tfrecord2idx.main([str(tmp_path / "b.tfrecord"), str(tmp_path / "b.idx")])
    kwargs = dict(path=str(tmp_path / "b.tfrecord"), index_path=str(tmp_path / "b.idx"), batch_size=3)
    op = make(features={"v": tfrec.FixedLenFeature([], tfrec.int64, 0)}, **kwargs)
    assert [s[1][0][2] for s in run(op, 1)[0]] == [5, 0, 6]
    op = make(features={"v": tfrec.VarLenFeature(tfrec.int64, 0)}, **kwargs)
    with pytest.raises(ValueError, match=r"readers.tfrecord.*feature 'v' is missing in .*b.tfrecord at index \d+"):
        run(op, 1)


def test_repeated_keys_and_lists_merge_as_protobuf_does(tmp_path):
    """A map key given twice keeps its last value; a list given twice in one Feature merges."""
    twice = field(3, 2, field(1, 2, varint(1))) + field(3, 2, field(1, 2, varint(2) + varint(3)))
    payload = field(1, 2, field(1, 2, field(1, 2, b"k") + field(2, 2, int64_feature([9])))
                    + field(1, 2, field(1, 2, b"k") + field(2, 2, twice)))
    write_tfrecord(tmp_path / "a.tfrecord", [payload])
    tfrecord2idx.main([str(tmp_path / "a.tfrecord"), str(tmp_path / "a.idx")])
    op = make(path=str(tmp_path / "a.tfrecord"), index_path=str(tmp_path / "a.idx"), batch_size=1,
              features={"k": tfrec.VarLenFeature(tfrec.int64, 0)})
    assert run(op, 1, 1)[0][0][1][0][2] == [1, 2, 3]


# --- sharding, shuffling, checkpoints ---

def test_wraps_and_rotates_shards(dataset):
    first = infos(run(make_on(dataset, batch_size=13), 1, 13))
    assert infos(run(make_on(dataset, batch_size=5), 6, 5)) == (first * 3)[:30]
    got = infos(run(make_on(dataset, num_shards=3, shard_id=1, pad_last_batch=True, batch_size=2), 9, 2))
    # shards [0, 4), [4, 8), [8, 13): 5 per epoch at most, padded to whole batches of 2
    assert got == first[4:8] + first[7:8] * 2 + first[8:13] + first[12:13] + first[0:4] + first[3:4] * 2


def test_random_shuffle_reads_in_order_and_shuffles_in_the_buffer(dataset):
    first = infos(run(make_on(dataset, batch_size=13), 1, 13))
    assert infos(run(make_on(dataset, random_shuffle=True, initial_fill=1, batch_size=13), 2, 13)) == first * 2
    a = infos(run(make_on(dataset, random_shuffle=True, initial_fill=5, seed=7, batch_size=13), 3, 13))
    b = infos(run(make_on(dataset, random_shuffle=True, initial_fill=5, seed=8, batch_size=13), 3, 13))
    assert a != b and a[:13] != first
    assert all(sorted(x[13 * e:13 * e + 13]) == sorted(first) for x in (a, b) for e in range(3))


@pytest.mark.parametrize("random_shuffle", [False, True])
def test_shuffle_after_epoch_shuffles_the_files(dataset, random_shuffle):
    paths = dataset[0]
    first = infos(run(make_on(dataset, batch_size=13), 1, 13))
    by_file = {p: [s for s in first if s.startswith(p + " ")] for p in paths}
    kwargs = dict(shuffle_after_epoch=True, random_shuffle=random_shuffle, initial_fill=1, batch_size=13)
    got = infos(run(make_on(dataset, **kwargs), 4, 13))
    orders = []
    for e in range(4):
        epoch = got[13 * e:13 * e + 13]
        files = list(dict.fromkeys(s.rsplit(" at index ", 1)[0] for s in epoch))
        assert sorted(files) == sorted(paths) and epoch == sum((by_file[p] for p in files), [])
        orders.append(tuple(files))
    assert len(set(orders)) > 1
    assert make_on(dataset, shuffle_after_epoch=True).meta()["stick_to_shard"] == 1
    # every shard sees the same file order: together they read each epoch once
    parts = [infos(run(make_on(dataset, shuffle_after_epoch=True, num_shards=3, shard_id=s, batch_size=1),
                       [4, 4, 5][s], 1)) for s in range(3)]
    assert sum(parts, []) == got[:13]


@pytest.mark.parametrize("kwargs", [
    dict(random_shuffle=True, initial_fill=7),
    dict(num_shards=3, shard_id=2, pad_last_batch=True),
    dict(shuffle_after_epoch=True, num_shards=2, shard_id=1, random_shuffle=True, initial_fill=3),
    dict(num_shards=7, shard_id=6, stick_to_shard=True),
])
def test_state_dict_resume(dataset, kwargs):
    op = make_on(dataset, batch_size=4, **kwargs)
    run(op, 5, 4)
    state = json.loads(json.dumps(op.state_dict()))
    expected = run(op, 8, 4)
    fresh = make_on(dataset, batch_size=4, **kwargs)
    fresh.load_state_dict(state)
    assert run(fresh, 8, 4) == expected


def test_lazy_init_reads_the_index_at_the_first_run(tmp_path):
    spans = write_tfrecord(tmp_path / "a.tfrecord", [example({"v": int64_feature([k])}) for k in range(3)])
    op = make(path=str(tmp_path / "a.tfrecord"), index_path=str(tmp_path / "a.idx"), lazy_init=True,
              features={"v": tfrec.FixedLenFeature([], tfrec.int64, 0)})
    (tmp_path / "a.idx").write_text("".join(f"{o} {s}\n" for o, s in spans[1:]))  # written after the build
    assert [s[1][0][2] for s in run(op, 1)[0]] == [1, 2, 1]


# --- the index file ---

@pytest.mark.parametrize("text,size", [
    ("{0} {1}\n{2} {3}\n", 2),
    ("{0} {1} 9\n{2} {3} 9\n", 3),  # read as a stream of numbers, in pairs
    ("{0}\t{1}\r\n{2}\n{3}", 2),
    ("{0} {1}\nfoo bar\n{2} {3}\n", 1),  # stops at the first word that is not a number
    ("{0} {1}\n{2} {3}x 7 8\n", 2),
])
def test_index_is_read_as_dali_reads_it(tmp_path, text, size):
    spans = write_tfrecord(tmp_path / "a.tfrecord", [example({"v": int64_feature([1])}), example({})])
    (tmp_path / "a.idx").write_text(text.format(*spans[0], *spans[1]))
    op = make(path=str(tmp_path / "a.tfrecord"), index_path=str(tmp_path / "a.idx"),
              features={"v": tfrec.FixedLenFeature([], tfrec.int64, 0)})
    assert op.meta()["epoch_size"] == size


# --- the fn and ops APIs ---

def _pipeline(dataset, api="fn", **kwargs):
    paths, indexes, _ = dataset

    @torchdali.pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def pipe():
        if api == "fn":
            out = fn.readers.tfrecord(path=paths, index_path=indexes, features=FEATURES, name="R", **kwargs)
        elif api == "ops":
            out = torchdali.ops.readers.TFRecord(path=paths, index_path=indexes, features=FEATURES, name="R")()
        else:
            with pytest.warns(DeprecationWarning, match="tfrecord_reader"):
                out = fn.tfrecord_reader(path=paths, index_path=indexes, features=FEATURES, name="R")
        assert list(out) == list(FEATURES)
        return out["label"], out["image"], out["ids"]

    p = pipe()
    p.build()
    return p


@pytest.mark.parametrize("api", ["fn", "ops", "deprecated"])
def test_apis_return_a_dict_by_feature_name(dataset, api):
    p = _pipeline(dataset, api)
    label, image, ids = p.run()
    assert label.as_array().tolist() == [0, 1, 2, 3] and image.dtype == torchdali.types.UINT8
    assert [ids.at(i).tolist() for i in range(4)] == dataset[2][:4]
    assert p.reader_meta("R")["epoch_size"] == 13


def test_serialized_pipeline_keeps_the_features(dataset):
    p = _pipeline(dataset)
    again = torchdali.Pipeline.deserialize(p.serialize())
    for _ in range(4):
        for a, b in zip(p.run(), again.run()):
            assert [x.tolist() for x in a.as_torch_list()] == [x.tolist() for x in b.as_torch_list()]


# --- errors ---

@pytest.mark.parametrize("kwargs,cls,message", [
    (dict(index_path=["a", "b"]), ValueError, "got 2 index_path entries for 1 files"),
    (dict(path=[], index_path=[]), ValueError, "path is empty"),
    (dict(use_o_direct=True), ValueError, "use_o_direct needs dont_use_mmap=True"),
    (dict(features={}), ValueError, "give at least one feature"),
    (dict(features={"x": 3}), TypeError, "expected a tfrecord.Feature for 'x'"),
    (dict(features=[tfrec.VarLenFeature(tfrec.int64, 0)]), TypeError, "expected a dict"),
    (dict(features={"x": tfrec.VarLenFeature(tfrec.string, "")}), ValueError, "tensors of strings"),
    (dict(features={"x": tfrec.FixedLenFeature([2], tfrec.string, "")}), ValueError, "tensors of strings"),
    (dict(features={"x": tfrec.FixedLenFeature([-1, 2], tfrec.int64, 0)}), ValueError, "negative dim"),
    (dict(features={"x": tfrec.VarLenFeature([0], tfrec.int64, 0)}), ValueError, "positive dims"),
    (dict(shuffle_after_epoch=True, stick_to_shard=True), ValueError, "cannot both"),
    (dict(num_shards=3), ValueError, "num_shards = 3 is larger"),
])
def test_argument_errors(tmp_path, kwargs, cls, message):
    spans = write_tfrecord(tmp_path / "a.tfrecord", [example({}), example({})])
    (tmp_path / "a.idx").write_text("".join(f"{o} {s}\n" for o, s in spans))
    base = dict(path=str(tmp_path / "a.tfrecord"), index_path=str(tmp_path / "a.idx"),
                features={"v": tfrec.FixedLenFeature([], tfrec.int64, 0)})
    with pytest.raises(cls, match=message):
        make(**{**base, **kwargs})


def test_index_errors(tmp_path):
    write_tfrecord(tmp_path / "a.tfrecord", [example({})])
    (tmp_path / "a.idx").write_text("")
    features = {"v": tfrec.FixedLenFeature([], tfrec.int64, 0)}
    with pytest.raises(ValueError, match="readers.tfrecord.*hold no records"):
        make(path=str(tmp_path / "a.tfrecord"), index_path=str(tmp_path / "a.idx"), features=features)
    with pytest.raises(ValueError, match="readers.tfrecord.*cannot open index_path.*nope.idx"):
        make(path=str(tmp_path / "a.tfrecord"), index_path=str(tmp_path / "nope.idx"), features=features)


@pytest.mark.parametrize("index,message", [
    ("-5 20\n", "invalid offset -5"),
    ("1000 20\n", "ends before the record its index puts at offset 1000"),
    ("0 10\n", "too short \\(10 bytes"),
    ("0 17\n", "payload length is \\d+ bytes, 1 are available"),
])
def test_bad_index_entries_name_the_file(tmp_path, index, message):
    write_tfrecord(tmp_path / "a.tfrecord", [example({"v": int64_feature([1])})])
    (tmp_path / "a.idx").write_text(index)
    op = make(path=str(tmp_path / "a.tfrecord"), index_path=str(tmp_path / "a.idx"), batch_size=1,
              features={"v": tfrec.FixedLenFeature([], tfrec.int64, 0)})
    with pytest.raises(RuntimeError, match=f"readers.tfrecord.*a.tfrecord.*{message}"):
        run(op, 1, 1)


@pytest.mark.parametrize("payload,message", [
    (field(1, 2, b"\x0a\x05ab"), "runs past the end"),
    (b"\x0b", "wire type 3"),
    (b"\x08" + b"\xff" * 11, "varint"),
    (example({"v": field(3, 2, field(1, 2, b"\x81"))}), "ends inside a varint"),
    (example({"v": field(3, 2, field(1, 2, b"\x81" * 10 + b"\x01"))}), "longer than 10 bytes"),
])
def test_malformed_examples(tmp_path, payload, message):
    write_tfrecord(tmp_path / "a.tfrecord", [payload])
    tfrecord2idx.main([str(tmp_path / "a.tfrecord"), str(tmp_path / "a.idx")])
    op = make(path=str(tmp_path / "a.tfrecord"), index_path=str(tmp_path / "a.idx"), batch_size=1,
              features={"v": tfrec.VarLenFeature(tfrec.int64, 0)})
    with pytest.raises(RuntimeError, match=f"readers.tfrecord.*not a valid tf.train.Example.*{message}"):
        run(op, 1, 1)


@pytest.mark.parametrize("feature,message", [
    (tfrec.FixedLenFeature([5], tfrec.int64, 0), "has 6 values in .*a.tfrecord at index 0, more than its shape"),
    (tfrec.VarLenFeature([4], tfrec.int64, 0), "has 6 values in .*a.tfrecord at index 0, not a multiple"),
])
def test_value_errors_name_feature_and_record(tmp_path, feature, message):
    with pytest.raises(ValueError, match=f"readers.tfrecord.*feature 'x' {message}"):
        _one_record(tmp_path, {"x": feature}, {"x": int64_feature(range(6))})


# --- NVIDIA DALI as the oracle (optional) ---

try:
    import nvidia.dali as dali
    import nvidia.dali.tfrecord as dali_tfrec
    from nvidia.dali import fn as dali_fn
except ImportError:  # pragma: no cover
    dali = None


def dali_features(features):
    def convert(f):
        if f.fixed:
            return dali_tfrec.FixedLenFeature(list(f.shape), f.dtype, f.default_value)
        return dali_tfrec.VarLenFeature(list(f.shape), f.dtype, f.default_value)
    return {name: convert(f) for name, f in features.items()}


def dali_run(kwargs, batch_size, iterations):
    features = dali_features(kwargs.pop("features"))

    @dali.pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, prefetch_queue_depth=1)
    def pipe():
        out = dali_fn.readers.tfrecord(name="R", features=features, **kwargs)
        assert list(out) == list(features)
        return tuple(out.values())

    p = pipe()
    p.build()
    out = []
    for _ in range(iterations):
        outputs = p.run()
        out.append([(outputs[0][j].source_info(),
                     tuple(_sample(torch.from_numpy(np.array(o.at(j)))) for o in outputs))
                    for j in range(batch_size)])
        assert all(o[j].source_info() == outputs[0][j].source_info() for o in outputs for j in range(batch_size))
    return out, p.reader_meta("R")


def dali_tool():
    script = shutil.which("tfrecord2idx", path=os.path.dirname(sys.executable))
    return [sys.executable, script] if script else None


@pytest.mark.skipif(dali is None, reason="nvidia.dali is not installed")
class TestAgainstDALI:
    def test_namespace_and_arguments(self):
        import nvidia.dali.backend as dali_backend

        assert (tfrec.int64, tfrec.string, tfrec.float32) == (dali_tfrec.int64, dali_tfrec.string, dali_tfrec.float32)
        sch = schema.get("readers.tfrecord")
        assert set(dali_backend.GetSchema("readers__TFRecord").GetArgumentNames()) <= set(sch.args)
        assert {"readers.TFRecord", "TFRecordReader"} <= set(sch.class_names)
        assert sch.deprecated_names == ("tfrecord_reader",)

    @pytest.mark.skipif(dali_tool() is None, reason="DALI's tfrecord2idx script is not installed")
    def test_index_tool_writes_dalis_index(self, dataset, tmp_path):
        for k, path in enumerate(dataset[0]):
            subprocess.run(dali_tool() + [path, str(tmp_path / f"{k}.idx")], check=True, capture_output=True)
            assert (tmp_path / f"{k}.idx").read_text() == open(dataset[1][k]).read()

    @pytest.mark.skipif(dali_tool() is None, reason="DALI's tfrecord2idx script is not installed")
    def test_features_with_dalis_index(self, dataset, tmp_path):
        indexes = [str(tmp_path / f"{k}.idx") for k in range(3)]
        for path, index in zip(dataset[0], indexes):
            subprocess.run(dali_tool() + [path, index], check=True, capture_output=True)
        kwargs = dict(path=dataset[0], index_path=indexes, features=FEATURES)
        expected, meta = dali_run(dict(kwargs), 5, 6)
        op = make(batch_size=5, **kwargs)
        assert run(op, 6, 5) == expected and op.meta() == meta

    @pytest.mark.parametrize("num_shards", [1, 3, 7])
    @pytest.mark.parametrize("pad_last_batch", [False, True])
    @pytest.mark.parametrize("stick_to_shard", [False, True])
    def test_sharded_order_over_epochs(self, dataset, num_shards, pad_last_batch, stick_to_shard):
        batch_size, iterations = 3, 12  # 36 samples: 2+ epochs of any shard
        for shard_id in sorted({0, num_shards // 2, num_shards - 1}):
            kwargs = dict(path=dataset[0], index_path=dataset[1], features=FEATURES, num_shards=num_shards,
                          shard_id=shard_id, pad_last_batch=pad_last_batch, stick_to_shard=stick_to_shard)
            expected, meta = dali_run(dict(kwargs), batch_size, iterations)
            op = make(batch_size=batch_size, **kwargs)
            assert run(op, iterations, batch_size) == expected, kwargs
            assert op.meta() == meta

    def test_feature_shapes_and_kinds(self, tmp_path):
        """What DALI defines: shapes, other kinds of list (zeros of the shape), strings'
        first values, a feature no record of the batch has (scalars); records that end
        in unused bytes of the index's size, and CRCs that are wrong (neither checks them)."""
        examples = [example({"i": int64_feature(list(range(6 * k, 6 * k + 6)), packed=k % 2 == 0),
                             "f": float_feature([k + 0.5] * 3, packed=k % 2 == 1),
                             "s": bytes_feature([bytes([65 + k]) * k, b"more"])}) for k in range(4)]
        spans = write_tfrecord(tmp_path / "a.tfrecord", examples)
        data = bytearray((tmp_path / "a.tfrecord").read_bytes())
        data[8] ^= 0xFF  # the first length's CRC
        data[spans[1][0] + spans[1][1] - 1] ^= 0xFF  # the second payload's CRC
        (tmp_path / "a.tfrecord").write_bytes(bytes(data))
        tfrecord2idx.main([str(tmp_path / "a.tfrecord"), str(tmp_path / "a.idx")])
        paths = dict(path=str(tmp_path / "a.tfrecord"), index_path=str(tmp_path / "a.idx"))
        for name, feature in [("i", tfrec.FixedLenFeature([2, 3], tfrec.int64, 0)),
                              ("i", tfrec.VarLenFeature([3], tfrec.int64, 0)),
                              ("i", tfrec.VarLenFeature(tfrec.int64, 0)),
                              ("f", tfrec.FixedLenFeature([3], tfrec.float32, 0.0)),
                              ("f", tfrec.FixedLenFeature([1, 3], tfrec.float32, 0.0)),
                              ("s", tfrec.FixedLenFeature([], tfrec.string, "")),
                              ("s", tfrec.FixedLenFeature([1], tfrec.string, ""))]:
            kwargs = dict(paths, features={name: feature})
            expected, _ = dali_run(dict(kwargs), 3, 3)
            assert run(make(batch_size=3, **kwargs), 3, 3) == expected, feature
        # A feature of another kind of list, one no record has: DALI's values are unset memory.
        for features in ({"i": tfrec.FixedLenFeature([6], tfrec.float32, 1.0)},
                         {"absent": tfrec.FixedLenFeature([2], tfrec.int64, 0)}):
            kwargs = dict(paths, features=features)
            expected, _ = dali_run(dict(kwargs), 2, 1)
            assert [[(s, (o[0][:2],)) for s, o in b] for b in run(make(batch_size=2, **kwargs), 1, 2)] == \
                [[(s, (o[0][:2],)) for s, o in b] for b in expected]

    @pytest.mark.parametrize("text", ["{0} {1} 9\n{2} {3} 9\n", "{0} {1}\nfoo bar\n{2} {3}\n", "{0}\t{1}\n{2} {3}"])
    def test_index_parsing(self, tmp_path, text):
        spans = write_tfrecord(tmp_path / "a.tfrecord", [example({"v": int64_feature([k])}) for k in range(2)])
        (tmp_path / "a.idx").write_text(text.format(*spans[0], *spans[1]))
        kwargs = dict(path=str(tmp_path / "a.tfrecord"), index_path=str(tmp_path / "a.idx"),
                      features={"v": tfrec.VarLenFeature(tfrec.int64, 0)})
        try:
            expected = dali_run(dict(kwargs), 2, 1)
        except RuntimeError:
            expected = "error"
        op = make(batch_size=2, **kwargs)
        try:
            got = (run(op, 1, 2), op.meta())
        except RuntimeError:
            got = "error"
        assert got == expected

    def test_shuffle_epoch_multisets(self, dataset):
        kwargs = dict(path=dataset[0], index_path=dataset[1], features=FEATURES, random_shuffle=True,
                      initial_fill=5, num_shards=2, shard_id=1, stick_to_shard=True, seed=3)
        for batches in (dali_run(dict(kwargs), 7, 4)[0], run(make(batch_size=7, **kwargs), 4, 7)):
            epochs = [collections.Counter(infos(batches)[7 * e:7 * (e + 1)]) for e in range(4)]
            assert all(e == epochs[0] for e in epochs) and set(epochs[0].values()) == {1}

    def test_shuffle_after_epoch_multisets(self, dataset):
        """Both shuffle the files' order each epoch (the permutations differ) and keep the
        records of a file in order."""
        kwargs = dict(path=dataset[0], index_path=dataset[1], features=FEATURES, shuffle_after_epoch=True,
                      random_shuffle=True, initial_fill=1)
        for batches in (dali_run(dict(kwargs), 13, 3)[0], run(make(batch_size=13, **kwargs), 3, 13)):
            got = infos(batches)
            for e in range(3):
                epoch = got[13 * e:13 * e + 13]
                assert sorted(epoch) == sorted(got[:13])
                for path in dataset[0]:
                    mine = [int(s.rsplit(" ", 1)[1]) for s in epoch if s.startswith(path + " ")]
                    assert mine == sorted(mine)
