"""readers.tfrecord, the tfrecord namespace and the tfrecord2idx tool: records written here
by a small TFRecord / tf.train.Example writer (no TensorFlow), decoded features, shapes and
errors, sharding, shuffling and checkpoints; an optional class compares everything with
NVIDIA DALI when `nvidia.dali` is importable."""
import collections
import concurrent.futures
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
from torchdali import fn, schema, storage
from torchdali.kernels.tfrecord import BAD_FRAMING, MALFORMED, PARSED, tfrecord_parse
from torchdali.operators import blocks, tfrecord as reader
from torchdali.operators.base import Args, RunContext
from torchdali.protowire import Malformed
from torchdali.tools import tfrecord2idx

from conftest import make_reader, NO_DALI, optional_dali

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
    return make_reader("readers.tfrecord", batch_size, seed, **kwargs)


def make_on(data, **kwargs):
    paths, indexes, _ = data
    return make(path=paths, index_path=indexes, **{"features": FEATURES, **kwargs})


def run(op, iterations, batch_size=3, pool=None):
    """Per batch, per sample: (source_info, tuple of the features as (dtype, shape, values));
    the reads spread over `pool`'s threads when given."""
    out = []
    threads = pool._max_workers if pool is not None else 1
    for i in range(iterations):
        ctx = RunContext(iteration=i, batch_size=batch_size, thread_pool=pool, num_threads=threads)
        outputs = op.run([], Args(op, {}), ctx)
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


@pytest.mark.parametrize("dont_use_mmap", [False, True])
@pytest.mark.parametrize("index,message", [
    ("-5 20\n", "invalid offset -5"),
    ("0 -5\n", "invalid size -5"),
    ("1000 20\n", "ends before the record its index puts at offset 1000"),
    ("0 10\n", "too short \\(10 bytes"),
    ("0 17\n", "payload length is \\d+ bytes, 1 are available"),
])
def test_bad_index_entries_name_the_file(tmp_path, index, message, dont_use_mmap):
    write_tfrecord(tmp_path / "a.tfrecord", [example({"v": int64_feature([1])})])
    (tmp_path / "a.idx").write_text(index)
    op = make(path=str(tmp_path / "a.tfrecord"), index_path=str(tmp_path / "a.idx"), batch_size=1,
              features={"v": tfrec.FixedLenFeature([], tfrec.int64, 0)}, dont_use_mmap=dont_use_mmap)
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


# --- the C++ parser (torchdali::tfrecord_parse) against the Python one ---

_NAMES = ["a", "bb", "", "ccc", "\u00e9", "unused"]


def noise(rng):
    """A field that holds no wanted value where it lands (mostly): a number the parsers skip
    there, or numbers 1-3 on a wire type they skip."""
    wire = int(rng.choice([0, 1, 2, 5]))
    number = int(rng.choice([4, 9, 2**20] if wire == 2 else [1, 2, 3, 4, 2**20]))
    payload = {0: varint(int(rng.integers(0, 2**63))), 1: rng.bytes(8), 5: rng.bytes(4),
               2: rng.bytes(int(rng.integers(0, 6)))}[wire]
    return field(number, wire, payload)


def random_list(rng, kind):
    """A Feature's list field of `kind` (1 bytes, 2 float, 3 int64): 0-4 values, packed or
    not, sometimes with a noise field."""
    n = int(rng.integers(0, 5))
    if kind == 1:
        body = b"".join(field(1, 2, rng.bytes(int(rng.integers(0, 9)))) for _ in range(n))
    elif kind == 2:
        values = rng.standard_normal(n).astype(np.float32)
        body = field(1, 2, values.tobytes()) if rng.random() < 0.5 else \
            b"".join(field(1, 5, v.tobytes()) for v in values)
    else:
        values = (rng.integers(-2**63, 2**63, n) >> rng.integers(0, 64, n)).tolist()
        body = field(1, 2, b"".join(map(varint, values))) if rng.random() < 0.5 else \
            b"".join(field(1, 0, varint(v)) for v in values)
    if rng.random() < 0.3:
        body = noise(rng) + body if rng.random() < 0.5 else body + noise(rng)
    return field(kind, 2, body)


