"""readers.numpy: the .npy format (versions, orders, types), DALI's file discovery and
lists, sharding and padding over epochs, regions of interest with the out-of-bounds
policies, what an ROI read costs in bytes, checkpoints and errors; compared with NVIDIA
DALI's reader on the same files where DALI is installed, with np.load where not."""
import collections
import io
import json
import os

import numpy as np
import pytest
import torch

import torchdali
from torchdali import schema, storage
from torchdali.operators import numpy_reader
from torchdali.operators.base import Args, RunContext
from torchdali.operators.file_io import byte_range, copy_window, parse_header

from conftest import as_numpy_batch, make_reader, NO_DALI, optional_dali

dali = optional_dali()
needs_dali = pytest.mark.skipif(dali is None, reason=NO_DALI)

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
          "float64"]


def random_array(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.byteorder == ">":
        return random_array(rng, shape, dtype.newbyteorder("=")).astype(dtype)
    if dtype == bool:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def save(path, array, version=None):
    with open(path, "wb") as f:
        np.lib.format.write_array(f, array, version=version)
    return str(path)


def encoded(array, version=None):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, version=version)
    return buf.getvalue()


def make(batch_size=2, arg_inputs=(), **kwargs):
    return make_reader("readers.numpy", batch_size, arg_inputs=arg_inputs, **kwargs)


def step(op, batch_size=2):
    """(arrays, source infos) of the reader's next batch."""
    out, = op.run([], Args(op, {}), RunContext(iteration=0, batch_size=batch_size, thread_pool=None))
    return as_numpy_batch(out), list(out.source_info)


def read(lib, iterations=1, batch_size=2, arg_inputs=None, device="cpu", **kwargs):
    """Per iteration (arrays, source infos, layout) from `lib`'s readers.numpy, and its reader_meta."""
    @lib.pipeline_def(batch_size=batch_size, num_threads=2, device_id=None if device == "cpu" else 0, seed=5)
    def pipe():
        extra = {name: lib.fn.external_source(source=(lambda v: lambda: v)(values), batch=True)
                 for name, values in (arg_inputs or {}).items()}
        return lib.fn.readers.numpy(name="R", device=device, **kwargs, **extra)

    p = pipe()
    p.build()
    out = []
    for _ in range(iterations):
        batch, = p.run()
        out.append((as_numpy_batch(batch), [batch[i].source_info() for i in range(len(batch))], batch.layout()))
    return out, p.reader_meta("R")


def assert_same(got, expected):
    assert len(got) == len(expected)
    for k, ((arrays, names, layout), (arrays_e, names_e, layout_e)) in enumerate(zip(got, expected)):
        assert names == names_e and layout == layout_e and len(arrays) == len(arrays_e), k
        for i, (a, b) in enumerate(zip(arrays, arrays_e)):
            assert a.dtype == b.dtype and a.shape == b.shape, (k, i, a.dtype, b.dtype, a.shape, b.shape)
            np.testing.assert_array_equal(a, b, err_msg=f"iteration {k} sample {i}")


@pytest.fixture
def arrays(tmp_path):
    """Nine float32 3D arrays of odd, different shapes, C and Fortran order alternating."""
    rng = np.random.default_rng(7)
    paths = []
    for i in range(9):
        a = random_array(rng, (5 + i % 3, 7 + i % 2, 3), "float32")
        paths.append(save(tmp_path / f"a{i}.npy", np.asfortranarray(a) if i % 2 else a))
    return paths


# --- the .npy format ---

@pytest.mark.parametrize("dtype", DTYPES + [">i4", ">f8", ">u2"])
@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("fortran", [False, True])
def test_header_and_whole_array_of_every_type_version_and_order(dtype, version, fortran):
    a = random_array(np.random.default_rng(1), (3, 5, 2), dtype)
    a = np.asfortranarray(a) if fortran else a
    data = np.frombuffer(encoded(a, version), np.uint8)
    h = parse_header(data)
    assert (h.shape, h.fortran, h.dtype) == (a.shape, fortran, a.dtype) and h.offset + h.nbytes == len(data)
    start, length = byte_range(h, (0, 0, 0), a.shape)
    assert (start, length) == (h.offset, a.nbytes)
    out = np.empty(a.shape, a.dtype.newbyteorder("="))
    copy_window(h, data[start:start + length], (0, 0, 0), a.shape, out)
    np.testing.assert_array_equal(out, a)


