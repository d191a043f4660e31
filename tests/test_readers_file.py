"""readers.file: listing, labels, sharding, padding, wrap-around, shuffling, checkpoints
and errors, with the operator built directly from its schema. An optional class compares
the sample order with NVIDIA DALI's when `nvidia.dali` is importable."""
import collections
import json

import numpy as np
import pytest
import torch

from torchdali import schema
from torchdali.operators import readers  # noqa: F401  (registers readers.file)
from torchdali.operators.base import Args, RunContext
from torchdali.operators.readers import take_from_buffer

from conftest import make_reader, NO_DALI, optional_dali


def make(batch_size=3, seed=1234, **kwargs):
    return make_reader("readers.file", batch_size, seed, **kwargs)


def run(op, iterations, batch_size=3):
    """[(source_info, label, contents)] per batch."""
    out = []
    for i in range(iterations):
        data, labels = op.run([], Args(op, {}), RunContext(iteration=i, batch_size=batch_size,
                                                                thread_pool=None))
        assert len(data) == len(labels) == batch_size
        batch = []
        for j in range(batch_size):
            d, lab = data.as_torch_list()[j], labels.as_torch_list()[j]
            assert d.dtype == torch.uint8 and d.dim() == 1
            assert lab.dtype == torch.int32 and tuple(lab.shape) == (1,)
            batch.append((data.source_info[j], int(lab[0]), bytes(d.numpy())))
        out.append(batch)
    return out


def names(batches):
    return [[s[0] for s in b] for b in batches]


def flat(batches):
    return [s[0] for b in batches for s in b]


@pytest.fixture
def tree(tmp_path):
    """file_root with classes in unsorted creation order, an empty class, filtered-out files."""
    layout = {"dog": ["b.jpg", "a.JPG", "c.png", "notes.txt"], "cat": ["2.jpg", "10.jpeg", "1.jpg"],
              "empty": [], "zebra": ["z.webp"]}
    for cls, files in layout.items():
        (tmp_path / cls).mkdir()
        for f in files:
            (tmp_path / cls / f).write_bytes(f"{cls}/{f}".encode())
    (tmp_path / "top.jpg").write_bytes(b"top")  # files in the root itself are not listed
    return tmp_path


@pytest.fixture
def flat_files(tmp_path):
    def make_files(n):
        paths = []
        for i in range(n):
            p = tmp_path / f"f{i:03d}.bin"
            p.write_bytes(f"sample {i}".encode())
            paths.append(str(p))
        return paths
    return make_files


# --- listing and labels ---

def test_file_root_order_labels_and_filters(tree):
    op = make(file_root=str(tree))
    got = run(op, 3)
    expected = [("cat/1.jpg", 0), ("cat/10.jpeg", 0), ("cat/2.jpg", 0), ("dog/a.JPG", 1), ("dog/b.jpg", 1),
                ("dog/c.png", 1), ("zebra/z.webp", 3)]
    assert [(s[0], s[1]) for b in got for s in b][:7] == expected
    assert all(s[2] == s[0].encode() for b in got for s in b)  # contents
    assert flat(got)[7:] == ["cat/1.jpg", "cat/10.jpeg"]  # wraps into the next epoch
    assert op.meta() == {"epoch_size": 7, "epoch_size_padded": 7, "number_of_shards": 1, "shard_id": 0,
                         "pad_last_batch": 0, "stick_to_shard": 0}


def test_file_root_filter_options(tree):
    assert make(file_root=str(tree), case_sensitive_filter=True).meta()["epoch_size"] == 6  # a.JPG out
    op = make(file_root=str(tree), file_filters="*.webp")
    assert flat(run(op, 1)) == ["zebra/z.webp"] * 3
    assert run(op, 1)[0][0][1] == 3  # the empty class still takes label 2
    op = make(file_root=str(tree), dir_filters=["d*", "?og", "zeb*"])  # matched twice, listed once
    assert [(s[0], s[1]) for s in run(op, 2, 2)[1]] == [("dog/c.png", 0), ("zebra/z.webp", 1)]
    assert op.meta()["epoch_size"] == 4
    op = make(file_root=str(tree), file_filters=["[^a]*.jpg"])  # POSIX negated set
    assert flat(run(op, 1)) == ["cat/1.jpg", "cat/2.jpg", "dog/b.jpg"]