def random_payload(rng):
    """A tf.train.Example of random features: any names of _NAMES (some twice, some with
    no key or no value), each a Feature of 0-3 lists of any kinds, noise at every level."""
    entries = []
    for _ in range(int(rng.integers(0, 7))):
        feature = b"".join(random_list(rng, int(rng.integers(1, 4))) for _ in range(int(rng.integers(0, 4))))
        parts = []
        if rng.random() < 0.9:
            parts.append(field(1, 2, _NAMES[int(rng.integers(len(_NAMES)))].encode()))
        if rng.random() < 0.9:
            parts.append(field(2, 2, feature + (noise(rng) if rng.random() < 0.2 else b"")))
        if rng.random() < 0.2:
            parts.append(noise(rng))
        rng.shuffle(parts)
        entries.append(field(1, 2, b"".join(parts)))
    cut = int(rng.integers(0, len(entries) + 1))  # sometimes two Features messages
    out = [field(1, 2, b"".join(entries[:cut])), field(1, 2, b"".join(entries[cut:]))]
    if rng.random() < 0.3:
        out.insert(int(rng.integers(0, 3)), noise(rng))
    return b"".join(out)


def mutate(rng, payload):
    """`payload` with a random byte changed, cut short, or with bytes inserted."""
    b = bytearray(payload)
    how = int(rng.integers(0, 4))
    pos = int(rng.integers(0, len(b) + 1))
    if how == 0 and b:
        b[min(pos, len(b) - 1)] = int(rng.integers(256))
    elif how == 1:
        del b[pos:]
    elif how == 2:
        b[pos:pos] = rng.bytes(int(rng.integers(1, 4)))
    elif b:
        b[min(pos, len(b) - 1)] |= 0x80  # a varint that goes on
    return bytes(b)


def random_records(rng, n):
    """n framed records: most valid, a third mutated, a few with a framing that does not fit."""
    records = []
    for _ in range(n):
        payload = random_payload(rng)
        if rng.random() < 0.33:
            payload = mutate(rng, payload)
        record = bytearray(tf_record(payload))
        r = rng.random()
        if r < 0.03:
            record[:8] = struct.pack("<Q", len(payload) + int(rng.integers(1, 5)))  # longer than the record
        elif r < 0.06:
            record = record[:int(rng.integers(0, 16))]
        records.append(bytes(record))
    return records


def python_parse(record, names, dtypes):
    """What the Python parser reads from one framed record: "framing" or "malformed" where
    it rejects it, else per feature None (missing) or its values as an array."""
    if len(record) < 16 or int.from_bytes(record[:8], "little") > len(record) - 16:
        return "framing"
    length = int.from_bytes(record[:8], "little")
    wanted = {name.encode(): k for k, name in enumerate(names)}
    try:
        found = reader._example_values(record, memoryview(record), 12, 12 + length, wanted, dtypes)
        return [None if v is None else reader._decode(d, [v])[0] for v, d in zip(found, dtypes)]
    except Malformed:
        return "malformed"


def kernel_parse(records, names, dtypes, rng):
    """tfrecord_parse of the records, laid out of order with gaps in three buffers; per
    record as python_parse."""
    buffers, spans = [bytearray() for _ in range(3)], np.zeros((len(records), 3), np.int64)
    for i in rng.permutation(len(records)):
        b = int(rng.integers(3))
        buffers[b] += rng.bytes(int(rng.integers(0, 3)))
        spans[i] = b, len(buffers[b]), len(records[i])
        buffers[b] += records[i]
    data = [torch.from_numpy(np.frombuffer(bytes(b), np.uint8).copy()) for b in buffers]
    values, counts, status = tfrecord_parse(data, torch.from_numpy(spans), names, dtypes)
    counts, status = counts.numpy(), status.numpy()
    assert counts.shape == (len(records), len(names)) and status.dtype == np.int32
    starts = np.cumsum(np.maximum(counts, 0), axis=0) - np.maximum(counts, 0)
    out = []
    for i, code in enumerate(status.tolist()):
        if code != PARSED:
            assert code in (BAD_FRAMING, MALFORMED) and (counts[i] == -1).all()
            out.append("framing" if code == BAD_FRAMING else "malformed")
            continue
        out.append([None if counts[i, k] < 0 else values[k][starts[i, k]:starts[i, k] + counts[i, k]].numpy()
                    for k in range(len(names))])
    return out


def same(a, b):
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return all((x is None and y is None) or (x is not None and y is not None and x.dtype == y.dtype
                                             and x.tobytes() == y.tobytes()) for x, y in zip(a, b))


