"""readers.webdataset and the wds2idx tool: tar formats (PAX as Python's tarfile writes
them, GNU, ustar), sample keys, extension groups, missing components, dtypes, index files
(ours and DALI's), sharding, padding, shuffling, checkpoints, how archives are read, and
errors; compared with NVIDIA DALI's reader on the same archives where DALI is installed."""
import concurrent.futures
import io
import itertools
import json
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest

import torchdali
from torchdali import storage
from torchdali.operators import blocks, webdataset
from torchdali.operators.base import Args, RunContext
from torchdali.tools import wds2idx

from conftest import dali_or_skip, make_reader


def write_tar(path, members, fmt=tarfile.PAX_FORMAT):
    """A tar of `members`: (name, bytes) files, (name, None) directories, (name, "target")
    symlinks. The mtime is a float, as os.stat gives it to tarfile.add: in the PAX format
    (tarfile's default) every member then gets a PAX header."""
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.mtime = 1700000000.25
            if data is None:
                info.type = tarfile.DIRTYPE
            elif isinstance(data, str):
                info.type, info.linkname = tarfile.SYMTYPE, data
            else:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if isinstance(data, bytes) else None)
    return str(path)


def tar_members(path):
    """tarfile's own view: name -> (data offset, contents) of the regular members."""
    with tarfile.open(path) as tar:
        return {m.name: (m.offset_data, tar.extractfile(m).read()) for m in tar if m.isreg()}


def blob(rng, n):
    return rng.integers(0, 256, n, dtype=np.uint8).tobytes()


LONG = "deep/" + "n" * 110  # a key beyond ustar's 100 characters


def mixed_members(rng):
    """Samples in sub-folders, a long key, hidden files, folders, a symlink, a member that
    no extension group takes, a sample without .cls, a repeated key that is not adjacent."""
    return [("train", None), ("train/0001.jpg", blob(rng, 301)), ("train/0001.cls", b"3"),
            ("train/.hidden.jpg", b"h"), ("train/0002.jpg", blob(rng, 1)), ("train/0002.seg.png", blob(rng, 77)),
            ("train/0002.cls", b"12"), ("train/0002.png", blob(rng, 5)), ("link.jpg", "train/0001.jpg"),
            ("train/0003.jpg", b""),
            (LONG + ".jpg", blob(rng, 513)), (LONG + ".cls", b"5"), ("0004.txt", b"text"),
            ("train/0001.png", blob(rng, 9)), (".top_hidden.cls", b"9")]


def expected_samples(path, members, groups):
    """Per sample, per output: (contents, source_info), by hand from tarfile's view."""
    where = tar_members(path)
    samples, last = [], None
    for name, data in members:
        if not isinstance(data, bytes) or os.path.basename(name).startswith("."):
            continue
        ext = name.rpartition("/")[2].partition(".")[2]
        key = name[:len(name) - len(ext) - 1]
        if key != last:
            samples.append({})
            last = key
        samples[-1].setdefault(ext, name)
    out = []
    for sample in samples:
        row = []
        for group in groups:
            name = next((sample[e] for e in sample if e in group.split(";")), None)
            row.append((where[name][1], f"{path}:{where[name][0]}:{name}") if name else (b"", ""))
        out.append(row)
    return out


def make(batch_size=3, seed=1234, **kwargs):
    return make_reader("readers.webdataset", batch_size, seed, **kwargs)


def step(op, batch_size=3, pool=None):
    """One batch: per sample, per output (contents, source_info); checks dtypes and dims."""
    outs = op.run([], Args(op, {}), RunContext(iteration=0, batch_size=batch_size, thread_pool=pool))
    rows = []
    for i in range(batch_size):
        row = []
        for o, dtype in zip(outs, op.dtypes):
            t = o.as_torch_list()[i]
            assert t.dtype == dtype and t.dim() == 1
            row.append((t.numpy().tobytes(), o.source_info[i]))
        rows.append(row)
    return rows


def read_all(op, n, batch_size=3):
    rows = []
    while len(rows) < n:
        rows += step(op, batch_size)
    return rows[:n]


# --- archives, keys and extension groups ---

