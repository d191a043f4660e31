"""experimental.readers.fits: image HDUs of FITS files, one output per index of `hdu_indices`,
listed, sharded, shuffled and padded as readers.numpy lists files (FileReader's loader).

The format is parsed here: headers of 80-character cards in 2880-byte blocks up to an END
card, each HDU's data padded to 2880 bytes, HDUs walked from the primary one. Values come out
as DALI gives them through cfitsio: in native byte order, scaled by BSCALE/BZERO into cfitsio's
"equivalent" type (`equivalent_type`: BZERO 32768 on 16-bit data gives uint16, a fractional
scale float32...). Tile-compressed images (a BINTABLE with ZIMAGE = T) are decoded by
fits_tiles.py (RICE_1, GZIP_1, GZIP_2); other compressions are refused naming the file."""
import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from .. import types
from ..schema import DTYPE, INTS, Arg, _list_of, register
from ..tensor_list import TensorList
from .base import BatchSpec, map_samples
from .file_io import read_into, read_path
from .fits_tiles import CODECS, STORED, decompress
from .numpy_reader import _LOADER_ARGS, FILE_ARGS, NumpyReader
from .readers import FileReader

BLOCK = 2880
CARD = 80
_HEADER_READ = 4 * BLOCK  # bytes read at a time while looking for a header's END card

# The output types DALI accepts in `dtypes` (it checks them, then uses the files' types).
_SUPPORTED = (types.UINT8, types.UINT16, types.UINT32, types.UINT64, types.INT8, types.INT16, types.INT32,
              types.INT64, types.FLOAT16, types.FLOAT, types.FLOAT64)
_DTYPES = _list_of(DTYPE.convert, "DALIDataType or list of DALIDataType")
_RANGES = {8: (0.0, 255.0), 16: (-32768.0, 32767.0), 32: (-2147483648.0, 2147483647.0)}
_INT64_LIMIT = 9223372036854775808.0


@dataclass
class Hdu:
    """One HDU's header, as far as reading its data needs: the kind (IMAGE for the primary
    array and image extensions), BITPIX, the array's shape in C order, the scaling, where its
    data lies; for a tile-compressed image (a BINTABLE with ZIMAGE = T, whose image keywords are
    the Z ones) its algorithm and its header's cards, None otherwise."""
    kind: str
    bitpix: int
    shape: tuple
    bscale: float
    bzero: float
    offset: int
    nbytes: int
    compression: str = None
    cards: dict = None


def _value(card):
    """The value of a card as text ('' without one), a string without its quotes."""
    if card[8:10] != b"= ":
        return ""
    text = card[10:].decode("ascii", "replace").strip()
    if text.startswith("'"):
        end = text.find("'", 1)
        while end >= 0 and text[end + 1:end + 2] == "'":  # '' is a quote inside the string
            end = text.find("'", end + 2)
        return text[1:end].replace("''", "'").rstrip()
    return text.split("/", 1)[0].strip()