def test_a_header_written_otherwise_is_parsed_too():
    """Other writers than numpy.save: keys in another order, other spacing, a version 3 (UTF-8) header."""
    body = b"{'shape': (2,3), 'fortran_order': True, 'descr': '<i2'}"
    body += b" " * (-(len(body) + 11) % 64) + b"\n"
    data = b"\x93NUMPY\x03\x00" + len(body).to_bytes(4, "little") + body + np.arange(6, dtype="<i2").tobytes()
    h = parse_header(data)
    assert (h.shape, h.fortran, h.dtype.str, h.offset) == ((2, 3), True, "<i2", 12 + len(body))


@pytest.mark.parametrize("data,message", [
    (b"", "empty"),
    (b"PK\x03\x04 not numpy at all", "not a NumPy .npy file"),
    (b"\x93NUMPY\x04\x00\x10\x00", "version 4.0 is not supported"),
    (encoded(np.zeros(3))[:20], "header is truncated"),
    (encoded(np.zeros(3, "c8")), "'<c8' is not supported"),
    (encoded(np.zeros(3, "U2")), "'<U2' is not supported"),
    (encoded(np.zeros(3, [("a", "i4"), ("b", "f4")])), "structured arrays are not supported"),
    (encoded(np.zeros(3, "M8[s]")), "'<M8[s]' is not supported"),
])
def test_header_errors(data, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_header(np.frombuffer(data, np.uint8))


@pytest.mark.parametrize("fortran", [False, True])
def test_windows_read_the_bytes_from_their_first_to_their_last_element(fortran):
    rng = np.random.default_rng(3)
    a = random_array(rng, (6, 5, 4, 3), "int16")
    a = np.asfortranarray(a) if fortran else a
    data = np.frombuffer(encoded(a), np.uint8)
    h = parse_header(data)
    for _ in range(50):
        lo = rng.integers(0, a.shape)
        hi = lo + 1 + rng.integers(0, np.array(a.shape) - lo)
        start, length = byte_range(h, lo, hi)
        window = a[tuple(slice(x, y) for x, y in zip(lo, hi))]
        flat = np.ravel(a, order="F" if fortran else "C")
        index = np.ravel_multi_index(tuple(np.array([lo, hi - 1]).T), a.shape, order="F" if fortran else "C")
        assert (start - h.offset, length) == (index[0] * 2, (index[1] - index[0] + 1) * 2)
        assert flat[index[0]] == window.flat[0] and flat[index[1]] == window[(-1,) * 4]
        out = np.empty(window.shape, a.dtype)
        copy_window(h, data[start:start + length], lo, hi, out)
        np.testing.assert_array_equal(out, window)


def test_an_roi_on_the_outer_axis_reads_only_its_rows(tmp_path, monkeypatch):
    """The header, then exactly the window's bytes of a C-order array cut along axis 0, straight
    into the output; from the window's first to its last element when cut inside."""
    a = np.arange(40 * 30 * 3, dtype=np.float64).reshape(40, 30, 3)
    path = save(tmp_path / "big.npy", a)
    reads = []
    real_bytes, real_into = storage.read_bytes, numpy_reader.read_into
    monkeypatch.setattr(storage, "read_bytes", lambda p, start=0, length=None: reads.append((start, length)) or
                        real_bytes(p, start, length))
    monkeypatch.setattr(numpy_reader, "read_into", lambda op, p, start, buffer: reads.append(
        (start, memoryview(buffer).nbytes, "into")) or real_into(op, p, start, buffer))
    offset = parse_header(np.frombuffer(real_bytes(path, 0, 256), np.uint8)).offset
    for roi, window, expected in [
            (dict(roi_start=[10], roi_end=[13], roi_axes=[0]), a[10:13],
             (offset + 10 * 30 * 3 * 8, 3 * 30 * 3 * 8, "into")),
            (dict(roi_start=[10, 2], roi_end=[13, 4], roi_axes=[0, 1]), a[10:13, 2:4],
             (offset + (10 * 30 + 2) * 3 * 8, ((12 * 30 + 3) - (10 * 30 + 2) + 1) * 3 * 8)),
            ({}, a, (offset, a.nbytes, "into"))]:
        reads.clear()
        (got,), _ = step(make(files=[path], batch_size=1, **roi), 1)
        np.testing.assert_array_equal(got, window)
        assert reads == [(0, 256), expected]


def test_versions_2_and_3_and_big_endian_files_are_read(tmp_path):
    """DALI 2.4 reads only version 1 little-endian files; these are read as np.load reads them."""
    rng = np.random.default_rng(2)
    arrays = [random_array(rng, (4, 3), "float32") for _ in range(4)]
    paths = [save(tmp_path / "v2.npy", arrays[0], (2, 0)), save(tmp_path / "v3.npy", arrays[1], (3, 0)),
             save(tmp_path / "be.npy", arrays[2].astype(">f4")),
             save(tmp_path / "be_fortran.npy", np.asfortranarray(arrays[3].astype(">f4")))]
    got, names = step(make(files=paths, batch_size=4), 4)
    assert names == paths
    for g, a in zip(got, arrays):
        assert g.dtype == np.float32 and g.flags.c_contiguous
        np.testing.assert_array_equal(g, a)


def test_cache_header_information_reads_each_header_once(arrays, monkeypatch):
    reads = collections.Counter()
    real = storage.read_bytes
    monkeypatch.setattr(storage, "read_bytes", lambda p, start=0, length=None: reads.update([(p, start)]) or
                        real(p, start, length))
    op = make(files=arrays[:4], roi_start=[1], roi_axes=[0], cache_header_information=True)
    first = [step(op)[0] for _ in range(4)]  # two epochs
    assert all(reads[(p, 0)] == 1 for p in arrays[:4])
    for a, b in zip(first[:2], first[2:]):
        np.testing.assert_array_equal(a[0], b[0])


# --- the loader (FileReader's) ---

def test_checkpoint_restores_mid_epoch(arrays):
    kwargs = dict(files=arrays, random_shuffle=True, initial_fill=4, num_shards=2, shard_id=1, roi_start=[1],
                  roi_axes=[2])
    op = make(**kwargs)
    for _ in range(3):
        step(op)
    state = json.loads(json.dumps(op.state_dict()))
    expected = [step(op) for _ in range(6)]
    fresh = make(**kwargs)
    fresh.load_state_dict(state)
    for (got, names), (want, names_e) in zip([step(fresh) for _ in range(6)], expected):
        assert names == names_e and all(np.array_equal(a, b) for a, b in zip(got, want))


def test_lazy_init_lists_at_the_first_run(tmp_path):
    op = make(file_root=str(tmp_path), lazy_init=True)
    save(tmp_path / "late.npy", np.arange(3))
    assert step(op, 1)[1] == ["./late.npy"]


# --- errors ---

@pytest.mark.parametrize("kwargs,message", [
    (dict(), "give file_root, file_list or files"),
    (dict(files=["a.npy"], file_list="l.txt"), "not both"),
    (dict(files=["a.npy"], use_o_direct=True), "use_o_direct needs dont_use_mmap=True"),
    (dict(files=["a.npy"], out_of_bounds_policy="wrap"), "'out_of_bounds_policy' = 'wrap'"),
    (dict(files=["a.npy"], roi_start=[1], rel_roi_start=[0.5]), "'roi_start' and 'rel_roi_start' are mutually"),
    (dict(files=["a.npy"], roi_end=[1], roi_shape=[2]), r"\['roi_end', 'roi_shape'\] are mutually exclusive"),
    (dict(files=["a.npy"], random_shuffle=True, shuffle_after_epoch=True), "cannot both"),
    (dict(file_root="/nonexistent/folder"), "file_root '/nonexistent/folder' is not a directory"),
    (dict(file_list="/nonexistent/list.txt"), "cannot open file_list '/nonexistent/list.txt'"),
])
def test_argument_errors(kwargs, message):
    with pytest.raises(ValueError, match=f"readers.numpy.*{message}"):
        make(**kwargs)


def test_no_files_found_names_the_folder_and_filter(tmp_path):
    save(tmp_path / "a.NPY", np.zeros(2))
    with pytest.raises(ValueError, match=f"no files found in '{tmp_path}' matching '\\*.npy'"):
        make(file_root=str(tmp_path))


@pytest.mark.parametrize("roi", [None, dict(roi_start=[0], roi_axes=[0])])
@pytest.mark.parametrize("content,message", [
    (b"", "it is empty"),
    (b"just text, not an array", "not a NumPy .npy file"),
    (encoded(np.arange(10, dtype=np.int32))[:-8], "truncated"),
    (encoded(np.zeros(2, "c16")), "data type '<c16' is not supported"),
])
def test_bad_files_are_named(tmp_path, roi, content, message):
    (tmp_path / "bad.npy").write_bytes(content)
    good = save(tmp_path / "good.npy", np.arange(10, dtype=np.int32))
    op = make(files=[good, str(tmp_path / "bad.npy")], **(roi or {}))
    with pytest.raises(RuntimeError, match=f"readers.numpy.*bad.npy.*{message}") as info:
        step(op)
    assert info.value.file == str(tmp_path / "bad.npy")


def test_a_missing_file_is_named(tmp_path):
    for roi in ({}, dict(roi_start=[0], roi_axes=[0])):
        with pytest.raises(RuntimeError, match="readers.numpy.*cannot read '.*gone.npy'"):
            step(make(files=[str(tmp_path / "gone.npy")], batch_size=1, **roi), 1)


@pytest.mark.parametrize("second,message", [
    (np.zeros(4, np.float32), "same number of dimensions: '.*a.npy' has 2, '.*b.npy' has 1"),
    (np.zeros((2, 2), np.float64), "same data type: '.*a.npy' has float32, '.*b.npy' has float64"),
])
def test_a_batch_of_mixed_ranks_or_types_names_both_files(tmp_path, second, message):
    paths = [save(tmp_path / "a.npy", np.zeros((2, 2), np.float32)), save(tmp_path / "b.npy", second)]
    with pytest.raises(RuntimeError, match=f"readers.numpy.*{message}"):
        step(make(files=paths))


def test_an_roi_outside_the_array_names_the_file(arrays):
    with pytest.raises(ValueError, match=r"readers.numpy.*sample 1: .*outside the input of shape \[5, 7, 3\].*a0.npy"):
        step(make(files=[arrays[1], arrays[0]], roi_start=[0, 0, 0], roi_shape=[6, 8, 3]))
    with pytest.raises(ValueError, match=r"readers.numpy.*argument 'roi_start' has 2 values for 3 slice axes"):
        step(make(files=arrays[:2], roi_start=[0, 0]))
    with pytest.raises(ValueError, match=r"readers.numpy.*axes \[3\] out of range.*a0.npy"):
        step(make(files=arrays[:2], roi_start=[0], roi_axes=[3]))


# --- NVIDIA DALI as the oracle ---

@pytest.fixture
def tree(tmp_path):
    """file_root with files in the root and in sub-folders: hidden names, spaces, a symlinked
    file and folder, a deeper folder (not listed), names that sort differently as paths and as
    folders."""
    rng = np.random.default_rng(11)
    for name in ["z.npy", "B.npy", ".h.npy", "other.NPY", "in ner.npy", "trailing.npy ", "-x/1.npy", "a/2.npy",
                 "a/10.npy", "a.b/3.npy", ".hid/4.npy", "a/deep/5.npy", "_u/6.npy"]:
        os.makedirs(os.path.dirname(tmp_path / name), exist_ok=True)
        save(tmp_path / name, random_array(rng, (3, 2), "int16"))
    os.symlink(tmp_path / "z.npy", tmp_path / "link.npy")
    os.symlink(tmp_path / "a", tmp_path / "zdir")  # also a listed symlink where the filter takes it
    os.mkdir(tmp_path / "folder.npy")
    return tmp_path


@needs_dali
class TestAgainstDALI:
    def test_discovery_filters_and_lists(self, tree):
        (tree / "list.txt").write_text("a/2.npy\n\n.hid/4.npy\nin ner.npy\ntrailing.npy \nz.npy\n")
        (tree / "a" / "list.txt").write_text("../z.npy\n10.npy\n")
        for kwargs in (dict(file_root=str(tree)), dict(file_root=str(tree), file_filter="*.NPY"),
                       dict(file_root=str(tree), file_filter="[^z]*.npy"),
                       dict(file_list=str(tree / "list.txt")),
                       dict(file_list=str(tree / "a" / "list.txt"), file_root=str(tree / "a")),
                       dict(file_root=str(tree), files=["a/10.npy", "B.npy", str(tree / "z.npy")])):
            expected, meta = read(dali, 7, 2, **kwargs)
            got, meta_got = read(torchdali, 7, 2, **kwargs)
            assert_same(got, expected)
            assert meta_got == meta

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_every_type_in_both_orders(self, tmp_path, dtype):
        rng = np.random.default_rng(5)
        paths = [save(tmp_path / f"{k}.npy", (np.asfortranarray if k % 2 else np.ascontiguousarray)(
            random_array(rng, shape, dtype))) for k, shape in enumerate([(3, 5, 2), (4, 1, 3), (1, 7, 2)])]
        paths.append(save(tmp_path / "scalar.npy", random_array(rng, (), dtype)))
        paths.append(save(tmp_path / "empty.npy", random_array(rng, (0, 3), dtype)))
        for files in (paths[:3], paths[3:4], paths[4:]):
            assert_same(read(torchdali, 1, len(files), files=files)[0], read(dali, 1, len(files), files=files)[0])
        roi = dict(roi_start=[1, 0], roi_end=[3, 1], roi_axes=[0, 2])
        assert_same(read(torchdali, 1, 3, files=paths[:3], out_of_bounds_policy="pad", fill_value=-3.5, **roi)[0],
                    read(dali, 1, 3, files=paths[:3], out_of_bounds_policy="pad", fill_value=-3.5, **roi)[0])

    @pytest.mark.parametrize("num_shards", [1, 3, 7])
    @pytest.mark.parametrize("pad_last_batch", [False, True])
    @pytest.mark.parametrize("stick_to_shard", [False, True])
    def test_shards_and_padding_over_epochs(self, tmp_path, num_shards, pad_last_batch, stick_to_shard):
        rng = np.random.default_rng(num_shards)
        paths = [save(tmp_path / f"s{i:02d}.npy", random_array(rng, (2, 1 + i % 4), "uint16")) for i in range(17)]
        batch_size = 3
        iterations = 2 * 17 // batch_size + 3  # over two epochs
        for shard_id in sorted({0, num_shards // 2, num_shards - 1}):
            kwargs = dict(files=paths, num_shards=num_shards, shard_id=shard_id, pad_last_batch=pad_last_batch,
                          stick_to_shard=stick_to_shard)
            expected, meta = read(dali, iterations, batch_size, **kwargs)
            got, meta_got = read(torchdali, iterations, batch_size, **kwargs)
            assert_same(got, expected)
            assert meta_got == meta

    def test_random_shuffle_returns_each_epoch_once_in_another_order(self, arrays):
        kwargs = dict(files=arrays, random_shuffle=True, initial_fill=4, seed=3)
        for lib in (dali, torchdali):
            got, _ = read(lib, 9, 2, **kwargs)
            names = [n for _, batch, _ in got for n in batch]
            epochs = [names[k:k + 9] for k in (0, 9)]
            assert all(sorted(e) == sorted(arrays) for e in epochs) and epochs[0] != arrays

    @pytest.mark.parametrize("roi", [
        dict(roi_start=[1, 2, 0], roi_end=[4, 5, 2]),
        dict(roi_start=[1], roi_axes=[1]),
        dict(roi_start=[1, 2], roi_shape=[2, 3], roi_axes=[2, 0]),
        dict(roi_end=[2], roi_axes=[-1]),
        dict(rel_roi_start=[0.5, 0.25], rel_roi_end=[0.99, 1.0], roi_axes=[0, 1]),
        dict(rel_roi_start=[0.5 / 7], rel_roi_shape=[3 / 7], roi_axes=[0]),
        dict(rel_roi_start=[0.3, 0.1, 0.0], rel_roi_shape=[0.5, 0.45, 0.7]),
        dict(rel_roi_shape=[0.5], roi_axes=[1]),
        dict(roi_start=[-2, 1, 0], roi_end=[3, 9, 2]),
        dict(roi_start=[4, -1], roi_shape=[5, 3], roi_axes=[0, 2]),
        dict(roi_start=[9, 0, 0], roi_end=[11, 10, 2]),
        dict(rel_roi_start=[-0.5, 0.5], rel_roi_end=[0.5, 1.5], roi_axes=[0, 1]),
    ])
    @pytest.mark.parametrize("policy", ["error", "trim_to_shape", "pad", "Constant"])
    def test_regions_of_interest_and_out_of_bounds_policies(self, arrays, roi, policy):
        kwargs = dict(files=arrays, out_of_bounds_policy=policy, fill_value=-7.6, **roi)
        try:
            expected = read(dali, 3, 3, **kwargs)[0]
        except RuntimeError:
            expected = None
        if expected is None:  # DALI refuses the window: so must we, naming the file
            with pytest.raises(ValueError, match=r"readers.numpy.*outside the input.*file '.*a\d.npy'"):
                read(torchdali, 3, 3, **kwargs)
        else:
            assert_same(read(torchdali, 3, 3, **kwargs)[0], expected)

    @pytest.mark.parametrize("dtype,fill", [("uint8", -7.5), ("uint8", 300.0), ("int8", 2.5), ("int32", float("nan")),
                                            ("int32", 1e10), ("uint64", float("nan")), ("bool", 0.3),
                                            ("bool", float("nan")), ("float16", 70000.7), ("float64", 0.1)])
    def test_fill_values_are_converted_as_dali_does(self, tmp_path, dtype, fill):
        path = save(tmp_path / "x.npy", random_array(np.random.default_rng(0), (3, 2), dtype))
        kwargs = dict(files=[path], roi_start=[-2], roi_end=[4], roi_axes=[0], out_of_bounds_policy="pad",
                      fill_value=fill)
        assert_same(read(torchdali, 1, 1, **kwargs)[0], read(dali, 1, 1, **kwargs)[0])

    def test_per_sample_roi_arguments(self, arrays):
        starts = [np.array([0.5, 0.5], np.float32), np.array([0.2, 0.9], np.float32), np.array([0.0, 0.1], np.float32)]
        ends = [np.array([3], np.int32), np.array([1], np.int32), np.array([5], np.int32)]
        for arg_inputs, kwargs in ((dict(rel_roi_start=starts), dict(roi_axes=[1, 0])),
                                   (dict(roi_end=ends), dict(roi_axes=[0], out_of_bounds_policy="pad"))):
            kwargs.update(files=arrays)
            assert_same(read(torchdali, 3, 3, arg_inputs, **kwargs)[0], read(dali, 3, 3, arg_inputs, **kwargs)[0])


def test_the_registry_has_dalis_arguments_and_names():
    sch = schema.get("readers.numpy")
    assert "NumpyReader" in sch.class_names and "readers.Numpy" in sch.class_names
    assert sch.deprecated_names == ("numpy_reader",) and sch.devices == ("cpu", "gpu")
    if dali is not None:
        import nvidia.dali.backend as dali_backend
        assert set(dali_backend.GetSchema("readers__Numpy").GetArgumentNames()) <= set(sch.args)


def test_the_deprecated_name_reads_the_same(arrays):
    @torchdali.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        with pytest.warns(DeprecationWarning, match="numpy_reader"):
            return torchdali.fn.numpy_reader(files=arrays[:2])

    p = pipe()
    p.build()
    got = as_numpy_batch(p.run()[0])
    np.testing.assert_array_equal(got[1], np.load(arrays[1]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kwargs", [dict(), dict(roi_start=[-1, 2], roi_shape=[4, 3], roi_axes=[0, 1],
                                                 out_of_bounds_policy="pad", fill_value=2.5)])
def test_gpu_output_equals_cpu(arrays, kwargs):
    cpu, _ = read(torchdali, 3, 3, files=arrays, **kwargs)
    gpu, _ = read(torchdali, 3, 3, files=arrays, device="gpu", **kwargs)
    assert_same(gpu, cpu)


def test_urls_are_read_through_storage(tmp_path):
    """file_root, files and file_list as URLs (fsspec's memory:// file system): the same arrays
    as from the local copies, whole and by ROI; the root's own files are named without './'."""
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    url = f"memory://{tmp_path.name}"
    rng = np.random.default_rng(12)
    names = ["b.npy", "a.npy", "sub/c.npy", "sub/deep/d.npy", "skip.txt"]
    for name in names:
        a = random_array(rng, (4, 5), "int32")
        local = tmp_path / name
        local.parent.mkdir(parents=True, exist_ok=True)
        save(local, np.asfortranarray(a) if "c" in name else a)
        memory.pipe(f"/{tmp_path.name}/{name}", local.read_bytes())
    memory.pipe(f"/{tmp_path.name}/list.txt", b"sub/c.npy\nb.npy\n")
    roi = dict(roi_start=[1, 1], roi_end=[3, 6], out_of_bounds_policy="pad", fill_value=5)
    for kwargs, expected in ((dict(file_root=url), ["a.npy", "b.npy", "sub/c.npy"]),
                             (dict(file_list=f"{url}/list.txt"), ["sub/c.npy", "b.npy"]),
                             (dict(files=[f"{url}/b.npy", f"{url}/sub/c.npy"]), None)):
        for extra in ({}, roi):
            arrays, got = step(make(batch_size=len(expected or [1, 2]), **kwargs, **extra), len(expected or [1, 2]))
            assert got == (expected or kwargs["files"])
            local = [str(tmp_path / n.removeprefix(url + "/")) for n in got]
            want, _ = step(make(batch_size=len(local), files=local, **extra), len(local))
            for a, b in zip(arrays, want):
                np.testing.assert_array_equal(a, b)
    with pytest.raises(RuntimeError, match=f"readers.numpy.*cannot read '{url}/gone.npy'"):
        step(make(files=[f"{url}/gone.npy"], batch_size=1, **roi), 1)