@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
@pytest.mark.parametrize("indexed", [False, True])
def test_tar_formats_keys_and_groups(tmp_path, fmt, indexed):
    members = mixed_members(np.random.default_rng(fmt))
    path = write_tar(tmp_path / "a.tar", members, fmt)
    kwargs = dict(paths=[path], ext=["jpg;png", "cls", "seg.png"])
    if indexed:
        assert wds2idx.main([path, str(tmp_path / "a.idx")]) == 0
        kwargs["index_paths"] = [str(tmp_path / "a.idx")]
    expected = expected_samples(path, members, kwargs["ext"])
    with pytest.warns(UserWarning, match="several members of a sample match output 0") as warned:
        op = make(**kwargs)  # train/0002 has .jpg and .png: the first is read
    assert len(warned) == 1 and op.meta()["epoch_size"] == len(expected) == 6
    assert read_all(op, 2 * len(expected)) == expected * 2


def test_tarfile_add_of_a_folder(tmp_path):
    """The way most archives are made with Python: tarfile.add of a folder (PAX headers with
    the files' float mtimes, folder entries), members in sub-folders."""
    rng = np.random.default_rng(0)
    src = tmp_path / "src"
    for i in range(4):
        (src / f"part{i % 2}").mkdir(parents=True, exist_ok=True)
        (src / f"part{i % 2}" / f"s{i}.jpg").write_bytes(blob(rng, 100 + i))
        (src / f"part{i % 2}" / f"s{i}.json").write_bytes(b"{}")
    with tarfile.open(tmp_path / "f.tar", "w") as tar:
        for sub in sorted(os.listdir(src)):
            for name in sorted(os.listdir(src / sub)):
                tar.add(src / sub / name, arcname=f"{sub}/{name}")
    got = read_all(make(paths=[str(tmp_path / "f.tar")], ext=["jpg", "json"]), 4)
    where = tar_members(tmp_path / "f.tar")
    names = [f"part{i % 2}/s{i}" for i in (0, 2, 1, 3)]
    assert [r[0][1] for r in got] == [f"{tmp_path}/f.tar:{where[n + '.jpg'][0]}:{n}.jpg" for n in names]
    assert [r[0][0] for r in got] == [where[n + ".jpg"][1] for n in names] and all(r[1][0] == b"{}" for r in got)


def test_split_name_follows_dali():
    assert webdataset.split_name("a/b.c/key.seg.png") == ("a/b.c/key", "seg.png")
    assert webdataset.split_name("dir/README") == ("dir/README", "dir/README")
    assert webdataset.split_name(".hidden.jpg") == ("", "hidden.jpg")


def test_case_insensitive_extensions(tmp_path):
    path = write_tar(tmp_path / "c.tar", [("a.JPG", b"1"), ("a.Cls", b"2"), ("b.jpg", b"3")])
    assert make(paths=[path], ext=["jpg", "cls"]).meta()["epoch_size"] == 2
    got = read_all(make(paths=[path], ext=["jpg", "CLS"], case_sensitive_extensions=False), 2)
    assert [[v for v, _ in row] for row in got] == [[b"1", b"2"], [b"3", b""]]
    got = read_all(make(paths=[path], ext=["jpg", "CLS"]), 2)  # case-sensitive: JPG and Cls match nothing
    assert [[v for v, _ in row] for row in got] == [[b"", b""], [b"3", b""]]


@pytest.mark.parametrize("behavior,expected", [("", [[b"1", b"2"], [b"3", b""], [b"", b"5"]]),
                                               ("Empty", [[b"1", b"2"], [b"3", b""], [b"", b"5"]]),
                                               ("skip", [[b"1", b"2"]] * 3)])
def test_missing_component_behavior(tmp_path, behavior, expected):
    path = write_tar(tmp_path / "m.tar", [("a.jpg", b"1"), ("a.cls", b"2"), ("b.jpg", b"3"), ("c.cls", b"5")])
    got = read_all(make(paths=[path], ext=["jpg", "cls"], missing_component_behavior=behavior), 3)
    assert [[v for v, _ in row] for row in got] == expected
    with pytest.raises(RuntimeError, match=r"readers.webdataset.*m.tar', sample 1: .*no member for output 1"):
        make(paths=[path], ext=["jpg", "cls"], missing_component_behavior="error")