def test_file_list_relative_to_list_folder_and_file_root(tree, tmp_path):
    (tree / "list.txt").write_text("dog/c.png 12\n\n   \ncat/1.jpg\t3\r\ndog/b.jpg 0   \n")
    got = run(make(file_list=str(tree / "list.txt")), 1)[0]
    assert got == [("dog/c.png", 12, b"dog/c.png"), ("cat/1.jpg", 3, b"cat/1.jpg"), ("dog/b.jpg", 0, b"dog/b.jpg")]
    (tree / "sub").mkdir()
    (tree / "sub" / "list.txt").write_text("../dog/c.png 12\n../cat/1.jpg\t3\r\n")
    assert [(s[0], s[1]) for s in run(make(file_list=str(tree / "sub" / "list.txt"), batch_size=2), 1, 2)[0]] \
        == [("../dog/c.png", 12), ("../cat/1.jpg", 3)]
    (tmp_path / "cute kitten.jpg").write_bytes(b"k")
    (tmp_path / "other.txt").write_text("cute kitten.jpg 7\n")
    op = make(file_list=str(tmp_path / "other.txt"), file_root=str(tmp_path))
    assert run(op, 1)[0][0] == ("cute kitten.jpg", 7, b"k")


def test_file_list_without_folder_is_relative_to_cwd(tree, monkeypatch):
    monkeypatch.chdir(tree)
    (tree / "l.txt").write_text("cat/2.jpg 5\n")
    assert run(make(file_list="l.txt", batch_size=1), 1, 1)[0][0] == ("cat/2.jpg", 5, b"cat/2.jpg")


def test_files_and_labels(tree):
    files = ["dog/b.jpg", str(tree / "cat" / "1.jpg")]  # an absolute path ignores file_root
    got = run(make(file_root=str(tree), files=files, batch_size=4), 1, 4)[0]
    assert [(s[0], s[1]) for s in got] == [(files[0], 0), (files[1], 1), (files[0], 0), (files[1], 1)]
    got = run(make(file_root=str(tree), files=files, labels=[7, 9], batch_size=2), 1, 2)[0]
    assert [(s[1], s[2]) for s in got] == [(7, b"dog/b.jpg"), (9, b"cat/1.jpg")]


def test_lazy_init_lists_at_first_run(tree):
    op = make(file_root=str(tree), lazy_init=True)
    (tree / "cat" / "0.jpg").write_bytes(b"new")  # listed: the listing waits for the first run
    assert flat(run(op, 1))[0] == "cat/0.jpg"


def test_registered_names_and_empty_file(tmp_path):
    assert set(schema.get("readers.file").class_names) == {"readers.File", "FileReader"}
    (tmp_path / "empty.jpg").write_bytes(b"")
    assert run(make(files=[str(tmp_path / "empty.jpg")], batch_size=1), 1, 1)[0][0][2] == b""


def test_reads_in_the_thread_pool(flat_files):
    import concurrent.futures
    p = flat_files(9)
    op = make(files=p, batch_size=8, dont_use_mmap=True)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        data, labels = op.run([], Args(op, {}), RunContext(iteration=0, batch_size=8, thread_pool=pool))
    assert [bytes(t.numpy()) for t in data.as_torch_list()] == [f"sample {i}".encode() for i in range(8)]
    assert data.source_info == p[:8] and labels.as_torch().flatten().tolist() == list(range(8))


# --- sharding, padding, epochs ---

@pytest.mark.parametrize("size,num_shards", [(10, 3), (7, 4), (9, 3), (5, 5), (11, 2), (100, 7)])
def test_shard_boundaries(flat_files, size, num_shards):
    paths = flat_files(size)
    seen = []
    for shard in range(num_shards):
        lo, hi = size * shard // num_shards, size * (shard + 1) // num_shards
        op = make(files=paths, shard_id=shard, num_shards=num_shards, stick_to_shard=True, batch_size=1)
        assert flat(run(op, 2 * (hi - lo), 1)) == paths[lo:hi] * 2
        seen += paths[lo:hi]
    assert seen == paths  # disjoint and complete


def test_meta_padded(flat_files):
    meta = make(files=flat_files(10), num_shards=4, shard_id=3, pad_last_batch=True).meta()
    assert meta == {"epoch_size": 10, "epoch_size_padded": 12, "number_of_shards": 4, "shard_id": 3,
                    "pad_last_batch": 1, "stick_to_shard": 0}
    assert make(files=flat_files(10), shuffle_after_epoch=True).meta()["stick_to_shard"] == 1


