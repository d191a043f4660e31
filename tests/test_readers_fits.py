"""experimental.readers.fits: the FITS format (cards, blocks, HDU walking), every BITPIX with
BSCALE/BZERO into cfitsio's equivalent types, hdu_indices, file_root/files/file_list, shards,
padding and shuffling; compared with NVIDIA DALI's reader on the same files (written here by
hand and with astropy), tile-compressed images (RICE_1, GZIP_1/2, quantized floats with
and without dithering), plus the errors, each naming the file."""

import numpy as np
import pytest
import torch

import torchdali
from torchdali.operators.base import Args, RunContext
from torchdali.operators.fits import BLOCK, equivalent_type, parse_cards
from torchdali.operators.fits_tiles import _signed, rice_decode

from conftest import as_numpy_batch, make_reader, NO_DALI, optional_dali


dali = optional_dali()
needs_dali = pytest.mark.skipif(dali is None, reason=NO_DALI)

BITPIX = {"uint8": 8, "int16": 16, "int32": 32, "int64": 64, "float32": -32, "float64": -64}


def card(key, value=None):
    text = key.ljust(8) if value is None else f"{key:<8}= {value:>20}"
    return text.ljust(80).encode()


def header(cards):
    data = b"".join(cards) + card("END")
    return data + b" " * (-len(data) % BLOCK)


def hdu_bytes(array, first, extra=(), xtension="IMAGE"):
    """One HDU: its header (SIMPLE or XTENSION, BITPIX, NAXISn reversed, `extra` cards) and
    its data big-endian, padded with zeros to whole blocks; `array` None for no data."""
    shape = () if array is None else array.shape
    bitpix = 8 if array is None else BITPIX[array.dtype.name]
    cards = [card("SIMPLE", "T") if first else card("XTENSION", f"'{xtension:<8}'"), card("BITPIX", bitpix),
             card("NAXIS", len(shape))] + [card(f"NAXIS{i + 1}", n) for i, n in enumerate(reversed(shape))]
    cards += [card("EXTEND", "T")] if first else [card("PCOUNT", 0), card("GCOUNT", 1)]
    cards += [card(k, v) for k, v in extra]
    data = b"" if array is None else array.astype(array.dtype.newbyteorder(">")).tobytes()
    return header(cards) + data + b"\0" * (-len(data) % BLOCK)


def write(path, arrays, primary=None, extra=()):
    """A FITS file: a primary HDU (`primary`'s data or none) and one image extension per array."""
    with open(path, "wb") as f:
        f.write(hdu_bytes(primary, True) + b"".join(hdu_bytes(a, False, extra) for a in arrays))
    return str(path)


def random_array(rng, shape, dtype):
    if np.dtype(dtype).kind == "f":
        return (rng.standard_normal(shape) * 1000).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def read(lib, iterations=1, batch_size=2, device="cpu", **kwargs):
    """Per iteration, per output, the arrays of `lib`'s reader; and its reader_meta."""
    @lib.pipeline_def(batch_size=batch_size, num_threads=1 if lib is dali else 2,
                      device_id=None if device == "cpu" else 0, seed=5)
    def pipe():
        out = lib.fn.experimental.readers.fits(name="R", device=device, **kwargs)
        return tuple(out) if isinstance(out, list) else out

    p = pipe()
    p.build()
    return [[as_numpy_batch(o) for o in p.run()] for _ in range(iterations)], p.reader_meta("R")


def assert_same(got, expected):
    assert len(got) == len(expected)
    for k, (outs, outs_e) in enumerate(zip(got, expected)):
        assert len(outs) == len(outs_e)
        for j, (arrays, arrays_e) in enumerate(zip(outs, outs_e)):
            assert len(arrays) == len(arrays_e)
            for i, (a, b) in enumerate(zip(arrays, arrays_e)):
                assert a.dtype == b.dtype and a.shape == b.shape, (k, j, i, a.dtype, b.dtype, a.shape, b.shape)
                np.testing.assert_array_equal(a, b, err_msg=f"iteration {k} output {j} sample {i}")


