"""io.file.read (paths as byte strings in, file contents out) and decoders.numpy (.npy bytes
in, arrays out): compared with NVIDIA DALI on the same inputs where it is installed, and with
the files and np.load where DALI fails (Fortran order, .npy versions 2 and 3, empty files)."""
import io
import os

import numpy as np
import pytest

import torchdali
from conftest import as_numpy_batch, NO_DALI, optional_dali

dali = optional_dali()
needs_dali = pytest.mark.skipif(dali is None, reason=NO_DALI)


def encoded(array, version=None):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, version=version)
    return np.frombuffer(buf.getvalue(), np.uint8).copy()


def path_bytes(path, dtype=np.uint8):
    return np.frombuffer(os.fsencode(path), dtype).copy()


def run(lib, op, samples, **kwargs):
    """`lib`'s operator `op` (a dotted fn path) over one batch of `samples`: its outputs as
    NumPy arrays and its layout."""
    @lib.pipeline_def(batch_size=len(samples), num_threads=1, device_id=None)
    def pipe():
        x = lib.fn.external_source(source=lambda: samples, batch=True)
        f = lib.fn
        for part in op.split("."):
            f = getattr(f, part)
        return f(x, **kwargs)

    p = pipe()
    p.build()
    out, = p.run()
    return as_numpy_batch(out), out.layout()


def assert_same(got, expected):
    (arrays, layout), (arrays_e, layout_e) = got, expected
    assert layout == layout_e and len(arrays) == len(arrays_e)
    for i, (a, b) in enumerate(zip(arrays, arrays_e)):
        assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, b.dtype, a.shape, b.shape)
        np.testing.assert_array_equal(a, b, err_msg=f"sample {i}")


def random_array(rng, shape, dtype):
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if np.dtype(dtype).kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


# --- io.file.read ---

@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(4)
    paths = []
    for i, size in enumerate([1, 17, 4099, 300]):
        p = tmp_path / f"f{i}.bin"
        p.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        paths.append(str(p))
    return paths


@needs_dali
@pytest.mark.parametrize("kwargs", [dict(), dict(dont_use_mmap=True), dict(use_o_direct=True)])
def test_file_read_equals_dali(files, kwargs):
    samples = [path_bytes(files[0]), path_bytes(files[1]), path_bytes(files[2]),
               np.frombuffer(os.fsencode(files[3]) + b"\0ignored after the NUL", np.uint8).copy()]
    for batch in (samples, [s.view(np.int8) for s in samples]):
        got = run(torchdali, "io.file.read", batch, **kwargs)
        assert_same(got, run(dali, "io.file.read", batch, **kwargs))
        assert [bytes(a) for a in got[0]] == [open(f, "rb").read() for f in files]


def test_file_read_dense_batch_empty_and_non_utf8_names(tmp_path):
    """Files of one size make a dense batch; an empty file reads as 0 bytes (DALI fails to map
    it); a name that is not UTF-8 is read by its bytes."""
    (tmp_path / "a").write_bytes(b"abc")
    (tmp_path / "b").write_bytes(b"xyz")
    (tmp_path / "empty").write_bytes(b"")
    odd = os.fsencode(str(tmp_path)) + b"/caf\xe9"
    with open(odd, "wb") as f:
        f.write(b"latin-1 name")
    arrays, layout = run(torchdali, "io.file.read", [path_bytes(tmp_path / "a"), path_bytes(tmp_path / "b")])
    assert [bytes(a) for a in arrays] == [b"abc", b"xyz"] and layout == ""
    arrays, _ = run(torchdali, "io.file.read", [path_bytes(tmp_path / "empty"), np.frombuffer(odd, np.uint8).copy()])
    assert [bytes(a) for a in arrays] == [b"", b"latin-1 name"] and arrays[0].dtype == np.uint8


@pytest.mark.parametrize("sample,error,message", [
    (lambda d: path_bytes(d / "missing.bin"), RuntimeError, "cannot read '.*missing.bin': No such file"),
    (lambda d: path_bytes(d), RuntimeError, "cannot read"),
    (lambda d: np.zeros(0, np.uint8), ValueError, "sample 0: the file path is empty"),
    (lambda d: path_bytes(d / "x").astype(np.int32), TypeError, "a file path must be uint8 or int8 bytes"),
    (lambda d: path_bytes(d / "x").reshape(1, -1), ValueError,
     "sample 0: a file path must be a 1D byte string, got shape \\(1, "),
])
def test_file_read_errors(tmp_path, sample, error, message):
    with pytest.raises(error, match=f"io.file.read.*{message}"):
        run(torchdali, "io.file.read", [sample(tmp_path)])


# --- decoders.numpy ---

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
          "float64"]


@needs_dali
@pytest.mark.parametrize("dtype", DTYPES)
def test_decoder_equals_dali_for_every_type(dtype):
    rng = np.random.default_rng(6)
    arrays = [random_array(rng, shape, dtype) for shape in [(3, 5), (1, 7), (0, 2), (4, 4)]]
    samples = [encoded(a) for a in arrays]
    got = run(torchdali, "decoders.numpy", samples)
    assert_same(got, run(dali, "decoders.numpy", samples))
    scalars = [encoded(random_array(rng, (), dtype)) for _ in range(2)]
    assert_same(run(torchdali, "decoders.numpy", scalars), run(dali, "decoders.numpy", scalars))