def test_wrap_around_without_padding(flat_files):
    p = flat_files(5)
    assert names(run(make(files=p, batch_size=3), 4)) == [p[0:3], p[3:5] + p[0:1], p[1:4], [p[4]] + p[0:2]]


def test_pad_last_batch(flat_files):
    p = flat_files(10)
    # shard 0 of 3 has 3 samples, the largest 4: pad to 4 then to the batch end (6 per epoch).
    got = names(run(make(files=p, num_shards=3, shard_id=0, pad_last_batch=True, stick_to_shard=True,
                         batch_size=2), 6, 2))
    assert got == [p[0:2], [p[2], p[2]]] * 3  # 3 real samples, padded to the largest shard (4)
    got = names(run(make(files=p, num_shards=3, shard_id=0, pad_last_batch=True, stick_to_shard=True,
                         batch_size=3), 4, 3))
    assert got == [p[0:3], [p[2]] * 3] * 2  # padded to 4, then to the end of the batch


def test_stick_to_shard_false_rotates(flat_files):
    p = flat_files(10)
    got = flat(run(make(files=p, num_shards=3, shard_id=1, batch_size=1), 10, 1))
    assert got == p[3:6] + p[6:10] + p[0:3]  # shards 1, 2, 0 in turn
    got = names(run(make(files=p, num_shards=3, shard_id=1, pad_last_batch=True, batch_size=2), 6, 2))
    assert got == [p[3:5], [p[5], p[5]], p[6:8], p[8:10], p[0:2], [p[2], p[2]]]


# --- shuffling ---

def test_random_shuffle_is_deterministic_and_covers_each_epoch(flat_files):
    p = flat_files(20)
    a = names(run(make(files=p, random_shuffle=True, initial_fill=8, seed=7, batch_size=5), 12, 5))
    b = names(run(make(files=p, random_shuffle=True, initial_fill=8, seed=7, batch_size=5), 12, 5))
    c = names(run(make(files=p, random_shuffle=True, initial_fill=8, seed=8, batch_size=5), 12, 5))
    assert a == b and a != c
    order = [x for batch in a for x in batch]
    assert order[:20] != p
    for epoch in range(3):  # the buffer picks only among the current epoch's samples
        assert sorted(order[20 * epoch:20 * (epoch + 1)]) == p
    # The whole list is shuffled once, equally on every shard: shards stay disjoint.
    shards = [set(flat(run(make(files=p, random_shuffle=True, num_shards=4, shard_id=s, stick_to_shard=True,
                                seed=s, batch_size=5), 1, 5))) for s in range(4)]
    assert set().union(*shards) == set(p) and sum(map(len, shards)) == 20


def test_shuffle_after_epoch(flat_files):
    p = flat_files(12)
    got = flat(run(make(files=p, shuffle_after_epoch=True, batch_size=4), 9, 4))
    epochs = [got[i:i + 12] for i in (0, 12, 24)]
    assert all(sorted(e) == p for e in epochs) and len({tuple(e) for e in epochs}) == 3
    # Every shard sees the same permutation of the epoch: together they cover it.
    parts = [flat(run(make(files=p, shuffle_after_epoch=True, num_shards=3, shard_id=s, batch_size=4), 1, 4))
             for s in range(3)]
    assert sorted(sum(parts, [])) == p
    seeded = flat(run(make(files=p, shuffle_after_epoch=True, shuffle_after_epoch_seed=5, batch_size=4), 3, 4))
    assert seeded != epochs[0]


# --- checkpoints ---

@pytest.mark.parametrize("kwargs", [
    dict(random_shuffle=True, initial_fill=7),
    dict(num_shards=3, shard_id=2, pad_last_batch=True),
    dict(shuffle_after_epoch=True, num_shards=2, shard_id=1),
    dict(num_shards=3, shard_id=1, stick_to_shard=True, random_shuffle=True, initial_fill=50),
])
def test_state_dict_resume(flat_files, kwargs):
    p = flat_files(13)
    op = make(files=p, batch_size=4, **kwargs)
    run(op, 5, 4)
    state = json.loads(json.dumps(op.state_dict()))
    expected = run(op, 9, 4)
    fresh = make(files=p, batch_size=4, **kwargs)
    fresh.load_state_dict(state)
    assert run(fresh, 9, 4) == expected