@pytest.fixture
def files(tmp_path):
    """Seven files of three image extensions each (float32 3D, int16 2D, float64 1D) of odd
    shapes varying per file, and an empty primary HDU."""
    rng = np.random.default_rng(7)
    return [write(tmp_path / f"f{i}.fits", [random_array(rng, (2 + i % 3, 5, 3 + i % 2), "float32"),
                                            random_array(rng, (1 + i, 7), "int16"),
                                            random_array(rng, (9 + i,), "float64")]) for i in range(7)]


# --- the format ---

def test_cards_values_and_header_length():
    data = header([card("SIMPLE", "T"), card("BITPIX", -32), card("NAXIS", 0),
                   b"OBJECT  = 'it''s a star'       / name".ljust(80), b"COMMENT no value here".ljust(80),
                   card("BSCALE", "1.5D2")])
    cards, length = parse_cards(data)
    assert length == BLOCK and cards["OBJECT"] == "it's a star" and cards["BITPIX"] == "-32"
    assert cards["COMMENT"] == "" and cards["BSCALE"] == "1.5D2"
    assert parse_cards(data[:80 * 3]) is None  # no END yet


# (BITPIX, BSCALE, BZERO) -> type, as DALI 2.4's cfitsio gives it (each checked against DALI below).
EQUIVALENT = [
    (8, 1, 0, "uint8"), (8, 1, -128, "int8"), (8, 1, 32768, "uint16"), (8, 1, 2147483648, "uint32"),
    (8, 2, 0, "int16"), (8, -1, 0, "int16"), (8, 2.5, 1, "float32"), (8, 1, 0.5, "float32"),
    (8, 1, 4294967296, "float32"), (16, 1, 32768, "uint16"), (16, 1, -128, "int32"), (16, 3, -7, "int32"),
    (16, 1, 2147483648, "uint32"), (16, 1, -2147483648, "float64"), (16, 1, 1e10, "float32"),
    (16, 2.5, 1, "float32"), (32, 1, 2147483648, "uint32"), (32, 1, -128, "float64"), (32, 2, 0, "float64"),
    (32, 1, 0.5, "float64"), (64, 2.5, 1, "int64"), (64, 1, 5, "int64"), (-32, 2, 1, "float32"),
    (-64, 2, 1, "float64")]


@pytest.mark.parametrize("bitpix,bscale,bzero,dtype", EQUIVALENT)
def test_equivalent_types(bitpix, bscale, bzero, dtype):
    assert equivalent_type(bitpix, bscale, bzero) == np.dtype(dtype)


# --- errors ---