@pytest.mark.parametrize("seed", range(8))
def test_kernel_equals_the_python_parser(seed):
    """Random feature sets and encodings, empty lists, repeated keys, missing features, and
    malformed records: the kernel rejects exactly the records the Python parser rejects, and
    reads the same values from the others."""
    rng = np.random.default_rng(seed)
    names = [str(x) for x in rng.permutation(_NAMES[:5])[:int(rng.integers(1, 6))]]
    dtypes = rng.integers(0, 3, len(names)).tolist()
    records = random_records(rng, 300)
    expected = [python_parse(r, names, dtypes) for r in records]
    got = kernel_parse(records, names, dtypes, rng)
    for i, (e, g) in enumerate(zip(expected, got)):
        assert same(e, g), (i, records[i], e, g)
    kinds = collections.Counter(e if isinstance(e, str) else "parsed" for e in expected)
    assert kinds["parsed"] > 150 and kinds["malformed"] > 30 and kinds["framing"] > 0, kinds
    present = [v for e in expected if not isinstance(e, str) for v in e if v is not None]
    assert sum(len(v) == 0 for v in present) > 20 and sum(len(v) > 1 for v in present) > 10


_WANTED = example({"a": int64_feature([5, -1]), "bb": bytes_feature([b"xy"])})
_HUGE_KEY = bytes([0x8A] + [0x80] * 8 + [0x02])  # field 1, wire 2 in its low 64 bits; 2^64 and more
_EDGES = [
    _HUGE_KEY + _WANTED[1:],  # not field 1: skipped
    bytes([0x8A] + [0x80] * 8 + [0x01]) + _WANTED[1:],  # fits in 64 bits, a large field number: skipped
    bytes([0x8A] + [0x80] * 9 + [0x00]) + _WANTED[1:],  # an 11-byte key
    b"\x0a" + bytes([0xFF] * 9 + [0x02]) + b"abc",  # a length of 2^64 and more
    b"\x0a" + bytes([0xFF] * 9 + [0x01]) + b"abc",  # a length of 2^63 and more
    example({"a": int64_feature([0]) + field(3, 2, field(1, 2, bytes([0xFF] * 9 + [0x7F])))}),  # bits past 63
    example({"a": field(3, 2, field(1, 2, bytes([0x80] * 10 + [0x00])))}),  # an 11-byte value
    example({"a": field(3, 2, field(1, 0, bytes([0x80] * 10 + [0x00])))}),  # unpacked, 11 bytes
    b"\x0a" + bytes([0x80 | len(_WANTED) - 2] + [0x80] * 8 + [0x02]) + _WANTED[2:],  # a length of 2^64 + its own
    example({"f": field(2, 2, field(1, 2, b"abc"))}),  # floats of a length not a multiple of 4
    example({"f": field(2, 2, field(1, 5, b"abcd") + field(1, 1, b"12345678") + field(1, 2, b"efgh"))}),
    example({"a": field(2, 2, field(1, 2, b"abc"))}),  # another kind than asked: not read
    field(1, 2, field(1, 2, field(2, 2, int64_feature([3])) + field(1, 2, b"bb"))),  # the value before the key
    field(1, 2, field(1, 2, field(1, 0, b"\x05") + field(2, 2, int64_feature([3])))),  # a key of another wire type
    field(1, 2, field(1, 2, field(1, 2, b"a") + field(2, 2, int64_feature([3]) + float_feature([1.0])
                                                         + int64_feature([4]) + int64_feature([5])))),
    example({"bb": bytes_feature([b"first"]) + field(1, 2, field(1, 2, b"second") + b"\xff")}),  # stops early
    example({"bb": field(1, 2, field(1, 0, b"\x01") + field(1, 2, b"z"))}),
]


@pytest.mark.parametrize("payload", _EDGES)
def test_kernel_equals_the_python_parser_on_edge_cases(payload):
    names, dtypes = ["a", "bb", "f"], [tfrec.int64, tfrec.string, tfrec.float32]
    record = tf_record(payload)
    expected = python_parse(record, names, dtypes)
    assert same(expected, kernel_parse([record], names, dtypes, np.random.default_rng(0))[0])


def test_kernel_of_an_empty_batch_and_no_features():
    values, counts, status = tfrecord_parse([], torch.zeros(0, 3, dtype=torch.int64), ["a", "b"],
                                            [tfrec.int64, tfrec.string])
    assert [v.dtype for v in values] == [torch.int64, torch.uint8] and [v.numel() for v in values] == [0, 0]
    assert counts.shape == (0, 2) and status.shape == (0,)
    record = tf_record(example({"a": int64_feature([1])}))
    data = torch.from_numpy(np.frombuffer(record, np.uint8).copy())
    values, counts, status = tfrecord_parse([data], torch.tensor([[0, 0, len(record)]]), [], [])
    assert values == [] and counts.shape == (1, 0) and status.tolist() == [PARSED]