def test_state_dict_before_first_run_with_lazy_init(flat_files):
    p = flat_files(5)
    op = make(files=p, lazy_init=True, random_shuffle=True)
    state = json.loads(json.dumps(op.state_dict()))
    expected = run(op, 3)
    fresh = make(files=p, lazy_init=True, random_shuffle=True)
    fresh.load_state_dict(state)
    assert run(fresh, 3) == expected


# --- errors ---

@pytest.mark.parametrize("kwargs,message", [
    (dict(), "file_root, file_list or files"),
    (dict(files=["a"], file_list="l.txt"), "not both"),
    (dict(file_root="/x", labels=[1]), "labels are valid only with files"),
    (dict(files=["a", "b"], labels=[1]), "got 1 labels for 2 files"),
    (dict(files=[]), "empty"),
    (dict(files=["a"], shard_id=2, num_shards=2), "shard_id = 2"),
    (dict(files=["a", "b"], num_shards=3), "num_shards = 3 is larger"),
    (dict(files=["a"], shuffle_after_epoch=True, random_shuffle=True), "cannot both"),
    (dict(files=["a"], shuffle_after_epoch=True, stick_to_shard=True), "cannot both"),
    (dict(files=["a"], random_shuffle=True, initial_fill=0), "initial_fill"),
    (dict(files=["a"], shard_id=-1), "shard_id"),
    (dict(file_root="/x", file_filters=[]), "cannot be empty"),
])
def test_argument_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(**kwargs)


def test_missing_paths_are_named(tmp_path):
    with pytest.raises(ValueError, match=f"readers.file.*{tmp_path}/nope"):
        make(file_root=str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="readers.file.*missing.txt"):
        make(file_list=str(tmp_path / "missing.txt"))
    (tmp_path / "c").mkdir()
    with pytest.raises(ValueError, match="no files found"):
        make(file_root=str(tmp_path))
    op = make(files=[str(tmp_path / "gone.jpg")], batch_size=1)
    with pytest.raises(RuntimeError, match="readers.file.*gone.jpg"):
        run(op, 1, 1)


@pytest.mark.parametrize("line", ["b.jpg -1", "b.jpg", "7", "b.jpg3", "b.jpg 5x"])
def test_malformed_file_list_names_file_and_line(tmp_path, line):
    (tmp_path / "list.txt").write_text(f"a.jpg 1\n\n{line}\n")
    with pytest.raises(RuntimeError, match=r"list.txt' line 3"):
        make(file_list=str(tmp_path / "list.txt"))


# --- NVIDIA DALI as the oracle (optional) ---

dali = optional_dali()


def dali_run(kwargs, batch_size, iterations):
    @dali.pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, prefetch_queue_depth=1)
    def pipe():
        data, label = dali.fn.readers.file(name="R", **kwargs)
        return data, label

    p = pipe()
    p.build()
    out = []
    for _ in range(iterations):
        data, label = p.run()
        out.append([(data[j].source_info(), int(label.at(j)[0]), bytes(data.at(j))) for j in range(len(data))])
    return out, p.reader_meta("R")


