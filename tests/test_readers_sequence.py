"""readers.sequence: streams of PNG and JPEG frames read as FHWC sequences, with sequence_length,
step and stride, sharded, padded and shuffled over several epochs; each compared with NVIDIA
DALI's reader where it is installed (PNG frames equal exactly, JPEG as decoders.image's tests
compare them); checkpoints, names and errors."""
import collections
import os
import warnings

import numpy as np
import pytest
from PIL import Image

import torchdali
from torchdali import types
from torchdali.operators.base import Args, RunContext

from conftest import jpeg, make_reader, NO_DALI, optional_dali, photo

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # readers.sequence is, in DALI 2.4

dali = optional_dali()
needs_dali = pytest.mark.skipif(dali is None, reason=NO_DALI)


def make_streams(root, lengths, kind="png", seed=0):
    """Streams s0, s1, ... of `lengths` random frames under `root`, of odd sizes (7x11, 9x9,
    11x7); their names mix widths ('00', '003', '06', ...), so that their byte order is not
    the order they were made in."""
    rng = np.random.default_rng(seed)
    for k, n in enumerate(lengths):
        h, w = 7 + 2 * k, 11 - 2 * k
        (root / f"s{k}").mkdir(parents=True)
        for i in range(n):
            name = root / f"s{k}" / f"{3 * i:0{2 + i % 2}d}.{kind}"
            if kind == "png":
                Image.fromarray(rng.integers(0, 256, (h, w, 3), np.uint8)).save(name)
            else:
                name.write_bytes(bytes(jpeg(photo(h, w, 100 * k + i), quality=90).numpy()))
    return str(root)


def read(lib, batch_size, iterations, **kwargs):
    """The batches (lists of NumPy sequences) of `lib`'s readers.sequence (torchdali's or
    DALI's) through a pipeline, and its reader meta."""
    @lib.pipeline_def(batch_size=batch_size, num_threads=2 if lib is torchdali else 1, device_id=None,
                      prefetch_queue_depth=1)
    def pipe():
        return lib.fn.readers.sequence(name="R", **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        p = pipe()
        p.build()
    out = []
    for _ in range(iterations):
        (seqs,) = p.run()
        assert seqs.layout() == "FHWC"
        out.append([np.array(seqs.at(j)) for j in range(len(seqs))])
    return out, p.reader_meta("R")


def ours(batch_size, iterations, **kwargs):
    return read(torchdali, batch_size, iterations, **kwargs)


def theirs(batch_size, iterations, **kwargs):
    return read(dali, batch_size, iterations, **kwargs)


def assert_same(a, b, tolerance=0):
    assert len(a) == len(b)
    for batch_a, batch_b in zip(a, b):
        assert [s.shape for s in batch_a] == [s.shape for s in batch_b]
        for x, y in zip(batch_a, batch_b):
            assert x.dtype == y.dtype == np.uint8
            assert np.abs(x.astype(int) - y).max(initial=0) <= tolerance


def run_op(op, iterations, batch_size):
    """The reader's batches run directly (no pipeline), as lists of NumPy sequences."""
    out = []
    for i in range(iterations):
        (seqs,) = op.run([], Args(op, {}), RunContext(iteration=i, batch_size=batch_size, thread_pool=None))
        out.append([np.array(s) for s in seqs.as_torch_list()])
    return out


def frame_names(root):
    """Decoded frame bytes -> 'stream/file', to name the frames of a sequence."""
    names = {}
    for sub in sorted(os.listdir(root)):
        for f in sorted(os.listdir(os.path.join(root, sub))):
            names[np.asarray(Image.open(os.path.join(root, sub, f)).convert("RGB")).tobytes()] = f"{sub}/{f}"
    return names


# --- against DALI ---

GEOMETRY = [(1, 1, 1), (3, 1, 1), (2, 3, 1), (3, 2, 2), (4, 1, 2)]  # (sequence_length, step, stride)
SHARDS = [dict(), dict(num_shards=2, shard_id=1, pad_last_batch=True),
          dict(num_shards=3, shard_id=2, stick_to_shard=True),
          dict(num_shards=3, shard_id=0, pad_last_batch=True, stick_to_shard=True)]


@needs_dali
@pytest.mark.parametrize("sequence_length,step,stride", GEOMETRY)
@pytest.mark.parametrize("shards", SHARDS, ids=["1", "2pad", "3stick", "3pad_stick"])
def test_png_sequences_equal_dali_over_epochs(tmp_path, sequence_length, step, stride, shards):
    """Streams of 7, 2 and 10 frames (the short one gives no sequence of 3 or more frames)."""
    root = make_streams(tmp_path, [7, 2, 10])
    kwargs = dict(file_root=root, sequence_length=sequence_length, step=step, stride=stride, **shards)
    expected, meta = theirs(3, 14, **kwargs)
    got, our_meta = ours(3, 14, **kwargs)
    assert our_meta == meta
    assert_same(got, expected)
    assert 14 * 3 > 2 * meta["epoch_size_padded"] / meta["number_of_shards"]  # two epochs of the shard or more


def listed(root, sub):
    """The frames of stream `sub` in byte order of their names, as 'sub/name'."""
    return [f"{sub}/{f}" for f in sorted(os.listdir(os.path.join(root, sub)), key=os.fsencode)]


@needs_dali
def test_the_order_is_dali_s(tmp_path):
    """Frames in byte order of their names, streams by full path ('s0.1' before 's0', as DALI's
    sort of whole paths puts them): the names of each sequence's frames, listed."""
    root = make_streams(tmp_path, [5, 4])
    os.rename(tmp_path / "s1", tmp_path / "s0.1")
    names = frame_names(root)
    a, b = listed(root, "s0.1"), listed(root, "s0")
    assert a[:2] == ["s0.1/00.png", "s0.1/003.png"] and b[2] == "s0/009.png"  # not the creation order
    kwargs = dict(file_root=root, sequence_length=2, step=2, stride=1)
    for run in (theirs(4, 1, **kwargs)[0], ours(4, 1, **kwargs)[0]):
        assert [tuple(names[f.tobytes()] for f in seq) for seq in run[0]] == [
            (a[0], a[1]), (a[2], a[3]), (b[0], b[1]), (b[2], b[3])]


@needs_dali
def test_listing_equals_dali(tmp_path):
    """Upper-case extensions are frames; hidden files, other extensions, hidden and empty
    folders and files in file_root itself are not."""
    root = make_streams(tmp_path, [3, 2])
    os.rename(tmp_path / "s1" / "003.png", tmp_path / "s1" / "003.PNG")
    (tmp_path / "s1" / ".hidden.png").write_bytes((tmp_path / "s0" / "00.png").read_bytes())
    (tmp_path / "s1" / "notes.txt").write_text("not a frame")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "0.png").write_bytes((tmp_path / "s0" / "00.png").read_bytes())
    (tmp_path / "empty").mkdir()
    (tmp_path / "top.png").write_bytes((tmp_path / "s0" / "00.png").read_bytes())
    kwargs = dict(file_root=root, sequence_length=1)
    expected, meta = theirs(2, 4, **kwargs)
    got, our_meta = ours(2, 4, **kwargs)
    assert our_meta == meta and meta["epoch_size"] == 5
    assert_same(got, expected)