def test_the_first_of_several_matching_members_is_read(tmp_path):
    path = write_tar(tmp_path / "w.tar", [("a.jpg", b"1"), ("a.png", b"2"), ("b.png", b"3"), ("b.jpg", b"4")])
    with pytest.warns(UserWarning, match="several members of a sample match output 0") as warned:
        op = make(paths=[path], ext=["jpg;png"])
    assert len(warned) == 1 and [row[0][0] for row in read_all(op, 2)] == [b"1", b"3"]


def test_a_member_may_feed_several_outputs(tmp_path):
    path = write_tar(tmp_path / "s.tar", [("a.jpg", b"1"), ("a.cls", b"2")])
    got = read_all(make(paths=[path], ext=["jpg", "jpg;cls"], missing_component_behavior="skip"), 1)
    assert [v for v, _ in got[0]] == [b"1", b"1"]


@pytest.mark.parametrize("dtype", ["INT16", "FLOAT", "FLOAT64", "UINT32"])
def test_dtypes(tmp_path, dtype):
    np_dtype = torchdali.types.to_numpy_type(getattr(torchdali.types, dtype))
    values = np.arange(-3, 9).astype(np_dtype)
    path = write_tar(tmp_path / "d.tar", [("a.bin", values.tobytes()), ("a.u8", b"xyz"), ("b.u8", b"q")])
    op = make(paths=[path], ext=["bin", "u8"], dtypes=[getattr(torchdali.types, dtype), torchdali.types.UINT8])
    outs = op.run([], Args(op, {}), RunContext(iteration=0, batch_size=2, thread_pool=None))
    assert np.array_equal(outs[0].as_torch_list()[0].numpy(), values)
    assert outs[0].as_torch_list()[1].numel() == 0 and outs[1].as_torch_list()[1].numpy().tobytes() == b"q"
    with pytest.raises(RuntimeError, match=r"'a.u8' has 3 bytes, not a multiple"):
        make(paths=[path], ext=["bin", "u8"], dtypes=[getattr(torchdali.types, dtype)] * 2)


# --- how archives are read ---

