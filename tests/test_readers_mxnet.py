"""readers.mxnet and the rec2idx tool: RecordIO files written here by a small writer that
frames records as MXNet's does (split where the magic number occurs, aligned, in the data),
decoded images and labels, the index as DALI reads it, errors, sharding, shuffling and
checkpoints; an optional class compares everything with NVIDIA DALI when `nvidia.dali` is
importable."""
import collections
import concurrent.futures
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import torchdali
from torchdali import fn, schema, storage
from torchdali.operators import blocks
from torchdali.operators.base import Args, RunContext
from torchdali.tools import rec2idx

from conftest import make_reader, NO_DALI, optional_dali

# --- a RecordIO writer (MXNet's recordio.cc and IRHeader, in Python) ---

MAGIC = struct.pack("<I", 0xCED7230A)
MAGIC_FLOAT = struct.unpack("<f", MAGIC)[0]  # a label whose bits are the magic number


def ir_record(label, image, record_id=0):
    """An image record's payload: IRHeader (flag, label, id, id2), the labels when there are
    several (flag = their count) and the image."""
    labels = np.atleast_1d(np.asarray(label, np.float32))
    if np.ndim(label) == 0:
        return struct.pack("<IfQQ", 0, float(label), record_id, 0) + image
    return struct.pack("<IfQQ", len(labels), 0.0, record_id, 0) + labels.astype("<f4").tobytes() + image