@needs_dali
@pytest.mark.usefixtures("cpu_jpeg_decoder")
@pytest.mark.parametrize("image_type", [types.RGB, types.BGR, types.GRAY, types.ANY_DATA],
                         ids=lambda t: t.name)
def test_jpeg_sequences_against_dali(tmp_path, image_type):
    """As decoders.image's comparison: RGB and BGR exactly (the same libjpeg-turbo), gray
    within 1 (luma rounding)."""
    root = make_streams(tmp_path, [5, 3, 4], kind="jpg")
    kwargs = dict(file_root=root, sequence_length=2, step=1, stride=2, image_type=image_type,
                  num_shards=2, shard_id=0, pad_last_batch=True)
    expected, meta = theirs(3, 5, **kwargs)
    got, our_meta = ours(3, 5, **kwargs)
    assert our_meta == meta
    assert_same(got, expected, tolerance=1 if image_type == types.GRAY else 0)
    assert got[0][0].shape[-1] == (1 if image_type == types.GRAY else 3)


@needs_dali
@pytest.mark.parametrize("image_type", [types.RGB, types.BGR, types.GRAY, types.ANY_DATA],
                         ids=lambda t: t.name)
def test_gray_and_rgba_png_frames_against_dali(tmp_path, image_type):
    """Channels as image_type asks: ANY_DATA keeps a gray stream's one channel and an RGBA
    stream's four; the others convert (gray within 1, as decoders.image)."""
    rng = np.random.default_rng(5)
    for sub, shape in (("gray", (9, 5)), ("rgba", (6, 7, 4))):
        (tmp_path / sub).mkdir()
        for i in range(3):
            Image.fromarray(rng.integers(0, 256, shape, np.uint8)).save(tmp_path / sub / f"{i}.png")
    kwargs = dict(file_root=str(tmp_path), sequence_length=2, image_type=image_type)
    expected, _ = theirs(2, 2, **kwargs)
    got, _ = ours(2, 2, **kwargs)
    assert_same(got, expected, tolerance=1 if image_type == types.GRAY else 0)
    if image_type == types.ANY_DATA:
        assert [s.shape[-1] for s in got[0]] == [1, 1] and got[1][0].shape[-1] == 4