@pytest.mark.parametrize("kwargs,message", [
    (dict(spans=torch.tensor([[0, 0, 100]])), "span 0 \\(0, 100\\) is outside its buffer \\(20 bytes"),
    (dict(spans=torch.tensor([[0, -1, 2]])), "span 0 .* is outside its buffer"),
    (dict(spans=torch.tensor([[1, 0, 2]])), "span 0 names buffer 1 of 1"),
    (dict(spans=torch.tensor([0, 0, 3])), "must be an int64 CPU tensor \\[N, 3\\]"),
    (dict(spans=torch.tensor([[0, 3]])), "must be an int64 CPU tensor \\[N, 3\\]"),
    (dict(spans=torch.tensor([[0, 0, 3]], dtype=torch.int32)), "must be an int64 CPU tensor"),
    (dict(data=[torch.zeros(2, 2, dtype=torch.uint8)]), "each of `data` must be a contiguous 1-D uint8"),
    (dict(data=[torch.zeros(40, dtype=torch.uint8)[::2]]), "each of `data` must be a contiguous 1-D uint8"),
    (dict(dtypes=[7]), "invalid dtype code 7"),
    (dict(dtypes=[0, 0]), "got 1 names and 2 dtypes"),
])
def test_kernel_bad_input(kwargs, message):
    args = dict(data=[torch.zeros(20, dtype=torch.uint8)], spans=torch.tensor([[0, 0, 20]]), names=["a"],
                dtypes=[0])
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        tfrecord_parse(**args)


def test_kernel_opcheck():
    rng = np.random.default_rng(1)
    records = [tf_record(random_payload(rng)) for _ in range(7)]
    data = torch.from_numpy(np.frombuffer(b"".join(records), np.uint8).copy())
    sizes = torch.tensor([len(r) for r in records])
    spans = torch.stack([torch.ones_like(sizes), torch.cumsum(sizes, 0) - sizes, sizes], 1)
    torch.library.opcheck(torch.ops.torchdali.tfrecord_parse.default,
                          ([data[:5], data], spans, ["a", "bb", ""], [tfrec.int64, tfrec.string, tfrec.float32]))


def test_a_malformed_record_names_its_file_and_index(tmp_path):
    payloads = [example({"v": int64_feature([k])}) for k in range(5)]
    payloads[3] = example({"v": field(3, 2, field(1, 2, b"\x81"))})
    spans = write_tfrecord(tmp_path / "a.tfrecord", payloads)
    tfrecord2idx.main([str(tmp_path / "a.tfrecord"), str(tmp_path / "a.idx")])
    op = make(path=str(tmp_path / "a.tfrecord"), index_path=str(tmp_path / "a.idx"), batch_size=5,
              features={"v": tfrec.VarLenFeature(tfrec.int64, 0)})
    with pytest.raises(RuntimeError, match=f"readers.tfrecord.*error parsing .*a.tfrecord at index {spans[3][0]}: "
                                           "not a valid tf.train.Example.*ends inside a varint"):
        run(op, 1, 5)


@pytest.mark.parametrize("kwargs", [{}, dict(random_shuffle=True, initial_fill=6),
                                    dict(num_shards=3, shard_id=2, pad_last_batch=True)])
def test_reads_what_it_maps(dataset, kwargs):
    """Records read (dont_use_mmap: positional reads in C++), on one thread or several, give
    what the mapped files give."""
    expected = run(make_on(dataset, batch_size=5, **kwargs), 6, 5)
    assert run(make_on(dataset, batch_size=5, dont_use_mmap=True, **kwargs), 6, 5) == expected
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        assert run(make_on(dataset, batch_size=5, dont_use_mmap=True, **kwargs), 6, 5, pool) == expected