def parse_cards(data):
    """The keyword -> value text of a header's cards, and the header's length in bytes (whole
    blocks); None if `data` ends before the END card."""
    cards = {}
    for at in range(0, len(data) - CARD + 1, CARD):
        card = data[at:at + CARD]
        key = card[:8].decode("ascii", "replace").rstrip()
        if key == "END":
            return cards, -(-(at + CARD) // BLOCK) * BLOCK
        if key and key not in cards:
            cards[key] = _value(card)
    return None


def _number(cards, key, default, kind=float):
    text = cards.get(key, "")
    if not text:
        return default
    return kind(float(text.replace("D", "E"))) if kind is float else kind(text)


def make_hdu(cards, offset, first):
    """The Hdu of a header's cards whose data starts at `offset`; ValueError for a BITPIX (or
    ZBITPIX) that FITS does not define."""
    bitpix, naxis = _number(cards, "BITPIX", 0, int), _number(cards, "NAXIS", 0, int)
    if bitpix not in STORED:
        raise ValueError(f"BITPIX = {bitpix} is not a FITS data type")
    axes = [_number(cards, f"NAXIS{i}", 0, int) for i in range(1, naxis + 1)]
    groups = first and cards.get("GROUPS") == "T" and axes and axes[0] == 0
    count = int(np.prod(axes[1:] if groups else axes, dtype=np.int64)) if naxis else 0
    pcount, gcount = _number(cards, "PCOUNT", 0, int), _number(cards, "GCOUNT", 1, int)
    nbytes = abs(bitpix) // 8 * gcount * (pcount + count) if naxis else 0
    kind = "IMAGE" if first else cards["XTENSION"].upper()
    scaling = _number(cards, "BSCALE", 1.0), _number(cards, "BZERO", 0.0)
    if kind == "BINTABLE" and cards.get("ZIMAGE") == "T":
        if _number(cards, "ZBITPIX", 0, int) not in STORED:
            raise ValueError(f"ZBITPIX = {cards.get('ZBITPIX')} is not a FITS data type")
        axes = [_number(cards, f"ZNAXIS{i}", 0, int) for i in range(1, _number(cards, "ZNAXIS", 0, int) + 1)]
        return Hdu("IMAGE", _number(cards, "ZBITPIX", 0, int), tuple(reversed(axes)), *scaling, offset, nbytes,
                   cards.get("ZCMPTYPE", "unknown"), cards)
    return Hdu(kind, bitpix, tuple(reversed(axes)), *scaling, offset, nbytes)


def equivalent_type(bitpix, bscale, bzero):
    """The NumPy type cfitsio reads scaled data as (its fits_get_img_equivtype, as DALI 2.4
    has it): the smallest integer type holding the scaled range when the scale and the zero
    are integers, else float32 for 8- and 16-bit data, float64 for wider; 64-bit integers and
    floats keep their type."""
    stored = np.dtype(STORED[bitpix]).newbyteorder("=")
    if (bscale == 1.0 and bzero == 0.0) or bitpix not in _RANGES:
        return stored
    wide = np.dtype(np.float64 if bitpix == 32 else np.float32)
    lo, hi = (bzero + bscale * v for v in _RANGES[bitpix])
    lo, hi = min(lo, hi), max(lo, hi)
    whole = (bzero < 2147483648.0 and float(int(bzero)) == bzero) and np.floor(bscale) == bscale
    if bzero != 2147483648.0 and not whole:
        return wide
    for dtype, (a, b) in ((np.int8, (-128.0, 127.0)), (np.int16, (-32768.0, 32767.0)), (np.uint16, (0.0, 65535.0)),
                          (np.int32, (-2147483648.0, 2147483647.0)), (np.uint32, (0.0, 4294967295.0))):
        if (lo == a and hi == b) if dtype is np.int8 else (lo >= a and hi <= b):
            return np.dtype(dtype)
    return np.dtype(np.float64)


def scale_into(raw, hdu, out):
    """out = raw * BSCALE + BZERO, as cfitsio converts: in float64, truncated toward zero into
    integer types; 64-bit data offset by 2**63 (unsigned) by flipping the sign bit. ValueError
    where a value does not fit int64."""
    if hdu.bitpix == 64 and hdu.bscale == 1.0 and hdu.bzero == _INT64_LIMIT:
        if (raw >= 0).any():
            raise ValueError("datatype conversion overflow: values of 2**63 and above (BZERO = 2**63) do not "
                             "fit int64")
        np.bitwise_xor(raw, np.int64(-2 ** 63), out=out, casting="unsafe")
        return
    value = raw.astype(np.float64) * hdu.bscale + hdu.bzero
    if hdu.bitpix == 64 and ((value < -_INT64_LIMIT) | (value > _INT64_LIMIT)).any():
        raise ValueError("datatype conversion overflow: a scaled value does not fit int64")
    out[...] = value if out.dtype.kind == "f" else np.trunc(value)


@register(
    "experimental.readers.fits", devices=("cpu", "gpu"), outputs=lambda args, num_inputs: len(args["hdu_indices"]),
    args=[
        dataclasses.replace(NumpyReader.schema.args[name], default="*.fits") if name == "file_filter"
        else NumpyReader.schema.args[name] for name in FILE_ARGS
    ] + [
        Arg("hdu_indices", INTS, [2], "HDUs to read, counted from 1 (the primary HDU); one output each. "
            "The default, [2], is the first extension.",
            check=lambda v: None if v and min(v) >= 1 else "must be a non-empty list of indices from 1"),
        Arg("dtypes", _DTYPES, None, "Types of the outputs, one per HDU index; checked as DALI checks them "
            "(supported types, one per index), while the outputs keep the files' types as in DALI."),
    ] + [NumpyReader.schema.args[name] for name in _LOADER_ARGS])
class FitsReader(FileReader):
    """Reads image HDUs of FITS files, one output per index of `hdu_indices`: each HDU's data
    in the type BITPIX, BSCALE and BZERO give (cfitsio's equivalent type) and the shape of its
    NAXISn reversed (C order); shards, pads and shuffles as readers.numpy does."""

    _list_entries = NumpyReader._list_entries  # readers.numpy's listing: file_root + file_filter, lists

    def __init__(self, spec):
        super().__init__(spec)
        self.indices = spec.args["hdu_indices"]

    def _check_args(self, a):
        NumpyReader._check_args(self, dict(a, use_o_direct=False))  # the listing's (fits has no O_DIRECT)
        dtypes = a["dtypes"]
        if dtypes is not None:
            for dtype in dtypes:
                if dtype not in _SUPPORTED:
                    raise self.error(f"dtypes: {dtype.name} is not supported; supported types are "
                                     f"{', '.join(t.name for t in _SUPPORTED)}", ValueError)
            if len(dtypes) != len(a["hdu_indices"]):
                raise self.error(f"dtypes has {len(dtypes)} types for {len(a['hdu_indices'])} hdu_indices; "
                                 "give one per index", ValueError)

    def plan(self, inputs):
        """One output per HDU index, of the files' type and rank (known from the data)."""
        device = "gpu" if self.spec.device == "gpu" else "cpu"
        return [BatchSpec(device, None, None, "") for _ in self.indices], self.run

    def run(self, inputs, args, ctx):
        if self.entries is None:
            self._prepare()
        picks = self._next_batch(ctx.batch_size)
        paths = [self.paths[e] for e in picks]
        hdus = map_samples(lambda i, path: self._hdus(path), paths, ctx)
        names = [self.names[e] for e in picks]
        return [self._output(k, [h[k] for h in hdus], paths, names, ctx) for k in range(len(self.indices))]

    def _output(self, k, hdus, paths, names, ctx):
        """Output k: HDU hdu_indices[k] of every sample, in one buffer."""
        dtypes = [equivalent_type(h.bitpix, h.bscale, h.bzero) for h in hdus]
        for i, (h, dtype) in enumerate(zip(hdus, dtypes)):
            if len(h.shape) != len(hdus[0].shape) or dtype != dtypes[0]:
                what, a, b = ("number of dimensions", len(hdus[0].shape), len(h.shape)) \
                    if len(h.shape) != len(hdus[0].shape) else ("data type", dtypes[0].name, dtype.name)
                raise self.error(f"all samples of a batch must have the same {what} in HDU {self.indices[k]}: "
                                 f"'{paths[0]}' has {a}, '{paths[i]}' has {b}", sample=i, file=paths[i])
        shapes = np.array([h.shape for h in hdus], np.int64).reshape(len(hdus), -1)
        sizes = shapes.prod(axis=1)
        ends = np.cumsum(sizes).tolist()
        gpu = self.spec.device == "gpu"
        out = torch.empty(int(sizes.sum()), dtype=types.to_torch_type(dtypes[0]), pin_memory=gpu)
        flat = out.numpy()

        def read(i, path):
            self._read_data(path, hdus[i], flat[ends[i] - int(sizes[i]):ends[i]])

        map_samples(read, paths, ctx)
        if gpu:
            out = out.to(ctx.cuda_device, non_blocking=True)
        return TensorList.from_flat(out, shapes, "", device="gpu" if gpu else "cpu", source_info=names)

    def _read_data(self, path, hdu, dst):
        """HDU `hdu`'s data of file `path` into `dst` (flat, of the equivalent type)."""
        stored = np.dtype(STORED[hdu.bitpix])
        plain = (hdu.bscale, hdu.bzero) == (1.0, 0.0)
        try:
            if hdu.compression is not None:
                table = np.empty(hdu.nbytes, np.uint8)
                read_into(self, path, hdu.offset, table)
                raw = decompress(hdu, table)
            elif plain and dst.dtype == stored.newbyteorder("="):
                read_into(self, path, hdu.offset, dst)
                if stored.itemsize > 1:
                    dst.byteswap(inplace=True)
                return
            else:
                raw = np.empty(dst.shape, stored)
                read_into(self, path, hdu.offset, raw)
            if plain:
                dst[...] = raw.reshape(-1)
            else:
                scale_into(raw.reshape(-1), hdu, dst)
        except ValueError as e:
            raise self.error(f"'{path}': {e}", file=path) from None

    def _hdus(self, path):
        """The image HDUs of `path` at hdu_indices, walking the file's headers up to the last."""
        found, offset, last = {}, 0, max(self.indices)
        for index in range(1, last + 1):
            header = self._header(path, offset, index)
            if header is None:
                raise self.error(f"'{path}' has {index - 1} HDUs; hdu_indices asks for HDU {last}", file=path)
            cards, length = header
            try:
                hdu = make_hdu(cards, offset + length, index == 1)
            except ValueError as e:
                raise self.error(f"'{path}': HDU {index}: {e}", file=path) from None
            found[index] = hdu
            offset = hdu.offset + -(-hdu.nbytes // BLOCK) * BLOCK
        return [self._image(path, index, found[index]) for index in self.indices]

    def _header(self, path, offset, index):
        """The cards and length of the header at `offset`; None at the end of the file."""
        data = b""
        while True:
            chunk = read_path(self, path, offset + len(data), _HEADER_READ)
            if not chunk:
                if not data:
                    return None
                raise self.error(f"'{path}' is truncated: the header of HDU {index} has no END card", file=path)
            if not data and chunk[:8].rstrip() != (b"SIMPLE" if index == 1 else b"XTENSION"):
                what = "is not a FITS file: it does not start with SIMPLE" if index == 1 else \
                    f"has bytes after HDU {index - 1} that are not an HDU: no XTENSION card"
                raise self.error(f"'{path}' {what}", file=path)
            data += chunk
            parsed = parse_cards(data[:len(data) // CARD * CARD])
            if parsed is not None:
                return parsed

    def _image(self, path, index, hdu):
        """`hdu` if it is an image with data DALI reads; an error naming the file otherwise."""
        if hdu.compression is not None and hdu.compression not in CODECS:
            raise self.error(f"'{path}': HDU {index} is a tile-compressed image of ZCMPTYPE = '{hdu.compression}'; "
                             f"the supported compressions are {', '.join(CODECS)}", file=path)
        if hdu.kind != "IMAGE":
            raise self.error(f"'{path}': HDU {index} is a {hdu.kind} extension; only image HDUs are read",
                             file=path)
        if not hdu.shape:
            raise self.error(f"'{path}': HDU {index} has no data (NAXIS = 0)", file=path)
        return hdu