def frame(payload):
    """The record as MXNet's RecordIOWriter writes it: split at each magic number found at a
    4-byte aligned position (which is dropped), parts flagged 1, 2 ..., 3 (0 when whole),
    each padded to 4 bytes."""
    out, start = bytearray(), 0
    for i in range(0, len(payload) // 4 * 4, 4):
        if payload[i:i + 4] == MAGIC:
            out += MAGIC + struct.pack("<I", (1 if start == 0 else 2) << 29 | (i - start)) + payload[start:i]
            start = i + 4
    out += MAGIC + struct.pack("<I", (3 if start else 0) << 29 | (len(payload) - start)) + payload[start:]
    return bytes(out + bytes(-len(out) % 4))


def write_rec(path, payloads):
    """Write the records; returns their offsets."""
    offsets, data = [], bytearray()
    for p in payloads:
        offsets.append(len(data))
        data += frame(p)
    with open(path, "wb") as f:
        f.write(data)
    return offsets


def jpeg_like(rng, size, magic_at=()):
    """An image's bytes: SOI, random bytes, EOI; the magic number at the given positions."""
    body = bytearray(b"\xff\xd8\xff\xe0" + rng.bytes(size) + b"\xff\xd9")
    for at in magic_at:
        body[at:at + 4] = MAGIC
    return bytes(body)


def random_record(rng, k):
    """(label, image) of record k: single and several labels, records split in the image
    (once, several times, at its start and at its very end), unaligned lengths."""
    size = int(rng.integers(0, 2000))
    kind = k % 6
    if kind == 0:
        return float(k), jpeg_like(rng, size)
    if kind == 1:  # two labels; split once in the image (aligned), not at the unaligned copy
        return [k, -k / 3], jpeg_like(rng, size + 40, magic_at=(8, 21))
    if kind == 2:  # split twice, and at the image's first bytes
        return float(-k), jpeg_like(rng, size + 60, magic_at=(0, 12, 40))
    if kind == 3:  # three labels; split near the image's end
        return [k, 1e30, 0.5], jpeg_like(rng, size * 4, magic_at=(size * 4 - 4,))
    if kind == 4:  # an image of the magic number alone: the last part is empty
        return float(k), MAGIC
    return [k + 0.25], rng.bytes(size | 1)  # one label in a list; an odd length


def expected_label(label):
    return [float(np.float32(v)) for v in np.atleast_1d(label)]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Three files of 4, 7 and 2 records and one index for all of them; returns (paths, the
    index path, per record (source info, image bytes, labels))."""
    root = tmp_path_factory.mktemp("recordio")
    rng = np.random.default_rng(5)
    paths, records, k, split = [], [], 0, 0
    for f, count in enumerate([4, 7, 2]):
        path = str(root / f"part{f}.rec")
        content = [random_record(rng, k + j) for j in range(count)]
        payloads = [ir_record(label, image, k + j) for j, (label, image) in enumerate(content)]
        offsets = write_rec(path, payloads)
        split += sum(frame(payload)[7] >> 5 == 1 for payload in payloads)  # the first part's flag
        records += [(f"{path} at index {o}", image, expected_label(label))
                    for o, (label, image) in zip(offsets, content)]
        paths.append(path)
        k += count
    assert split >= 5 and rec2idx.main(paths + [str(root / "all.idx")]) == 0
    return paths, str(root / "all.idx"), records


def make(batch_size=3, seed=1234, **kwargs):
    return make_reader("readers.mxnet", batch_size, seed, **kwargs)


def make_on(data, **kwargs):
    paths, index, _ = data
    return make(path=paths, index_path=[index], **kwargs)


def run(op, iterations, batch_size=3, pool=None):
    """Per batch, per sample: (source info, image bytes, labels, label shape)."""
    out = []
    threads = pool._max_workers if pool is not None else 1
    for i in range(iterations):
        ctx = RunContext(iteration=i, batch_size=batch_size, thread_pool=pool, num_threads=threads)
        images, labels = op.run([], Args(op, {}), ctx)
        assert len(images) == len(labels) == batch_size and labels.source_info == [""] * batch_size
        assert images.dtype == torchdali.types.UINT8 and labels.dtype == torchdali.types.FLOAT
        out.append([(images.source_info[j], images.as_torch_list()[j].numpy().tobytes(),
                     labels.as_torch_list()[j].tolist(), tuple(labels.as_torch_list()[j].shape))
                    for j in range(batch_size)])
    return out


def infos(batches):
    return [s[0] for b in batches for s in b]


def write_one(tmp_path, payloads, name="a"):
    """One .rec file of `payloads` and its index; returns (path, index path, offsets)."""
    offsets = write_rec(tmp_path / f"{name}.rec", payloads)
    (tmp_path / f"{name}.idx").write_text("".join(f"{k}\t{o}\n" for k, o in enumerate(offsets)))
    return str(tmp_path / f"{name}.rec"), str(tmp_path / f"{name}.idx"), offsets


# --- the writer and the index tool ---

def test_writer_splits_as_mxnet_does():
    payload = ir_record(1.0, b"ab" + MAGIC + b"cd" + MAGIC + b"xyz")  # magic at 26 (unaligned), 32 (aligned)
    framed = frame(payload)
    assert framed[:8] == MAGIC + struct.pack("<I", 1 << 29 | 32) and framed[8:40] == payload[:32]
    assert framed[40:48] == MAGIC + struct.pack("<I", 3 << 29 | len(payload) - 36)
    assert framed[48:] == payload[36:] + b"\0" * (-(len(payload) - 36) % 4) and len(framed) % 4 == 0
    assert frame(ir_record(2.0, b"abc")) == MAGIC + struct.pack("<I", 27) + ir_record(2.0, b"abc") + b"\0"


def test_index_tool(dataset, tmp_path):
    paths, index, records = dataset
    lines = open(index).read().splitlines()
    assert len(lines) == 13 and [line.split("\t")[0] for line in lines] == [str(k) for k in range(13)]
    sizes = [os.path.getsize(p) for p in paths]
    starts = [0, sizes[0], sizes[0] + sizes[1]]
    offsets = [int(line.split("\t")[1]) for line in lines]
    assert [f"{paths[f]} at index {o - starts[f]}" for o in offsets
            for f in [max(i for i in range(3) if starts[i] <= o)]] == [r[0] for r in records]
    assert rec2idx.record_offsets(paths[1]) == [o - starts[1] for o in offsets[4:11]]
    done = subprocess.run([sys.executable, "-m", "torchdali.tools.rec2idx", paths[0], str(tmp_path / "one.idx")],
                          capture_output=True, text=True)
    assert done.returncode == 0 and (tmp_path / "one.idx").read_text() == "".join(lines[k] + "\n" for k in range(4))


@pytest.mark.parametrize("damage,message", [
    (lambda d: d[:-2], "ends inside the part at offset|needs \\d+ bytes"),
    (lambda d: d + b"\0" * 8, "no magic number at offset"),
    (lambda d: d + MAGIC + struct.pack("<I", 2 << 29), "continuation flag 2$"),
    (lambda d: d + MAGIC + struct.pack("<I", 1 << 29), "ends inside a split record"),
    (lambda d: d + MAGIC + struct.pack("<I", 100), "needs 108 bytes, 8 are left"),
])
def test_index_tool_rejects_broken_files(tmp_path, capsys, damage, message):
    write_rec(tmp_path / "a.rec", [ir_record(1.0, b"x" * 9), ir_record(2.0, b"y" * 8)])
    (tmp_path / "a.rec").write_bytes(damage((tmp_path / "a.rec").read_bytes()))
    with pytest.raises(ValueError, match=f"'.*a.rec' is not a valid RecordIO file: .*({message})"):
        rec2idx.record_offsets(str(tmp_path / "a.rec"))
    assert rec2idx.main([str(tmp_path / "a.rec"), str(tmp_path / "a.idx")]) == 1
    assert "rec2idx: " in capsys.readouterr().err


# --- the records ---

def test_records_decoded(dataset):
    _, _, records = dataset
    got = run(make_on(dataset, batch_size=13), 2, 13)
    expected = [(info, image, labels, (len(labels),)) for info, image, labels in records]
    assert got == [expected, expected]


SPLIT_BEFORE_THE_IMAGE = [  # (record id, labels): the magic number in IRHeader's id, in the labels
    (struct.unpack("<I", MAGIC)[0], [1.5, 2.5]),
    (3, [1.5, MAGIC_FLOAT, 2.5]),
]


@pytest.mark.parametrize("record_id,labels", SPLIT_BEFORE_THE_IMAGE)
def test_records_split_before_their_image(tmp_path, record_id, labels):
    """A magic number in the header or the labels splits the record before its image (DALI
    2.4 rejects such records); the parts are joined first here."""
    payload = ir_record(labels, b"\xff\xd8image", record_id)
    assert frame(payload)[4:8] != struct.pack("<I", len(payload))  # split
    path, index, offsets = write_one(tmp_path, [ir_record(7.0, b"first"), payload])
    assert run(make(path=path, index_path=index, batch_size=2), 1, 2) == [
        [(f"{path} at index 0", b"first", [7.0], (1,)),
         (f"{path} at index {offsets[1]}", b"\xff\xd8image", expected_label(labels), (len(labels),))]]


@pytest.mark.parametrize("kwargs", [{}, dict(random_shuffle=True, initial_fill=6),
                                    dict(num_shards=3, shard_id=2, pad_last_batch=True)])
def test_reads_what_it_maps(dataset, kwargs):
    """Records read (dont_use_mmap: positional reads in C++), on one thread or several, give
    what the mapped files give."""
    expected = run(make_on(dataset, batch_size=5, **kwargs), 6, 5)
    assert run(make_on(dataset, batch_size=5, dont_use_mmap=True, **kwargs), 6, 5) == expected
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        assert run(make_on(dataset, batch_size=5, dont_use_mmap=True, **kwargs), 6, 5, pool) == expected


def test_files_at_urls(dataset, tmp_path, monkeypatch):
    """Files and the index at URLs (fsspec's memory://) give what the local files give."""
    fsspec = pytest.importorskip("fsspec")
    monkeypatch.setattr(storage, "cache_dir", None)
    monkeypatch.delenv(storage.CACHE_ENV, raising=False)
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 1024)
    paths, index, _ = dataset
    expected = run(make_on(dataset, batch_size=5, random_shuffle=True, initial_fill=4), 6, 5)
    root = f"memory://recordio-{os.getpid()}-{id(tmp_path)}"
    urls = {p: f"{root}/{os.path.basename(p)}" for p in paths + [index]}
    for path, url in urls.items():
        fsspec.filesystem("memory").pipe(url[len("memory://") - 1:], open(path, "rb").read())
    op = make(path=[urls[p] for p in paths], index_path=[urls[index]], batch_size=5, random_shuffle=True,
              initial_fill=4)
    got = run(op, 6, 5)
    url_of = {f"{p} at": f"{urls[p]} at" for p in paths}
    assert got == [[(url_of[s.split(" index ")[0]] + " index " + s.split(" index ")[1], *rest) for s, *rest in b]
                   for b in expected]


# --- the index file ---

@pytest.mark.parametrize("lines,picked", [
    ("{k0}\t{o0}\n{k1}\t{o1}\n{k2}\t{o2}\n", [0, 1, 2]),
    ("9 {o2}\n3 {o0}\n5 {o1}\n", [0, 1, 2]),  # the keys are ignored; the offsets sorted
    ("0 {o0}\n1 {o0}\n2 {o2}\n", [0, 2]),  # a repeated offset is one record
    ("0 {o0}\n2 {o2}\n", [0, 2]),  # a record the index skips is not read (its bytes end the one before)
    ("0 {o0} 1 {o1}\n2 {o2} 7\n", [0, 1, 2]),  # a stream of numbers, in pairs
    ("0 {o0}\nfoo\n2 {o2}\n", [0]),  # up to the first word that is not a number
])
def test_index_is_read_as_dali_reads_it(tmp_path, lines, picked):
    path, index, offsets = write_one(tmp_path, [ir_record(float(k), b"image %d" % k) for k in range(3)])
    open(index, "w").write(lines.format(k0=0, k1=1, k2=2, o0=offsets[0], o1=offsets[1], o2=offsets[2]))
    op = make(path=path, index_path=index, batch_size=len(picked))
    assert op.meta()["epoch_size"] == len(picked)
    assert [(s[1], s[2]) for s in run(op, 1, len(picked))[0]] == [(b"image %d" % k, [float(k)]) for k in picked]


def test_index_offsets_count_on_through_the_files(tmp_path):
    """Offsets past the first file's bytes are in the next; a file the index gives no
    records (an empty one, here) takes none."""
    a, _, _ = write_one(tmp_path, [ir_record(1.0, b"a0"), ir_record(2.0, b"a1")], "a")
    (tmp_path / "empty.rec").write_bytes(b"")
    b, _, _ = write_one(tmp_path, [ir_record(3.0, b"b0")], "b")
    rec2idx.main([a, str(tmp_path / "empty.rec"), b, str(tmp_path / "all.idx")])
    op = make(path=[a, str(tmp_path / "empty.rec"), b], index_path=str(tmp_path / "all.idx"), batch_size=3)
    assert [(s[0], s[1]) for s in run(op, 1, 3)[0]] == [(f"{a} at index 0", b"a0"), (f"{a} at index 36", b"a1"),
                                                        (f"{b} at index 0", b"b0")]


@pytest.mark.parametrize("random_shuffle", [False, True])
def test_shuffle_after_epoch_shuffles_the_files(dataset, random_shuffle):
    paths = dataset[0]
    first = infos(run(make_on(dataset, batch_size=13), 1, 13))
    by_file = {p: [s for s in first if s.startswith(p + " ")] for p in paths}
    got = infos(run(make_on(dataset, shuffle_after_epoch=True, random_shuffle=random_shuffle, initial_fill=1,
                            batch_size=13), 4, 13))
    orders = []
    for e in range(4):
        epoch = got[13 * e:13 * e + 13]
        files = list(dict.fromkeys(s.rsplit(" at index ", 1)[0] for s in epoch))
        assert sorted(files) == sorted(paths) and epoch == sum((by_file[p] for p in files), [])
        orders.append(tuple(files))
    assert len(set(orders)) > 1
    assert make_on(dataset, shuffle_after_epoch=True).meta()["stick_to_shard"] == 1


def test_lazy_init_reads_the_index_at_the_first_run(tmp_path):
    path, index, offsets = write_one(tmp_path, [ir_record(float(k), b"%d" % k) for k in range(3)])
    op = make(path=path, index_path=index, lazy_init=True, batch_size=3)
    open(index, "w").write(f"0 {offsets[1]}\n")  # written after the build
    assert [s[1] for s in run(op, 1)[0]] == [b"1", b"1", b"1"]


# --- the fn and ops APIs ---

@pytest.mark.parametrize("api", ["fn", "ops", "deprecated"])
def test_apis(dataset, api):
    paths, index, records = dataset

    @torchdali.pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def pipe():
        if api == "fn":
            return tuple(fn.readers.mxnet(path=paths, index_path=index, name="R"))
        if api == "ops":
            return tuple(torchdali.ops.readers.MXNet(path=paths, index_path=[index], name="R")())
        with pytest.warns(DeprecationWarning, match="mxnet_reader"):
            return tuple(fn.mxnet_reader(path=paths, index_path=[index], name="R"))

    p = pipe()
    p.build()
    images, labels = p.run()
    assert [images.at(i).tobytes() for i in range(4)] == [r[1] for r in records[:4]]
    assert [labels.at(i).tolist() for i in range(4)] == [r[2] for r in records[:4]]
    assert [images[i].source_info() for i in range(4)] == [r[0] for r in records[:4]]
    assert p.reader_meta("R")["epoch_size"] == 13


def test_decodes_as_the_files_do(tmp_path):
    """A .rec of JPEG files (labels: their classes), as im2rec packs a folder, decodes as
    readers.file's reading of the files does."""
    from torchdali.sample_data import write_sample_dataset

    root = write_sample_dataset(str(tmp_path / "images"), num_images=6, num_classes=2, min_size=32, max_size=64)
    files = sorted(os.path.join(c, f) for c in sorted(os.listdir(root)) if os.path.isdir(os.path.join(root, c))
                   for f in os.listdir(os.path.join(root, c)))
    labels = [sorted({os.path.dirname(f) for f in files}).index(os.path.dirname(f)) for f in files]
    write_rec(tmp_path / "a.rec", [ir_record(float(label), open(os.path.join(root, f), "rb").read())
                                   for f, label in zip(files, labels)])
    rec2idx.main([str(tmp_path / "a.rec"), str(tmp_path / "a.idx")])

    @torchdali.pipeline_def(batch_size=6, num_threads=1, device_id=None)
    def pipe():
        data, label = fn.readers.mxnet(path=str(tmp_path / "a.rec"), index_path=str(tmp_path / "a.idx"))
        files_data, files_label = fn.readers.file(file_root=root, files=files, labels=labels)
        return fn.decoders.image(data), label, fn.decoders.image(files_data), files_label

    p = pipe()
    p.build()
    images, label, file_images, file_label = p.run()
    assert all(images.at(i).shape[2] == 3 and np.array_equal(images.at(i), file_images.at(i)) for i in range(6))
    assert label.as_array()[:, 0].tolist() == file_label.as_array()[:, 0].tolist() == labels


# --- errors ---

@pytest.mark.parametrize("kwargs,cls,message", [
    (dict(path=[]), ValueError, "path is empty"),
    (dict(index_path=["a.idx", "b.idx"]), ValueError, "give one index file \\(got 2\\)"),
    (dict(shuffle_after_epoch=True, stick_to_shard=True), ValueError, "cannot both"),
    (dict(num_shards=3), ValueError, "num_shards = 3 is larger"),
    (dict(features={}), TypeError, "features"),
])
def test_argument_errors(tmp_path, kwargs, cls, message):
    path, index, _ = write_one(tmp_path, [ir_record(1.0, b"a"), ir_record(2.0, b"b")])
    with pytest.raises(cls, match=message):
        make(**{**dict(path=path, index_path=index), **kwargs})


def test_missing_files(tmp_path):
    path, index, _ = write_one(tmp_path, [ir_record(1.0, b"a")])
    with pytest.raises(ValueError, match="readers.mxnet.*cannot read '.*nope.rec'"):
        make(path=[path, str(tmp_path / "nope.rec")], index_path=index)
    with pytest.raises(ValueError, match="readers.mxnet.*cannot open index_path '.*nope.idx'"):
        make(path=path, index_path=str(tmp_path / "nope.idx"))
    open(index, "w").write("no numbers\n")
    with pytest.raises(ValueError, match="readers.mxnet.*the index file '.*a.idx' holds no records"):
        make(path=path, index_path=index)


@pytest.mark.parametrize("dont_use_mmap", [False, True])
@pytest.mark.parametrize("index,batch,cls,message", [
    ("0 0\n1 44\n", 2, RuntimeError, "a.rec at index 44: no RecordIO record there \\(magic number 0x00000000, "
                                     "expected 0xced7230a\\)"),
    ("0 0\n1 80\n", 2, ValueError, "the index file '.*a.idx' gives offset 80, outside the 76 bytes"),
    ("0 -4\n", 1, ValueError, "gives offset -4, outside"),
    ("0 0\n1 20\n", 2, RuntimeError, "a.rec at index 0: the record is 20 bytes, shorter than"),
    ("0 0\n1 32\n", 1, RuntimeError, "a.rec at index 0: the record's length is 27 bytes, 24 are left"),
])
def test_index_and_file_mismatch(tmp_path, index, batch, cls, message, dont_use_mmap):
    path, index_path, offsets = write_one(tmp_path, [ir_record(1.0, b"abc"), ir_record(2.0, b"abcdefgh")])
    assert offsets == [0, 36] and os.path.getsize(path) == 76
    open(index_path, "w").write(index)
    with pytest.raises(cls, match="readers.mxnet.*" + message):
        run(make(path=path, index_path=index_path, dont_use_mmap=dont_use_mmap, batch_size=batch), 1, batch)


def test_an_offset_at_the_end_is_no_record(tmp_path):
    path, index, _ = write_one(tmp_path, [ir_record(1.0, b"abc")])
    open(index, "a").write("1 36\n")
    assert make(path=path, index_path=index).meta()["epoch_size"] == 1


def test_bad_magic_in_the_second_file_names_it(tmp_path):
    a, _, _ = write_one(tmp_path, [ir_record(1.0, b"abc")], "a")
    (tmp_path / "b.rec").write_bytes(b"\x01\x02\x03\x04" * 12)
    (tmp_path / "all.idx").write_text("0 0\n1 36\n")
    op = make(path=[a, str(tmp_path / "b.rec")], index_path=str(tmp_path / "all.idx"), batch_size=2)
    with pytest.raises(RuntimeError, match="readers.mxnet.*b.rec at index 0: no RecordIO record there "
                                           "\\(magic number 0x04030201, expected 0xced7230a\\)"):
        run(op, 1, 2)


@pytest.mark.parametrize("raw,message", [
    (MAGIC + struct.pack("<I", 3 << 29 | 28) + ir_record(1.0, b"abcd"), "the index names a continuation part "
                                                                          "\\(flag 3\\)"),
    (MAGIC + struct.pack("<I", 5 << 29 | 28) + ir_record(1.0, b"abcd"), "the index names a part with an invalid "
                                                                          "flag \\(flag 5\\)"),
    (MAGIC + struct.pack("<I", 28) + struct.pack("<IfQQ", 2, 0, 0, 0) + b"abcd", "the header announces 2 labels, "
                                                                                   "the 28-byte record"),
    (MAGIC + struct.pack("<I", 1 << 29 | 24) + ir_record(1.0, b"") + MAGIC + struct.pack("<I", 0),
     "part 1 of the record has the continuation flag 0, not 2 or 3"),
    (MAGIC + struct.pack("<I", 1 << 29 | 24) + ir_record(1.0, b"") + b"\0" * 8, "part 1 .* magic number 0x00000000"),
    (MAGIC + struct.pack("<I", 1 << 29 | 24) + ir_record(1.0, b"") + MAGIC + struct.pack("<I", 2 << 29),
     "the record's part 2 runs past the next record"),
    (MAGIC + struct.pack("<I", 1 << 29 | 4) + b"\0" * 4 + MAGIC + struct.pack("<I", 3 << 29 | 8) + b"\0" * 16,
     "the record \\(16 bytes\\) is shorter than its header and labels"),
])
def test_malformed_records(tmp_path, raw, message):
    (tmp_path / "a.rec").write_bytes(raw)
    (tmp_path / "a.idx").write_text("0 0\n")
    op = make(path=str(tmp_path / "a.rec"), index_path=str(tmp_path / "a.idx"), batch_size=1)
    with pytest.raises(RuntimeError, match="readers.mxnet.*a.rec at index 0: " + message):
        run(op, 1, 1)


# --- NVIDIA DALI as the oracle (optional) ---

dali = optional_dali()


def dali_run(kwargs, batch_size, iterations):
    @dali.pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, prefetch_queue_depth=1)
    def pipe():
        return tuple(dali.fn.readers.mxnet(name="R", **kwargs))

    p = pipe()
    p.build()
    out = []
    for _ in range(iterations):
        images, labels = p.run()
        assert all(labels[j].source_info() == "" for j in range(batch_size))
        out.append([(images[j].source_info(), images.at(j).tobytes(), labels.at(j).tolist(), labels.at(j).shape)
                    for j in range(batch_size)])
    return out, p.reader_meta("R")