@pytest.mark.parametrize("kwargs,message", [
    (dict(), "give file_root, file_list or files"),
    (dict(files=["a.fits"], file_list="l.txt"), "not both"),
    (dict(files=["a.fits"], hdu_indices=[0]), "hdu_indices.*indices from 1"),
    (dict(files=["a.fits"], dtypes=[torchdali.types.BOOL]), "dtypes: BOOL is not supported"),
    (dict(files=["a.fits"], dtypes=[torchdali.types.FLOAT] * 2), "2 types for 1 hdu_indices"),
])
def test_argument_errors(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        read(torchdali, **kwargs)


def _truncated(tmp_path):
    data = open(write(tmp_path / "whole.fits", [np.zeros((40, 30), np.float64)]), "rb").read()
    (tmp_path / "t.fits").write_bytes(data[:2 * BLOCK + 100])
    return str(tmp_path / "t.fits")


def _no_end(tmp_path):
    (tmp_path / "t.fits").write_bytes(card("SIMPLE", "T") * 36)
    return str(tmp_path / "t.fits")


def _table(tmp_path):
    path = tmp_path / "t.fits"
    path.write_bytes(hdu_bytes(None, True) + hdu_bytes(np.zeros((3, 4), np.uint8), False, xtension="BINTABLE"))
    return str(path)


def _compressed(tmp_path):
    path = tmp_path / "t.fits"
    extra = [("ZIMAGE", "T"), ("ZBITPIX", 16), ("ZNAXIS", 1), ("ZNAXIS1", 6), ("ZCMPTYPE", "'HCOMPRESS_1'")]
    path.write_bytes(hdu_bytes(None, True) + hdu_bytes(np.zeros((3, 4), np.uint8), False, extra, "BINTABLE"))
    return str(path)


@pytest.mark.parametrize("make,kwargs,message", [
    (lambda p: (p / "t.fits").write_bytes(b"not a FITS file " * 400) and str(p / "t.fits"), {},
     r"t.fits' is not a FITS file: it does not start with SIMPLE"),
    (_truncated, {}, r"t.fits' is truncated: 100 of the 9600 bytes"),
    (_no_end, {}, r"t.fits' is truncated: the header of HDU 1 has no END card"),
    (lambda p: write(p / "t.fits", [np.zeros(3)]), dict(hdu_indices=[2, 3]),
     r"t.fits' has 2 HDUs; hdu_indices asks for HDU 3"),
    (lambda p: write(p / "t.fits", [np.zeros(3)]), dict(hdu_indices=[1]), r"t.fits': HDU 1 has no data"),
    (_table, {}, r"t.fits': HDU 2 is a BINTABLE extension; only image HDUs"),
    (_compressed, {}, r"t.fits': HDU 2 is a tile-compressed image of ZCMPTYPE = 'HCOMPRESS_1'; the supported "
     r"compressions are RICE_1, GZIP_1, GZIP_2"),
    (lambda p: write(p / "t.fits", [np.array([-1, 0], np.int64)], extra=[("BZERO", "9223372036854775808")]),
     {}, r"t.fits': datatype conversion overflow"),
])
def test_data_errors_name_the_file(tmp_path, make, kwargs, message):
    path = make(tmp_path)
    with pytest.raises(RuntimeError, match=r"experimental.readers.fits.*" + message):
        read(torchdali, 1, 1, files=[path], **kwargs)
    if dali is not None:  # DALI fails on the same files (with cfitsio's messages, no file name)
        with pytest.raises(RuntimeError):
            read(dali, 1, 1, files=[path], **kwargs)


def test_a_compressed_image_whose_heap_is_short_names_the_file(tmp_path):
    fits = pytest.importorskip("astropy.io.fits")
    a = np.arange(600, dtype=np.int16).reshape(20, 30)
    fits.HDUList([fits.PrimaryHDU(), fits.CompImageHDU(a, compression_type="RICE_1")]).writeto(tmp_path / "c.fits")
    data = (tmp_path / "c.fits").read_bytes()
    at = data.index(b"PCOUNT  =")
    (tmp_path / "c.fits").write_bytes(data[:at] + card("PCOUNT", 10) + data[at + 80:])
    with pytest.raises(RuntimeError, match=r"c.fits': a tile of the compressed image lies past the end of its heap"):
        read(torchdali, 1, 1, files=[str(tmp_path / "c.fits")])


@pytest.mark.parametrize("cut", [1, 7])
def test_a_rice_tile_cut_short_is_an_error(tmp_path, cut):
    fits = pytest.importorskip("astropy.io.fits")
    a = np.random.default_rng(cut).integers(-3000, 3000, (4, 200)).astype(np.int32)
    fits.HDUList([fits.PrimaryHDU(), fits.CompImageHDU(a, compression_type="RICE_1")]).writeto(tmp_path / "r.fits")
    with fits.open(tmp_path / "r.fits", disable_image_compression=True) as f:
        streams = [bytes(s) for s in f[1].data["COMPRESSED_DATA"]]
    assert (_signed(rice_decode(streams, [200] * 4, 32, 4), 4) == a).all()
    with pytest.raises(ValueError, match="a RICE_1 tile ends inside a pixel's code"):
        rice_decode([s[:-cut] for s in streams], [200] * 4, 32, 4)


def test_a_batch_of_different_types_is_refused(tmp_path):
    paths = [write(tmp_path / "a.fits", [np.zeros(3, np.int16)]), write(tmp_path / "b.fits", [np.zeros(3, np.int32)])]
    with pytest.raises(RuntimeError, match=r"same data type in HDU 2: '.*a.fits' has int16, '.*b.fits' has int32"):
        read(torchdali, 1, 2, files=paths)


def test_urls_are_listed_and_read(tmp_path):
    """file_root as a URL (fsspec's memory filesystem): listed as readers.numpy lists it, headers
    and data read by ranges."""
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    rng = np.random.default_rng(3)
    arrays = [random_array(rng, (3, 4 + k), "int32") for k in range(3)]
    for k, a in enumerate(arrays):
        fs.pipe(f"/fits_test/{'sub/' if k else ''}{k}.fits", open(write(tmp_path / "f.fits", [a, a[:1]]), "rb").read())
    try:
        got, meta = read(torchdali, 1, 3, file_root="memory://fits_test", hdu_indices=[3, 2])
    finally:
        fs.rm("/fits_test", recursive=True)
    assert meta["epoch_size"] == 3
    assert_same(got, [[[a[:1] for a in arrays], arrays]])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_output_equals_cpu(files):
    kwargs = dict(files=files, hdu_indices=[4, 2], num_shards=2, shard_id=1, pad_last_batch=True)
    gpu, _ = read(torchdali, 3, 3, device="gpu", **kwargs)
    assert_same(gpu, read(torchdali, 3, 3, **kwargs)[0])


def test_checkpoint_restores_mid_epoch(files):
    """Beyond DALI 2.4, whose FITS reader refuses checkpoints: FileReader's state."""
    def step(op):
        outs = op.run([], Args(op, {}), RunContext(iteration=0, batch_size=2, thread_pool=None))
        return [as_numpy_batch(o) for o in outs]

    kwargs = dict(files=files, random_shuffle=True, initial_fill=3, hdu_indices=[3, 2])
    op = make_reader("experimental.readers.fits", 2, **kwargs)
    for _ in range(3):
        step(op)
    state = op.state_dict()
    expected = [step(op) for _ in range(5)]
    fresh = make_reader("experimental.readers.fits", 2, **kwargs)
    fresh.load_state_dict(state)
    assert_same([step(fresh) for _ in range(5)], expected)


# --- compared with DALI ---

@needs_dali
class TestAgainstDali:
    @pytest.mark.parametrize("dtype", list(BITPIX))
    @pytest.mark.parametrize("ndim", [1, 2, 3])
    def test_every_bitpix_and_rank(self, tmp_path, dtype, ndim):
        rng = np.random.default_rng(ndim)
        shapes = [(5, 3, 7), (1, 4, 2), (3, 1, 9)]
        paths = [write(tmp_path / f"{k}.fits", [random_array(rng, s[:ndim], dtype),
                                                random_array(rng, s[::-1][:ndim], dtype)],
                       primary=random_array(rng, s[1:ndim + 1] or (2,), dtype)) for k, s in enumerate(shapes)]
        for hdu_indices in ([2], [3, 1, 2], [2, 2]):
            kwargs = dict(files=paths, hdu_indices=hdu_indices)
            assert_same(read(torchdali, 2, 3, **kwargs)[0], read(dali, 2, 3, **kwargs)[0])

    @pytest.mark.parametrize("bitpix,bscale,bzero,dtype", EQUIVALENT)
    def test_scaling(self, tmp_path, bitpix, bscale, bzero, dtype):
        stored = {8: "uint8", 16: "int16", 32: "int32", 64: "int64", -32: "float32", -64: "float64"}[bitpix]
        rng = np.random.default_rng(abs(bitpix))
        raw = random_array(rng, (4, 5), stored)
        if bitpix == 64:  # cfitsio's scaling of 64-bit data to int64 overflows where doubles do
            raw = rng.integers(-2 ** 40, 2 ** 40, (4, 5))
        path = write(tmp_path / "s.fits", [raw], extra=[("BSCALE", bscale), ("BZERO", bzero)])
        (got,), _ = read(torchdali, 1, 1, files=[path])
        (expected,), _ = read(dali, 1, 1, files=[path])
        assert got[0][0].dtype == np.dtype(dtype)
        assert_same([got], [expected])

    def test_astropy_files_unsigned_and_signed_bytes(self, tmp_path):
        fits = pytest.importorskip("astropy.io.fits")
        rng = np.random.default_rng(4)
        paths = []
        for k, dtype in enumerate(["uint16", "uint32", "int8", "uint64", "float32"]):
            a = random_array(rng, (3, 4, 5), dtype)
            if dtype == "uint64":
                a //= 2  # DALI 2.4 reads uint64 as int64, overflowing from 2**63
            hdus = [fits.PrimaryHDU(), fits.ImageHDU(a), fits.ImageHDU(a[1:, ::2].copy())]
            fits.HDUList(hdus).writeto(tmp_path / f"{dtype}.fits")
            paths.append(str(tmp_path / f"{dtype}.fits"))
        for path in paths:
            kwargs = dict(files=[path], hdu_indices=[3, 2])
            got, _ = read(torchdali, 1, 1, **kwargs)
            assert_same(got, read(dali, 1, 1, **kwargs)[0])
            np.testing.assert_array_equal(got[0][1][0], fits.getdata(path, 1))

    @pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "uint16", "int32", "uint32"])
    @pytest.mark.parametrize("shape,tile", [((13, 97), None), ((3, 9, 41), (2, 4, 16)), ((300,), (64,))])
    @pytest.mark.parametrize("method", ["RICE_1", "GZIP_1", "GZIP_2"])
    def test_tile_compressed_integers(self, tmp_path, dtype, shape, tile, method):
        """astropy's files: values over a small range around a random level, with runs of one
        value (RICE_1's empty blocks) and, for RICE_1, outliers over the whole range (its raw
        blocks and long codes); edge tiles. (DALI's cfitsio fails on GZIP tiles that do not
        compress, so those stay compressible.)"""
        fits = pytest.importorskip("astropy.io.fits")
        rng = np.random.default_rng(len(shape))
        info = np.iinfo(dtype)
        paths = []
        for k in range(3):
            level = rng.integers(info.min // 2, info.max // 2, endpoint=True)
            a = (level + rng.integers(0, 1 << rng.integers(1, 8), shape)).astype(dtype)
            flat = a.reshape(-1)
            flat[rng.integers(0, flat.size):][:40] = flat[0]
            if method == "RICE_1":
                flat[rng.integers(0, flat.size, 5)] = random_array(rng, 5, dtype)
            hdu = fits.CompImageHDU(a, compression_type=method, **({"tile_shape": tile} if tile else {}))
            fits.HDUList([fits.PrimaryHDU(), hdu, fits.ImageHDU(a[..., :3])]).writeto(tmp_path / f"{k}.fits")
            paths.append(str(tmp_path / f"{k}.fits"))
        kwargs = dict(files=paths, hdu_indices=[2, 3])
        got, _ = read(torchdali, 2, 2, **kwargs)
        assert_same(got, read(dali, 2, 2, **kwargs)[0])
        np.testing.assert_array_equal(got[0][0][1], fits.getdata(paths[1], 1))

    @pytest.mark.parametrize("quantize_method", [-1, 1, 2])
    @pytest.mark.parametrize("method", ["RICE_1", "GZIP_2"])
    def test_tile_compressed_floats_quantized(self, tmp_path, quantize_method, method):
        """Floats quantized per tile (ZSCALE/ZZERO), without dithering or with cfitsio's
        subtractive dithering (2: zeros kept exact); tiles of over 9,500 pixels, where the
        dither sequence restarts; a tile stored losslessly beside the quantized ones."""
        fits = pytest.importorskip("astropy.io.fits")
        rng = np.random.default_rng(quantize_method + 5)
        paths = []
        for k, (dtype, shape, tile) in enumerate([("float32", (17, 23), (5, 23)), ("float32", (17, 23), (5, 23)),
                                                  ("float64", (3, 9000), (2, 9000))]):
            a = (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4)).astype(dtype)
            a[1, 4:9] = 0
            if dtype == "float32":  # a blank, dequantized as DALI's cfitsio does: without a null check
                a[2, 3] = np.nan  # (for float64 its check reads a null value past an int: garbage)
                a[5:10] = 3.25  # a constant tile: not quantized, kept in GZIP_COMPRESSED_DATA
            hdu = fits.CompImageHDU(a, compression_type=method, quantize_method=quantize_method,
                                    dither_seed=1 + 4999 * k, tile_shape=tile)
            fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(tmp_path / f"{k}.fits")
            paths.append(str(tmp_path / f"{k}.fits"))
        for files in (paths[:2], paths[2:]):
            got, _ = read(torchdali, 1, len(files), files=files)
            assert_same(got, read(dali, 1, len(files), files=files)[0])

    def test_file_root_file_filter_and_file_list(self, tmp_path):
        rng = np.random.default_rng(1)
        for name in ["b.fits", "a.fits", "sub/c.fits", "sub/d.fit", "sub/deeper/e.fits", "x.FITS"]:
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            write(tmp_path / name, [random_array(rng, (2, 3), "int32")])
        (tmp_path / "list.txt").write_text("sub/d.fit\na.fits\n\nsub/c.fits\n")
        for kwargs in (dict(file_root=str(tmp_path)), dict(file_root=str(tmp_path), file_filter="*.fit*"),
                       dict(file_list=str(tmp_path / "list.txt")),
                       dict(file_root=str(tmp_path / "sub"), files=["c.fits", "d.fit"])):
            expected, meta = read(dali, 3, 2, **kwargs)
            got, meta_got = read(torchdali, 3, 2, **kwargs)
            assert_same(got, expected)
            assert meta_got == meta

    @pytest.mark.parametrize("num_shards", [1, 2, 3])
    @pytest.mark.parametrize("pad_last_batch", [False, True])
    @pytest.mark.parametrize("stick_to_shard", [False, True])
    def test_shards_and_padding_over_epochs(self, files, num_shards, pad_last_batch, stick_to_shard):
        for shard_id in range(num_shards):
            kwargs = dict(files=files, num_shards=num_shards, shard_id=shard_id, pad_last_batch=pad_last_batch,
                          stick_to_shard=stick_to_shard, hdu_indices=[3, 2])
            expected, meta = read(dali, 6, 3, **kwargs)
            got, meta_got = read(torchdali, 6, 3, **kwargs)
            assert_same(got, expected)
            assert meta_got == meta

    @pytest.mark.parametrize("shuffle", [dict(random_shuffle=True, initial_fill=4), dict(shuffle_after_epoch=True)])
    def test_shuffles_return_each_epoch_once_in_another_order(self, files, shuffle):
        """As DALI's (whose random orders are its own): every file once per epoch, not in order."""
        kwargs = dict(files=files, seed=3, hdu_indices=[4], **shuffle)
        in_order = [a.tobytes() for a in read(dali, 1, 7, files=files, hdu_indices=[4])[0][0][0]]
        for lib in (dali, torchdali):
            got, _ = read(lib, 7, 2, **kwargs)
            seen = [a.tobytes() for outs in got for a in outs[0]]
            epochs = [seen[:7], seen[7:14]]
            assert all(sorted(e) == sorted(in_order) for e in epochs)
            assert epochs[0] != in_order or epochs[1] != in_order