@needs_dali
def test_shuffled_epochs_hold_each_sequence_once_as_in_dali(tmp_path):
    """DALI's shuffle and ours draw different random numbers; both return every sequence of
    the shard exactly once per epoch."""
    root = make_streams(tmp_path, [6, 5, 7])
    names = frame_names(root)
    kwargs = dict(file_root=root, sequence_length=2, step=1, stride=2, random_shuffle=True, initial_fill=4,
                  num_shards=2, shard_id=1, stick_to_shard=True, seed=7)
    size = 6  # the 12 sequences' shard 1
    for run in (theirs(3, 8, **kwargs)[0], ours(3, 8, **kwargs)[0]):
        flat = [tuple(names[f.tobytes()] for f in seq) for batch in run for seq in batch]
        epochs = [collections.Counter(flat[k:k + size]) for k in range(0, len(flat), size)]
        assert len(epochs) == 4 and all(e == epochs[0] for e in epochs) and set(epochs[0].values()) == {1}


# --- without DALI ---

def test_sequences_hold_the_frames_step_and_stride_pick(tmp_path):
    root = make_streams(tmp_path, [9])
    names = frame_names(root)
    op = make_reader("readers.sequence", 2, file_root=root, sequence_length=3, step=4, stride=2)
    got = run_op(op, 1, 2)[0]
    frames = listed(root, "s0")
    assert [[names[f.tobytes()] for f in seq] for seq in got] == [frames[0:6:2], frames[4:9:2]]
    assert op.meta()["epoch_size"] == 2  # a third sequence from frame 8 would need frames up to 12
    assert op.statistics()["decoder_backend"].endswith(": 6")  # the frames, decoded by decoders.image's decoder


@pytest.mark.parametrize("kwargs", [dict(), dict(random_shuffle=True, initial_fill=3),
                                    dict(num_shards=2, shard_id=1, pad_last_batch=True)])
def test_state_dict_resumes_the_sequence_order(tmp_path, kwargs):
    root = make_streams(tmp_path, [6, 5])
    op = make_reader("readers.sequence", 2, file_root=root, sequence_length=2, **kwargs)
    run_op(op, 3, 2)
    state = op.state_dict()
    after = run_op(op, 5, 2)
    resumed = make_reader("readers.sequence", 2, file_root=root, sequence_length=2, **kwargs)
    resumed.load_state_dict(state)
    assert_same(run_op(resumed, 5, 2), after)


def test_lazy_init_lists_at_the_first_run(tmp_path):
    op = make_reader("readers.sequence", 1, file_root=str(tmp_path), sequence_length=2, lazy_init=True)
    make_streams(tmp_path, [3])
    assert run_op(op, 1, 1)[0][0].shape == (2, 7, 11, 3)


def test_names_of_the_operator():
    assert callable(torchdali.ops.readers.Sequence) and callable(torchdali.ops.SequenceReader)
    for path in ("readers.sequence", "sequence_reader"):
        fn = torchdali.fn.readers.sequence if path == "readers.sequence" else torchdali.fn.sequence_reader
        with pytest.warns(DeprecationWarning, match=rf"`torchdali.fn.{path}` is now deprecated"):
            with pytest.raises(TypeError, match="file_root"):
                fn()


def test_frames_of_one_sequence_must_share_a_shape(tmp_path):
    root = make_streams(tmp_path, [3])
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "s0" / "06.png")  # the third frame
    op = make_reader("readers.sequence", 1, file_root=root, sequence_length=3)
    with pytest.raises(RuntimeError, match=r"one shape: '.*s0/06.png' is \(4, 4, 3\), '.*s0/00.png' \(7, 11, 3\)"):
        run_op(op, 1, 1)


@pytest.mark.parametrize("kind", ["png", "jpg"])
def test_an_undecodable_frame_is_named(tmp_path, kind):
    root = make_streams(tmp_path, [4], kind=kind)
    (tmp_path / "s0" / f"009.{kind}").write_bytes(b"not an image at all")  # the third frame
    op = make_reader("readers.sequence", 2, file_root=root, sequence_length=2, step=2)
    with pytest.raises(RuntimeError, match=rf"cannot decode frame 0 of sample 1, '.*s0/009.{kind}'") as e:
        run_op(op, 1, 2)
    assert e.value.file.endswith(f"s0/009.{kind}") and e.value.sample == 1