@pytest.mark.parametrize("kwargs", [{}, dict(random_shuffle=True, initial_fill=6)])
def test_files_at_urls_stream_in_blocks(dataset, tmp_path, monkeypatch, kwargs):
    """Files and index files at URLs (fsspec's memory://) give what the local files give,
    read in whole blocks, one request each, kept for the next epochs."""
    fsspec = pytest.importorskip("fsspec")
    monkeypatch.setattr(storage, "cache_dir", None)
    monkeypatch.delenv(storage.CACHE_ENV, raising=False)
    local = make_on(dataset, batch_size=5, **kwargs)
    expected = run(local, 6, 5)
    root = f"memory://tfrecord-{os.getpid()}-{id(tmp_path)}"
    memory = fsspec.filesystem("memory")
    urls = {}
    for path in local.spec.args["path"] + local.spec.args["index_path"]:
        urls[path] = f"{root}/{os.path.basename(path)}"
        memory.pipe(urls[path][len("memory://") - 1:], open(path, "rb").read())
    calls = []
    read_bytes = storage.read_bytes
    monkeypatch.setattr(storage, "read_bytes", lambda p, s=0, n=None: calls.append((p, s, n)) or read_bytes(p, s, n))
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 256)
    op = make(path=[urls[p] for p in local.spec.args["path"]], index_path=[urls[p] for p in local.spec.args["index_path"]],
              features=local.spec.args["features"], batch_size=5, **kwargs)
    got = run(op, 6, 5)
    assert got == [[(" at ".join([urls[info.split(" at ")[0]], info.split(" at ")[1]]), values) for info, values in row]
                   for row in expected]
    reads = [c for c in calls if not c[0].endswith(".idx")]
    assert reads and all(n <= 256 for _, _, n in reads) and len(set(reads)) == len(reads)  # each block once
    sizes = {urls[p]: os.path.getsize(p) for p in local.spec.args["path"]}
    assert sum(n for _, _, n in reads) == sum(sizes.values())  # every byte once over the epochs


def test_maps_each_file_once(dataset):
    descriptors = len(os.listdir("/proc/self/fd"))
    op = make_on(dataset, batch_size=5)
    run(op, 3, 5)
    assert len(os.listdir("/proc/self/fd")) == descriptors
    assert sorted(op.maps) == [0, 1, 2]
    maps = dict(op.maps)
    run(op, 3, 5)
    assert all(op.maps[f] is maps[f] for f in maps)
    assert make_on(dataset, dont_use_mmap=True).mappable.tolist() == [False] * 3


@pytest.mark.parametrize("dont_use_mmap", [False, True])
@pytest.mark.parametrize("make_bad", [lambda p: p.unlink(), lambda p: (p.unlink(), p.mkdir())])
def test_a_file_that_cannot_be_read(tmp_path, dont_use_mmap, make_bad):
    write_tfrecord(tmp_path / "a.tfrecord", [example({"v": int64_feature([1])})])
    tfrecord2idx.main([str(tmp_path / "a.tfrecord"), str(tmp_path / "a.idx")])
    make_bad(tmp_path / "a.tfrecord")
    op = make(path=str(tmp_path / "a.tfrecord"), index_path=str(tmp_path / "a.idx"), batch_size=1,
              features={"v": tfrec.VarLenFeature(tfrec.int64, 0)}, dont_use_mmap=dont_use_mmap)
    with pytest.raises(RuntimeError, match="readers.tfrecord.*cannot read '.*a.tfrecord'"):
        run(op, 1, 1)


@pytest.mark.parametrize("dont_use_mmap", [False, True])
def test_a_file_shorter_than_its_index_fails(tmp_path, dont_use_mmap):
    spans = write_tfrecord(tmp_path / "a.tfrecord", [example({"v": int64_feature([k] * 9)}) for k in range(6)])
    (tmp_path / "a.idx").write_text("".join(f"{o} {s}\n" for o, s in spans))
    data = (tmp_path / "a.tfrecord").read_bytes()
    (tmp_path / "a.tfrecord").write_bytes(data[:spans[4][0] + 3])
    op = make(path=str(tmp_path / "a.tfrecord"), index_path=str(tmp_path / "a.idx"), batch_size=6,
              features={"v": tfrec.VarLenFeature(tfrec.int64, 0)}, dont_use_mmap=dont_use_mmap)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        with pytest.raises(RuntimeError, match=f"a.tfrecord' ends before the record its index puts at offset "
                                               f"{spans[4][0]} \\({spans[4][1]} bytes\\)"):
            run(op, 1, 6, pool)


# --- NVIDIA DALI as the oracle (optional) ---

dali = optional_dali()
if dali is not None:
    import nvidia.dali.tfrecord as dali_tfrec


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
        out = dali.fn.readers.tfrecord(name="R", features=features, **kwargs)
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


@pytest.mark.skipif(dali is None, reason=NO_DALI)
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