@pytest.mark.skipif(dali is None, reason=NO_DALI)
class TestAgainstDALI:
    def test_file_root_and_file_list(self, tree):
        (tree / "list.txt").write_text("dog/c.png 12\n\ncat/1.jpg\t3\r\nzebra/z.webp 0   \n")
        for kwargs in (dict(file_root=str(tree)), dict(file_root=str(tree), case_sensitive_filter=True),
                       dict(file_root=str(tree), dir_filters=["?og", "c*"]),
                       dict(file_list=str(tree / "list.txt")),
                       dict(file_root=str(tree), files=["dog/b.jpg", "cat/1.jpg"], labels=[4, 2])):
            expected, meta = dali_run(kwargs, 3, 5)
            op = make(**kwargs)
            assert run(op, 5) == expected, kwargs
            assert op.meta() == meta

    @pytest.mark.parametrize("size,num_shards", [(10, 3), (7, 4), (9, 3), (5, 1), (11, 2)])
    @pytest.mark.parametrize("pad_last_batch", [False, True])
    @pytest.mark.parametrize("stick_to_shard", [False, True])
    @pytest.mark.parametrize("batch_size", [3, 4])
    def test_sharded_order_over_epochs(self, flat_files, size, num_shards, pad_last_batch, stick_to_shard,
                                       batch_size):
        paths = flat_files(size)
        iterations = 3 * (size + batch_size) // batch_size + 2  # several epochs
        for shard_id in sorted({0, num_shards // 2, num_shards - 1}):
            kwargs = dict(files=paths, num_shards=num_shards, shard_id=shard_id, pad_last_batch=pad_last_batch,
                          stick_to_shard=stick_to_shard)
            expected, meta = dali_run(kwargs, batch_size, iterations)
            op = make(batch_size=batch_size, **kwargs)
            assert run(op, iterations, batch_size) == expected, kwargs
            assert op.meta() == meta

    @pytest.mark.parametrize("kwargs", [dict(), dict(num_shards=3, shard_id=1),
                                        dict(num_shards=3, shard_id=2, stick_to_shard=True),
                                        dict(num_shards=4, shard_id=3, pad_last_batch=True)])
    def test_large_batches_read_at_once(self, flat_files, kwargs):
        """Batches inside an epoch take the reader's array path; the order stays DALI's."""
        kwargs = dict(files=flat_files(200), **kwargs)
        expected, _ = dali_run(kwargs, 16, 40)
        assert run(make(batch_size=16, **kwargs), 40, 16) == expected

    def test_shuffle_epoch_multisets(self, flat_files):
        """DALI's shuffle buffer, like ours, returns each epoch's shard exactly once (the
        random numbers, and so the files of each shard, differ)."""
        paths = flat_files(12)
        kwargs = dict(files=paths, random_shuffle=True, initial_fill=5, num_shards=2, shard_id=1,
                      stick_to_shard=True, seed=3)
        for batches in (dali_run(kwargs, 3, 8)[0], run(make(batch_size=3, **kwargs), 8, 3)):
            epochs = [collections.Counter(flat(batches)[6 * e:6 * (e + 1)]) for e in range(4)]
            assert all(e == epochs[0] for e in epochs) and set(epochs[0].values()) == {1}


def test_the_shuffle_buffer_over_a_batch_equals_its_steps():
    """take_from_buffer (a batch at once) against the buffer's steps one by one."""
    rng = np.random.default_rng(0)
    for size, n in [(1, 5), (2, 9), (7, 3), (50, 64), (1024, 256)]:
        buffer = rng.permutation(10_000)[:size]
        picks, incoming = rng.integers(size, size=n), np.arange(20_000, 20_000 + n)
        front, expected = buffer.tolist(), []
        for k, i in enumerate(picks.tolist()):
            front[i], front[-1] = front[-1], front[i]
            expected.append(front.pop())
            front.append(int(incoming[k]))
        taken, after = take_from_buffer(buffer, picks, incoming)
        assert taken.tolist() == expected and after.tolist() == front


@pytest.mark.parametrize("kwargs", [dict(), dict(num_shards=2, shard_id=1, stick_to_shard=True)])
def test_a_buffer_larger_than_the_data_returns_each_epoch_once(flat_files, kwargs):
    """The shuffle buffer holds several epochs (initial_fill > files): batches drain the
    older epoch's segment at once, and each epoch still returns its files exactly once."""
    p = flat_files(50)
    op = make(files=p, random_shuffle=True, initial_fill=1024, batch_size=16, **kwargs)
    got = flat(run(op, 20, 16))
    size = op.meta()["epoch_size"] if not kwargs else 25
    epochs = [got[k:k + size] for k in range(0, len(got) - size + 1, size)]
    assert len(epochs) >= 6 and all(len(set(e)) == size for e in epochs)
    assert len({tuple(e) for e in epochs}) == len(epochs)  # a new order every epoch


def test_a_file_name_that_is_not_utf8_is_read_and_named_by_its_bytes(tmp_path):
    """As DALI reads them: the name os.listdir gives with surrogate escapes is read, and the
    sample's source info is the name's own bytes."""
    import os

    from torchdali import fn, pipeline_def

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / os.fsdecode(b"caf\xe9.jpg")).write_bytes(b"latin-1 named")

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        jpegs, _ = fn.readers.file(file_root=str(tmp_path))
        return jpegs, jpegs.source_info()

    p = pipe()
    p.build()
    data, info = p.run()
    assert bytes(data.at(0)) == b"latin-1 named" and bytes(info.at(0)) == b"c/caf\xe9.jpg"