@needs_dali
def test_dali_fails_alike(tmp_path):
    """DALI too refuses an empty file_root, streams all shorter than a sequence, and frames it
    cannot decode (its messages differ)."""
    def fails(**kwargs):
        with pytest.raises(RuntimeError):
            theirs(1, 1, **kwargs)
    fails(file_root=str(tmp_path), sequence_length=1)
    root = make_streams(tmp_path, [2, 3])
    fails(file_root=root, sequence_length=4)
    (tmp_path / "s0" / "003.png").write_bytes(b"not an image at all")
    fails(file_root=root, sequence_length=2)


@pytest.mark.parametrize("kwargs,message", [
    (dict(sequence_length=4), r"no stream of file_root '.*' is long enough for a sequence of 4 frames 1 apart "
                              r"\(4 frames\): the longest has 3"),
    (dict(sequence_length=2, stride=2), r"sequence of 2 frames 2 apart \(3 frames\)"),
    (dict(sequence_length=1, num_shards=6), r"num_shards = 6 is larger than the number of sequences \(5\)"),
])
def test_dataset_errors(tmp_path, kwargs, message):
    root = make_streams(tmp_path, [2, 3])
    if "stride" in kwargs:
        (tmp_path / "s1" / "06.png").unlink()  # the longest stream: 2 frames
    with pytest.raises(ValueError, match=message):
        make_reader("readers.sequence", 1, file_root=root, **kwargs)


def test_empty_and_missing_roots(tmp_path):
    with pytest.raises(ValueError, match=r"no image files found in the sub-folders of file_root"):
        make_reader("readers.sequence", 1, file_root=str(tmp_path), sequence_length=1)
    (tmp_path / "s0").mkdir()
    (tmp_path / "s0" / "a.txt").write_text("x")
    with pytest.raises(ValueError, match=r"no image files found"):
        make_reader("readers.sequence", 1, file_root=str(tmp_path), sequence_length=1)
    with pytest.raises(ValueError, match=r"file_root '.*nope' is not a directory"):
        make_reader("readers.sequence", 1, file_root=str(tmp_path / "nope"), sequence_length=1)


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(sequence_length=0), ValueError, r"'sequence_length' = 0: must be at least 1"),
    (dict(sequence_length=2, step=0), ValueError, r"'step' = 0: must be at least 1"),
    (dict(sequence_length=2, stride=-1), ValueError, r"'stride' = -1: must be at least 1"),
    (dict(sequence_length=2, image_type=types.YCbCr), ValueError, r"'image_type' = .*YCbCr.* is not one of"),
    (dict(), TypeError, r"argument 'sequence_length' is required"),
    (dict(sequence_length=2, shuffle_after_epoch=True), TypeError, r"unknown argument 'shuffle_after_epoch'"),
])
def test_argument_errors(tmp_path, kwargs, error, message):
    with pytest.raises(error, match=message):
        make_reader("readers.sequence", 1, file_root=str(tmp_path), **kwargs)


def test_a_url_root_is_listed_and_read_through_storage(tmp_path):
    """file_root as a URL (fsspec's memory:// file system): the same sequences as from the
    local copy; hidden names and the root's own files are left out there too."""
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    root = make_streams(tmp_path / "local", [4, 3], kind="jpg")
    url = f"memory://{tmp_path.name}"
    for sub in ("s0", "s1"):
        for name in os.listdir(os.path.join(root, sub)):
            memory.pipe(f"/{tmp_path.name}/{sub}/{name}", (tmp_path / "local" / sub / name).read_bytes())
    memory.pipe(f"/{tmp_path.name}/s1/.hidden.jpg", b"not listed")
    memory.pipe(f"/{tmp_path.name}/.hidden/0.jpg", b"not listed")
    memory.pipe(f"/{tmp_path.name}/top.jpg", b"not listed")
    kwargs = dict(sequence_length=2, stride=2, num_shards=2, shard_id=1, pad_last_batch=True)
    remote = make_reader("readers.sequence", 2, file_root=url, **kwargs)
    local = make_reader("readers.sequence", 2, file_root=root, **kwargs)
    assert remote.meta() == local.meta() and local.meta()["epoch_size"] == 3
    assert_same(run_op(remote, 3, 2), run_op(local, 3, 2))


@needs_dali
def test_arguments_and_defaults_are_dalis():
    import nvidia.dali.backend as backend
    from torchdali import schema

    sch = schema.get("readers.sequence")
    assert sch.deprecated_names == ("sequence_reader",) and "SequenceReader" in sch.class_names
    dali_schema = backend.GetSchema("readers__Sequence")
    assert set(dali_schema.GetArgumentNames()) == set(sch.args) - {"device", "name"}
    for name in set(dali_schema.GetArgumentNames()) - {"bytes_per_sample_hint"}:
        arg = sch.args[name]
        assert dali_schema.HasArgumentDefaultValue(name) != arg.required, name
        assert arg.required or dali_schema.GetArgumentDefaultValueString(name) == str(arg.default), name