def test_the_scan_reads_headers_only(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    members = [(f"{i:03d}.{e}", blob(rng, 50_000 + i)) for i in range(6) for e in ("jpg", "bin")]
    path = write_tar(tmp_path / "big.tar", members)
    read = []

    class Counting(io.FileIO):
        def read(self, n=-1):
            data = super().read(n)
            read.append(len(data))
            return data

    monkeypatch.setattr(storage, "open_stream", lambda p, *a: Counting(p, "rb"))
    assert make(paths=[path], ext=["jpg"]).meta()["epoch_size"] == 6
    assert sum(read) <= 12 * 3 * 512 and max(read) <= 512  # a header and a PAX record per member


def test_archives_at_urls_stream_in_blocks(tmp_path, monkeypatch):
    """Archives at URLs (fsspec's memory://) are read in whole aligned blocks, one request
    each, kept for the next batches (a second epoch reads nothing); local archives are read
    by the C++ kernel, never through storage.read_bytes."""
    fsspec = pytest.importorskip("fsspec")
    monkeypatch.setattr(storage, "cache_dir", None)
    monkeypatch.delenv(storage.CACHE_ENV, raising=False)
    rng = np.random.default_rng(2)
    members = [(f"{i:03d}.jpg", blob(rng, 1000 + i)) for i in range(8)]
    members.insert(4, ("003.bin", blob(rng, 200_000)))  # blocks of it are never read for jpg alone
    local = write_tar(tmp_path / "r.tar", members)
    path = f"memory://wds-blocks-{os.getpid()}-{id(tmp_path)}/r.tar"
    fsspec.filesystem("memory").pipe(path[len("memory://") - 1:], open(local, "rb").read())
    calls = []
    read_bytes = storage.read_bytes
    monkeypatch.setattr(storage, "read_bytes", lambda p, s=0, n=None: calls.append((s, n)) or read_bytes(p, s, n))
    where = tar_members(local)
    expected = [(where[f"{i:03d}.jpg"][1], f"{path}:{where[f'{i:03d}.jpg'][0]}:{i:03d}.jpg") for i in range(8)]
    op = make(paths=[path], ext=["jpg"], batch_size=8)
    assert [g[0] for g in step(op, 8)] == expected and len(calls) == 1  # the archive is one 4 MiB block
    calls.clear()
    assert [g[0] for g in step(op, 8)] == expected and calls == []  # the next epoch: from the block kept
    both = step(make(paths=[path], ext=["jpg", "bin"], batch_size=8), 8)
    assert len(calls) == 1 and [g[0] for g in both] == expected
    size = os.path.getsize(local)
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 4096)
    touched = sorted({b for i in range(8) for offset, data in [where[f"{i:03d}.jpg"]]
                      for b in range(offset // 4096, (offset + len(data) - 1) // 4096 + 1)})
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # a batch's blocks spread over the pipeline's threads
        calls.clear()
        op = make(paths=[path], ext=["jpg"], batch_size=8)
        assert [g[0] for g in step(op, 8, pool)] == expected
        assert sorted(calls) == [(b * 4096, min(4096, size - b * 4096)) for b in touched]
        calls.clear()
        assert [g[0] for g in step(op, 8, pool)] == expected and calls == []
        on_disk = step(make(paths=[local], ext=["jpg", "bin"], batch_size=8), 8, pool)
        assert calls == [] and [g[0][0] for g in on_disk] == [g[0][0] for g in both]


def test_archives_and_index_files_at_urls(tmp_path, monkeypatch):
    """paths and index_paths as URLs (fsspec's memory://): read through torchdali.storage."""
    fsspec = pytest.importorskip("fsspec")
    monkeypatch.setattr(storage, "cache_dir", None)
    monkeypatch.delenv(storage.CACHE_ENV, raising=False)
    members = mixed_members(np.random.default_rng(4))
    local = write_tar(tmp_path / "u.tar", members)
    assert wds2idx.main([local]) == 0
    fs, root = fsspec.filesystem("memory"), f"/wds-{os.getpid()}-{id(tmp_path)}"
    fs.pipe({f"{root}/u.tar": open(local, "rb").read(), f"{root}/u.idx": open(tmp_path / "u.idx", "rb").read()})
    try:
        url = f"memory:/{root}/u.tar"
        expected = [[(v, i.replace(local, url)) for v, i in row] for row in
                    read_all(make(paths=[local], ext=["jpg;png", "cls"]), 9)]
        assert read_all(make(paths=[url], ext=["jpg;png", "cls"]), 9) == expected
        assert read_all(make(paths=[url], index_paths=[url[:-3] + "idx"], ext=["jpg;png", "cls"]), 9) == expected
    finally:
        fs.rm(root, recursive=True)


# --- sharding, shuffling, checkpoints ---

def shards(tmp_path, sizes=(7, 4, 6), seed=0):
    """Archives of `sizes` samples: .jpg of odd sizes, .cls except every 5th, in folders."""
    rng = np.random.default_rng(seed)
    paths, n = [], 0
    for t, size in enumerate(sizes):
        members = []
        for i in range(size):
            key = f"shard{t}/{n:05d}"
            members.append((key + ".jpg", blob(rng, int(rng.integers(1, 3000)))))
            if n % 5:
                members.append((key + ".cls", str(n).encode()))
            n += 1
        paths.append(write_tar(tmp_path / f"shard{t}.tar", members))
    return paths


def test_shuffle_after_epoch_reorders_whole_archives(tmp_path):
    paths = shards(tmp_path, (3, 2, 4, 1, 3))
    op = make(paths=paths, ext=["jpg"], shuffle_after_epoch=True, batch_size=13)
    epochs = [[info.split(":")[-1].split("/")[0] for (_, info), in step(op, 13)] for _ in range(4)]
    runs = [[k for k, _ in itertools.groupby(e)] for e in epochs]
    assert all(sorted(r) == [f"shard{t}" for t in range(5)] for r in runs)  # each archive once, whole
    assert len({tuple(r) for r in runs}) > 1
    ordered = sorted(step(make(paths=paths, ext=["jpg"], batch_size=13), 13))
    op = make(paths=paths, ext=["jpg"], shuffle_after_epoch=True, random_shuffle=True, initial_fill=4, batch_size=13)
    assert all(sorted(step(op, 13)) == ordered for _ in range(3))
    with pytest.raises(ValueError, match="shuffle_after_epoch and stick_to_shard"):
        make(paths=paths, ext=["jpg"], shuffle_after_epoch=True, stick_to_shard=True)


def test_random_shuffle_keeps_each_epoch(tmp_path):
    paths = shards(tmp_path)
    ordered = [row[0][1] for row in read_all(make(paths=paths, ext=["jpg"]), 17)]
    op = make(paths=paths, ext=["jpg"], random_shuffle=True, initial_fill=5, batch_size=17, seed=3)
    epochs = [[row[0][1] for row in step(op, 17)] for _ in range(3)]
    assert all(sorted(e) == sorted(ordered) for e in epochs) and epochs[0] != ordered


@pytest.mark.parametrize("kwargs", [dict(), dict(random_shuffle=True, initial_fill=6),
                                    dict(num_shards=3, shard_id=2, pad_last_batch=True),
                                    dict(shuffle_after_epoch=True, num_shards=2, shard_id=1)])
def test_checkpoint_resumes_mid_epoch(tmp_path, kwargs):
    paths = shards(tmp_path)
    op = make(paths=paths, ext=["jpg", "cls"], batch_size=4, **kwargs)
    for _ in range(3):
        step(op, 4)
    state = json.loads(json.dumps(op.state_dict()))
    expected = [step(op, 4) for _ in range(8)]
    fresh = make(paths=paths, ext=["jpg", "cls"], batch_size=4, **kwargs)
    fresh.load_state_dict(state)
    assert [step(fresh, 4) for _ in range(8)] == expected


def test_lazy_init_scans_at_first_run(tmp_path):
    path = str(tmp_path / "late.tar")
    op = make(paths=[path], ext=["jpg"], lazy_init=True)
    write_tar(path, [("a.jpg", b"late")])
    assert step(op, 1) == [[(b"late", f"{path}:1536:a.jpg")]]


# --- index files and the tool ---

def test_index_v1_1_has_no_member_names(tmp_path):
    path = write_tar(tmp_path / "v.tar", [("a.jpg", b"A"), ("a.cls", b"1"), ("b.jpg", b"B")], tarfile.GNU_FORMAT)
    (tmp_path / "v.idx").write_text("v1.1 2\njpg 512 1 cls 1536 1\njpg 2560 1\n")
    got = read_all(make(paths=[path], index_paths=[str(tmp_path / "v.idx")], ext=["jpg", "cls"]), 2)
    assert got == [[(b"A", f"{path}:512:"), (b"1", f"{path}:1536:")], [(b"B", f"{path}:2560:"), (b"", "")]]


def test_wds2idx_tool(tmp_path, capsys):
    members = mixed_members(np.random.default_rng(5))
    path = write_tar(tmp_path / "t.tar", members)
    assert wds2idx.main([path]) == 0 and "t.idx: 6 samples" in capsys.readouterr().out
    lines = (tmp_path / "t.idx").read_text().splitlines()
    where = tar_members(path)
    assert lines[0] == "v1.2 6" and len(lines) == 7
    assert lines[1] == f"jpg {where['train/0001.jpg'][0]} 301 train/0001.jpg cls {where['train/0001.cls'][0]} 1 " \
                       "train/0001.cls"
    assert wds2idx.default_index_path("data/x.tar") == "data/x.idx"
    assert wds2idx.default_index_path("d.v2/.x.tar") == "d.v2/.x.idx"
    assert wds2idx.default_index_path("noext") == "noext.idx"
    empty = write_tar(tmp_path / "e.tar", [("dir", None)])
    assert wds2idx.main([empty]) == 1 and "holds no samples" in capsys.readouterr().err
    spaced = write_tar(tmp_path / "s.tar", [("a b.jpg", b"1")])
    assert wds2idx.main([spaced]) == 1 and "whitespace" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "s.idx")


def test_wds2idx_as_a_module(tmp_path):
    path = write_tar(tmp_path / "m.tar", [("a.jpg", b"1")])
    run = subprocess.run([sys.executable, "-m", "torchdali.tools.wds2idx", path, str(tmp_path / "out.idx")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "Warning" not in run.stderr, run.stderr
    assert (tmp_path / "out.idx").read_text() == "v1.2 1\njpg 1536 1 a.jpg\n"


# --- errors ---

@pytest.mark.parametrize("kwargs,message", [
    (dict(paths=[], ext=["jpg"]), "paths is empty"),
    (dict(paths=["a.tar", "b.tar"], index_paths=["a.idx"], ext=["jpg"]), "got 1 index_paths for 2 paths"),
    (dict(paths=["a.tar"], ext=[]), "ext"),
    (dict(paths=["a.tar"], ext=["jpg"], missing_component_behavior="ignore"), "is not one of"),
    (dict(paths=["a.tar"], ext=["jpg", "cls"], dtypes=[torchdali.types.INT16]), "got 1 dtypes for 2 ext"),
    (dict(paths=["a.tar"], ext=["jpg"], dtypes=[torchdali.types.BOOL]), "not supported"),
])
def test_argument_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(lazy_init=True, **kwargs)


@pytest.mark.parametrize("text,message", [
    ("v1.0 1\njpg 512 1\n", "line 1: version 'v1.0'"),
    ("", "line 1: no version"),
    ("v1.2 0\n", "sample count must be positive"),
    ("v1.2 2\njpg 512 1 a.jpg\n", "line 3: no components"),
    ("v1.2 1\njpg 512 1\n", "line 2: incomplete components"),
    ("v1.2 1\njpg 500 1 a.jpg\n", "line 2: offset 500 is not a non-negative multiple"),
    ("v1.2 1\njpg -512 1 a.jpg\n", "line 2: offset -512 is not a non-negative multiple"),
    ("v1.2 1\njpg 512 -1 a.jpg\n", "line 2: a negative size"),
    ("v1.2 1\njpg 5x 1 a.jpg\n", "line 2: '5x' is not an integer"),
    ("v1.2 1\njpg 51200 1 a.jpg\n", "'a.jpg' at offset 51200 ends past the end of tar file"),
])
def test_malformed_index_files(tmp_path, text, message):
    path = write_tar(tmp_path / "a.tar", [("a.jpg", b"1")])
    (tmp_path / "a.idx").write_text(text)
    with pytest.raises(RuntimeError, match=f"readers.webdataset.*{message}"):
        make(paths=[path], index_paths=[str(tmp_path / "a.idx")], ext=["jpg"])


def test_damaged_and_missing_archives(tmp_path):
    path = write_tar(tmp_path / "a.tar", [("a.jpg", b"1" * 2000), ("b.jpg", b"2")], tarfile.GNU_FORMAT)
    raw = bytearray(open(path, "rb").read())
    (tmp_path / "cut.tar").write_bytes(raw[:1500])
    with pytest.raises(RuntimeError, match=r"cut.tar' at offset 0: member 'a.jpg' \(2000 bytes\) runs past"):
        make(paths=[str(tmp_path / "cut.tar")], ext=["jpg"])
    raw[2560 + 3] ^= 0xFF  # b.jpg's header
    (tmp_path / "bad.tar").write_bytes(raw)
    with pytest.raises(RuntimeError, match="bad.tar' at offset 2560: corrupted header"):
        make(paths=[str(tmp_path / "bad.tar")], ext=["jpg"])
    (tmp_path / "text.tar").write_text("not a tar file\n" * 100)
    with pytest.raises(RuntimeError, match="text.tar' at offset 0: corrupted header"):
        make(paths=[str(tmp_path / "text.tar")], ext=["jpg"])
    with pytest.raises(RuntimeError, match="cannot read tar file '.*nope.tar'"):
        make(paths=[str(tmp_path / "nope.tar")], ext=["jpg"])
    with pytest.raises(RuntimeError, match="cannot read index file '.*nope.idx'"):
        make(paths=[path], index_paths=[str(tmp_path / "nope.idx")], ext=["jpg"])
    with pytest.raises(ValueError, match="no samples in paths"):
        make(paths=[write_tar(tmp_path / "e.tar", [("d", None), (".x.jpg", b"1")])], ext=["jpg"])
    (tmp_path / "v.idx").write_text("v1.2 1\njpg 512 2000 a.jpg\n")
    op = make(paths=[path], index_paths=[str(tmp_path / "v.idx")], ext=["jpg"], batch_size=1)
    os.truncate(path, 1024)  # the archive shrinks after the reader listed it
    with pytest.raises(RuntimeError, match=r"cannot read tar file '.*a.tar': it ends at byte 1024, before the "
                                           r"2000 bytes from 512 \(was it truncated\?\)"):
        step(op, 1)
    fsspec = pytest.importorskip("fsspec")
    url = f"memory://wds-cut-{os.getpid()}-{id(tmp_path)}/a.tar"
    fsspec.filesystem("memory").pipe(url[len("memory://") - 1:], b"\0" * 4096)
    op = make(paths=[url], index_paths=[str(tmp_path / "v.idx")], ext=["jpg"], batch_size=1)
    fsspec.filesystem("memory").pipe(url[len("memory://") - 1:], b"\0" * 1024)
    with pytest.raises(RuntimeError, match=rf"cannot read tar file '{url}': it ends at byte 1024, before the "
                                           r"2000 bytes from 512 \(was it truncated\?\)"):
        step(op, 1)


# --- NVIDIA DALI as the oracle ---

def read(lib, iterations, batch_size=4, **kwargs):
    """Per batch, per sample, per output (dtype, shape, contents, source_info); and the meta."""
    @lib.pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, seed=5, prefetch_queue_depth=1)
    def pipe():
        out = lib.fn.readers.webdataset(name="R", **kwargs)
        return tuple(out) if isinstance(out, (list, tuple)) else out

    p = pipe()
    p.build()
    batches = []
    for _ in range(iterations):
        outs = p.run()
        rows = []
        for i in range(batch_size):
            arrays = [np.array(o.at(i)) for o in outs]
            rows.append([(a.dtype.str, a.shape, a.tobytes(), o[i].source_info()) for a, o in zip(arrays, outs)])
        batches.append(rows)
    return batches, p.reader_meta("R")


def index_with(tool, tmp_path, paths):
    """Index files for `paths`, written by DALI's wds2idx or ours."""
    out = []
    for path in paths:
        idx = f"{path[:-4]}.{tool}.idx"
        if tool == "dali":
            pytest.importorskip("wds2idx").IndexCreator(path, idx, verbose=False).create_index()
        else:
            assert wds2idx.main([path, idx]) == 0
        out.append(idx)
    return out


@pytest.mark.parametrize("indexes", [None, "dali", "ours"])
@pytest.mark.parametrize("num_shards", [1, 3, 7])
@pytest.mark.parametrize("pad_last_batch", [False, True])
@pytest.mark.parametrize("stick_to_shard", [False, True])
def test_same_samples_as_dali_over_epochs(tmp_path, indexes, num_shards, pad_last_batch, stick_to_shard):
    dali = dali_or_skip()
    paths = shards(tmp_path)
    kwargs = dict(paths=paths, ext=["jpg", "cls"], num_shards=num_shards, pad_last_batch=pad_last_batch,
                  stick_to_shard=stick_to_shard)
    if indexes:
        kwargs["index_paths"] = index_with(indexes, tmp_path, paths)
    for shard_id in sorted({0, num_shards // 2, num_shards - 1}):
        expected = read(dali, 12, shard_id=shard_id, **kwargs)  # 2+ epochs of the largest shard
        assert read(torchdali, 12, shard_id=shard_id, **kwargs) == expected, shard_id


@pytest.mark.parametrize("kwargs", [
    dict(ext=["jpg;png", "cls", "seg.png"]),
    dict(ext=["jpg;png", "cls"], missing_component_behavior="skip"),
    dict(ext="png;cls"),
    dict(ext=["JPG", "cls"], case_sensitive_extensions=False),
])
@pytest.mark.parametrize("indexes", [None, "ours"])
def test_outputs_match_dali(tmp_path, kwargs, indexes):
    dali = dali_or_skip()
    members = mixed_members(np.random.default_rng(7))
    if indexes is None:  # where DALI's scan differs (see the tests below): hidden files, PAX long names
        members = [m for m in members if not os.path.basename(m[0]).startswith(".") and not m[0].startswith(LONG)]
    path = write_tar(tmp_path / "m.tar", members)  # PAX, as tarfile writes by default
    index = dict(index_paths=index_with(indexes, tmp_path, [path])) if indexes else {}
    assert read(torchdali, 3, paths=[path], **index, **kwargs) == read(dali, 3, paths=[path], **index, **kwargs)


def test_dtypes_match_dali(tmp_path):
    dali = dali_or_skip()
    rng = np.random.default_rng(8)
    path = write_tar(tmp_path / "d.tar", [m for i in range(5) for m in [
        (f"{i}.f32", rng.normal(size=i + 1).astype(np.float32).tobytes()),
        (f"{i}.i16", rng.integers(-999, 999, 2 * i, dtype=np.int16).tobytes())]])
    got, expected = (read(lib, 2, paths=[path], ext=["f32", "i16"], dtypes=[lib.types.FLOAT, lib.types.INT16])
                     for lib in (torchdali, dali))
    assert got == expected and [out[0] for out in got[0][0][0]] == ["<f4", "<i2"]


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_dali_reads_our_index_files(tmp_path, fmt):
    """Long and non-ASCII names: DALI's reader with our index reads what ours reads without
    one. DALI's own scan gets these PAX archives wrong (it takes ustar's truncated or
    '?'-replaced name), and DALI's wds2idx gets GNU long names' offsets wrong."""
    dali = dali_or_skip()
    rng = np.random.default_rng(9)
    path = write_tar(tmp_path / "l.tar", [(LONG + ".jpg", blob(rng, 700)), (LONG + ".cls", b"1"),
                                          ("é/ü.jpg", blob(rng, 3)), ("x.jpg", b"x")], fmt)
    kwargs = dict(paths=[path], ext=["jpg", "cls"])
    ours = read(torchdali, 2, **kwargs)
    assert read(dali, 2, index_paths=index_with("ours", tmp_path, [path]), **kwargs) == ours
    assert ours[0][0][0][0][3] == f"{path}:{tar_members(path)[LONG + '.jpg'][0]}:{LONG}.jpg"
    if fmt == tarfile.GNU_FORMAT:
        assert read(dali, 2, **kwargs) == ours  # DALI's scan reads GNU long names


def test_hidden_first_member_differs_from_dalis_scan(tmp_path):
    """DALI's scan adds an empty sample when an archive starts with a hidden file and keeps
    hidden files in folders (as a sample keyed by the folder); its index files (and ours)
    skip them, as its documentation says. We read what DALI reads with an index."""
    dali = dali_or_skip()
    path = write_tar(tmp_path / "h.tar", [(".h.jpg", b"H"), ("a.jpg", b"A"), ("d/.x.jpg", b"X"), ("b.jpg", b"B")])
    kwargs = dict(paths=[path], ext=["jpg"], batch_size=2)
    expected = read(dali, 2, index_paths=index_with("dali", tmp_path, [path]), **kwargs)
    assert read(torchdali, 2, **kwargs) == expected
    assert read(dali, 2, **kwargs)[1]["epoch_size"] == 4 and expected[1]["epoch_size"] == 2  # '', a, d/, b


def test_shuffling_epochs_match_dalis_multisets(tmp_path):
    dali = dali_or_skip()
    paths = shards(tmp_path)
    for kwargs in (dict(random_shuffle=True, initial_fill=5), dict(shuffle_after_epoch=True),
                   dict(shuffle_after_epoch=True, random_shuffle=True, initial_fill=3)):
        epochs = []
        for lib in (torchdali, dali):
            batches, meta = read(lib, 3, batch_size=17, paths=paths, ext=["jpg"], **kwargs)
            epochs.append([sorted(row[0][3] for row in batch) for batch in batches])
            assert meta["stick_to_shard"] == int("shuffle_after_epoch" in kwargs)
        assert epochs[0] == epochs[1] and len({tuple(e) for e in epochs[0]}) == 1