@needs_dali
@pytest.mark.parametrize("dtype", DTYPES)
def test_decoder_casts_as_dali_does(dtype):
    values = np.array([[1.6, -2.5, 300.7, -0.4], [np.nan, 1e10, -1e10, np.inf], [0.5, -0.5, 70000.7, 2.5]])
    samples = [encoded(values.astype(np.float32)), encoded(values.astype(np.float64)),
               encoded(np.nan_to_num(values * 3).clip(-100, 100).astype(np.int16)),
               encoded(np.arange(12, dtype=np.uint64).reshape(3, 4) * 2 ** 60)]
    got = run(torchdali, "decoders.numpy", samples, dtype=getattr(torchdali.types, dtype.upper().replace(
        "FLOAT32", "FLOAT")))
    expected = run(dali, "decoders.numpy", samples, dtype=getattr(dali.types, dtype.upper().replace(
        "FLOAT32", "FLOAT")))
    assert_same(got, expected)


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_decoder_reads_fortran_order_and_every_version(version):
    """DALI 2.4's CPU decoder needs a GPU to transpose Fortran arrays and reads version 1 only."""
    rng = np.random.default_rng(8)
    arrays = [np.asfortranarray(random_array(rng, (3, 4, 2), "int32")), random_array(rng, (2, 5, 1), "int32"),
              np.asfortranarray(random_array(rng, (1, 3, 3), "int32").astype(">i4"))]
    got, layout = run(torchdali, "decoders.numpy", [encoded(a, version) for a in arrays])
    for g, a in zip(got, arrays):
        assert g.dtype == np.int32 and g.flags.c_contiguous
        np.testing.assert_array_equal(g, a)


@pytest.mark.parametrize("samples,kwargs,message", [
    ([encoded(np.zeros((2, 2), np.float32)), encoded(np.zeros(2, np.float32))], {},
     "same number of dimensions: sample 0 has 2, sample 1 has 1"),
    ([encoded(np.zeros(2, np.float32)), encoded(np.zeros(2, np.float64))], {},
     "same data type \\(or give dtype\\): sample 0 is float32, sample 1 is float64"),
    ([encoded(np.zeros(3, np.int32))[:-4]], {}, "sample 0: the header announces 12 bytes of data .*holds 8"),
    ([np.concatenate([encoded(np.zeros(3, np.int32)), np.zeros(1, np.uint8)])], {}, "holds 13"),
    ([np.zeros(0, np.uint8)], {}, "sample 0: it is empty"),
    ([np.frombuffer(b"not an npy file", np.uint8).copy()], {}, "sample 0: not a NumPy .npy file"),
    ([encoded(np.zeros(2, np.complex64))], {}, "'<c8' is not supported"),
])
def test_decoder_errors(samples, kwargs, message):
    with pytest.raises(RuntimeError, match=f"decoders.numpy.*{message}"):
        run(torchdali, "decoders.numpy", samples, **kwargs)


def test_decoder_argument_and_input_errors():
    with pytest.raises(ValueError, match="decoders.numpy: argument 'dtype' = .*STRING.* is not one of"):
        run(torchdali, "decoders.numpy", [encoded(np.zeros(2))], dtype=torchdali.types.STRING)
    with pytest.raises(TypeError, match="decoders.numpy.*sample 0: the .npy data must be uint8 or int8 bytes"):
        run(torchdali, "decoders.numpy", [encoded(np.zeros(2)).astype(np.float32)])


def test_decoder_after_file_read(tmp_path):
    """The pair reads what readers.numpy reads: the files' arrays, with their names as source info."""
    arrays = [np.arange(12, dtype=np.float32).reshape(3, 4), np.ones((3, 4), np.float32)]
    paths = [str(tmp_path / f"{i}.npy") for i in range(2)]
    for p, a in zip(paths, arrays):
        np.save(p, a)

    @torchdali.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        data = torchdali.fn.io.file.read(torchdali.fn.external_source(lambda: [path_bytes(p) for p in paths],
                                                                      batch=True))
        return torchdali.fn.decoders.numpy(data), torchdali.fn.readers.numpy(files=paths)

    p = pipe()
    p.build()
    decoded, read = p.run()
    for d, r, a in zip(as_numpy_batch(decoded), as_numpy_batch(read), arrays):
        np.testing.assert_array_equal(d, a)
        np.testing.assert_array_equal(r, a)


def test_file_read_reads_urls_through_storage(tmp_path, files):
    """Paths may be URLs fsspec reads (here its memory:// file system), mixed with local files."""
    fsspec = pytest.importorskip("fsspec")
    url = f"memory://{tmp_path.name}/remote.bin"
    fsspec.filesystem("memory").pipe(url.split("://", 1)[1], b"remote bytes")
    arrays, _ = run(torchdali, "io.file.read", [path_bytes(url), path_bytes(files[1])])
    assert [bytes(a) for a in arrays] == [b"remote bytes", open(files[1], "rb").read()]
    with pytest.raises(RuntimeError, match=f"io.file.read.*cannot read '{url}x'"):
        run(torchdali, "io.file.read", [path_bytes(url + "x")])