def outcome(call):
    """What `call` gives, or "error" where it raises."""
    try:
        return call()
    except RuntimeError:
        return "error"


@pytest.mark.skipif(dali is None, reason=NO_DALI)
class TestAgainstDALI:
    def test_arguments(self):
        import nvidia.dali.backend as dali_backend

        sch = schema.get("readers.mxnet")
        assert set(dali_backend.GetSchema("readers__MXNet").GetArgumentNames()) <= set(sch.args)
        assert {"readers.MXNet", "MXNetReader"} <= set(sch.class_names)
        assert sch.deprecated_names == ("mxnet_reader",) and callable(dali.fn.mxnet_reader)

    @pytest.mark.parametrize("files", [1, 2, 3])
    @pytest.mark.parametrize("dont_use_mmap", [False, True])
    def test_records(self, dataset, tmp_path, files, dont_use_mmap):
        paths = dataset[0][:files]
        rec2idx.write_index(paths, str(tmp_path / "some.idx"))
        kwargs = dict(path=paths, index_path=[str(tmp_path / "some.idx")], dont_use_mmap=dont_use_mmap)
        count = [4, 11, 13][files - 1]
        expected, meta = dali_run(dict(kwargs), count, 2)
        op = make(batch_size=count, **kwargs)
        assert run(op, 2, count) == expected and op.meta() == meta

    @pytest.mark.parametrize("num_shards", [1, 2, 3])
    @pytest.mark.parametrize("pad_last_batch", [False, True])
    @pytest.mark.parametrize("stick_to_shard", [False, True])
    def test_sharded_order_over_epochs(self, dataset, num_shards, pad_last_batch, stick_to_shard):
        batch_size, iterations = 3, 12  # 36 samples: 2+ epochs of any shard
        for shard_id in range(num_shards):
            kwargs = dict(path=dataset[0], index_path=[dataset[1]], num_shards=num_shards, shard_id=shard_id,
                          pad_last_batch=pad_last_batch, stick_to_shard=stick_to_shard)
            expected, meta = dali_run(dict(kwargs), batch_size, iterations)
            op = make(batch_size=batch_size, **kwargs)
            assert run(op, iterations, batch_size) == expected, kwargs
            assert op.meta() == meta

    @pytest.mark.parametrize("lines", ["9 {o2}\n3 {o0}\n5 {o1}\n", "0 {o0}\n1 {o0}\n2 {o2}\n", "0 {o0}\n2 {o2}\n",
                                       "0 {o0} 1 {o1}\n2 {o2} 7\n", "0 {o0}\nfoo\n2 {o2}\n", "0 {o0}\n1 4\n",
                                       "0 {o0}\n1 {o1}\n2 {o2}\n3 {o3}\n"])
    def test_index_parsing(self, tmp_path, lines):
        path, index, offsets = write_one(tmp_path, [ir_record(float(k), b"image %d" % k) for k in range(3)])
        open(index, "w").write(lines.format(o0=offsets[0], o1=offsets[1], o2=offsets[2],
                                            o3=offsets[2] + 24))  # o3: within the last record
        kwargs = dict(path=path, index_path=[index])
        expected = outcome(lambda: dali_run(dict(kwargs), 2, 3))
        got = outcome(lambda: (run(make(batch_size=2, **kwargs), 3, 2), make(**kwargs).meta()))
        assert got == expected

    @pytest.mark.parametrize("kwargs,size", [
        (dict(random_shuffle=True, initial_fill=5, num_shards=2, shard_id=1, stick_to_shard=True, seed=3), 7),
        (dict(random_shuffle=True, initial_fill=32, seed=5, dont_use_mmap=True), 13),
    ])
    def test_shuffled_epochs_hold_the_same_records(self, dataset, kwargs, size):
        """Each epoch holds the shard's records once (the orders differ), with their contents."""
        kwargs = dict(path=dataset[0], index_path=[dataset[1]], **kwargs)
        ours, theirs = run(make(batch_size=size, **kwargs), 4, size), dali_run(dict(kwargs), size, 4)[0]
        for batches in (ours, theirs):
            epochs = [collections.Counter(s[0] for s in b) for b in batches]
            assert all(e == epochs[0] for e in epochs) and set(epochs[0].values()) == {1}
        assert sorted(sum(ours, [])) == sorted(sum(theirs, []))

    def test_shuffle_after_epoch_keeps_each_file_in_order(self, dataset):
        """Both shuffle the files' order each epoch (the permutations differ) and keep the
        records of a file in order."""
        kwargs = dict(path=dataset[0], index_path=[dataset[1]], shuffle_after_epoch=True)
        for batches in (dali_run(dict(kwargs), 13, 3)[0], run(make(batch_size=13, **kwargs), 3, 13)):
            got = infos(batches)
            for e in range(3):
                epoch = got[13 * e:13 * e + 13]
                assert sorted(epoch) == sorted(got[:13])
                for path in dataset[0]:
                    mine = [int(s.rsplit(" ", 1)[1]) for s in epoch if s.startswith(path + " ")]
                    assert mine == sorted(mine)

    @pytest.mark.parametrize("record_id,labels", SPLIT_BEFORE_THE_IMAGE)
    def test_dali_rejects_records_split_before_their_image(self, tmp_path, record_id, labels):
        """The records test_records_split_before_their_image reads (a deliberate difference)."""
        path, index, _ = write_one(tmp_path, [ir_record(labels, b"\xff\xd8image", record_id)])
        with pytest.raises(RuntimeError, match="Invalid RecordIO file: .*a.rec at index 0"):
            dali_run(dict(path=[path], index_path=[index]), 1, 1)

    @pytest.mark.parametrize("damage", ["missing rec", "missing idx", "two idx", "bad magic", "empty idx"])
    def test_both_reject(self, tmp_path, damage):
        path, index, offsets = write_one(tmp_path, [ir_record(1.0, b"abc"), ir_record(2.0, b"abcdefgh")])
        kwargs = dict(path=[path], index_path=[index])
        if damage == "missing rec":
            kwargs["path"] = [path, str(tmp_path / "nope.rec")]
        elif damage == "missing idx":
            kwargs["index_path"] = [str(tmp_path / "nope.idx")]
        elif damage == "two idx":
            kwargs["index_path"] = [index, index]
        elif damage == "bad magic":
            open(index, "w").write("0 0\n1 8\n")
        else:
            open(index, "w").write("")
        with pytest.raises(RuntimeError):
            dali_run(dict(kwargs), 2, 1)
        with pytest.raises((ValueError, RuntimeError)):
            run(make(batch_size=2, **kwargs), 1, 2)
