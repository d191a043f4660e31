"""Tile-compressed FITS images (the FITS standard's section 10, as cfitsio writes and reads
them): a BINTABLE of one row per tile, each row's COMPRESSED_DATA a variable-length array in the
table's heap. Decoded here: RICE_1 (vectorized over the tiles: a tile's pixels depend on one
another, tiles do not), GZIP_1 and GZIP_2 (zlib), and floating-point images quantized to integers
(ZSCALE/ZZERO per tile, with cfitsio's subtractive dithering)."""
import functools
import re
import zlib

import numpy as np

_TFORM = re.compile(r"^\s*(\d*)\s*([LXBIJKAEDCMPQ])")
_WIDTHS = {"L": 1, "B": 1, "A": 1, "I": 2, "J": 4, "K": 8, "E": 4, "D": 8, "C": 8, "M": 16, "P": 8, "Q": 16}
_COLUMN_TYPES = {"B": ">u1", "I": ">i2", "J": ">i4", "K": ">i8", "E": ">f4", "D": ">f8"}
# RICE_1's parameters per bytes per pixel: bits of a block's code, the code of a raw block, pixel bits.
_RICE = {1: (3, 6, 8), 2: (4, 14, 16), 4: (5, 25, 32)}
_ZERO_VALUE = -2147483646  # a quantized 0.0 under SUBTRACTIVE_DITHER_2
STORED = {8: ">u1", 16: ">i2", 32: ">i4", 64: ">i8", -32: ">f4", -64: ">f8"}  # BITPIX -> type in a file
CODECS = ("RICE_1", "GZIP_1", "GZIP_2")  # the ZCMPTYPE values decoded here


@functools.lru_cache(maxsize=None)
def _randoms():
    """cfitsio's 10,000 dither values (fits_init_randoms: Park and Miller's generator)."""
    values, seed = np.empty(10000, np.float32), 1.0
    for i in range(10000):
        temp = 16807.0 * seed
        seed = temp - 2147483647.0 * int(temp / 2147483647.0)
        values[i] = seed / 2147483647.0
    return values


def _columns(cards):
    """Per column name: (byte offset in a row, type letter)."""
    columns, at = {}, 0
    for i in range(1, int(cards.get("TFIELDS", "0")) + 1):
        match = _TFORM.match(cards.get(f"TFORM{i}", ""))
        if match is None:
            raise ValueError(f"TFORM{i} = '{cards.get(f'TFORM{i}')}' is not a binary table format")
        repeat, letter = int(match.group(1) or 1), match.group(2)
        columns[cards.get(f"TTYPE{i}", "").upper()] = (at, letter)
        at += (repeat + 7) // 8 if letter == "X" else repeat * _WIDTHS[letter]
    return columns


def _cells(table, rows, width, column, theap=None):
    """The byte strings of a variable-length column, one per row (b'' where empty), from the
    heap at byte `theap` of the data (right after the rows by default)."""
    at, letter = column
    kind = ">i4" if letter == "P" else ">i8"
    size = np.dtype(kind).itemsize
    fields = np.ndarray((rows, 2), kind, table, at, (width, size)).astype(np.int64)
    heap = width * rows if theap is None else theap
    if len(fields) and (heap + fields[:, 0] + fields[:, 1] > len(table)).any():
        raise ValueError("a tile of the compressed image lies past the end of its heap")
    return [bytes(table[heap + start:heap + start + count]) for count, start in fields.tolist()]


def _scalars(table, rows, width, column, cards, key, default):
    """A per-tile numeric column (ZSCALE, ZZERO, ZBLANK) or, without it, the keyword's value."""
    if column is None:
        return np.full(rows, float(cards.get(key, default).replace("D", "E")) if cards.get(key) else default)
    at, letter = column
    return np.ndarray((rows,), _COLUMN_TYPES[letter], table, at, (width,)).astype(np.float64)


def _bits(words, pos, k):
    """The k-bit values (k < 58) at bit positions `pos` of the stream whose 8-byte big-endian
    windows are `words` (one per byte)."""
    window = words[np.minimum(pos >> 3, len(words) - 1)] << (pos & 7).astype(np.uint64)
    return np.where(k > 0, window >> (64 - k).astype(np.uint64) % np.uint64(64), 0).astype(np.uint64)


def _bit_length(x):
    """Bits of each uint64 below 2**53 (np.frexp is exact there)."""
    return np.frexp(x.astype(np.float64))[1].astype(np.int64)


def rice_decode(streams, counts, blocksize, bytepix):
    """RICE_1 tiles (cfitsio's fits_rdecomp): per tile its bytes and pixel count; returns the
    pixels, [tiles, max count], as unsigned integers of bytepix bytes. Each step decodes one
    pixel of every tile at once."""
    if bytepix not in _RICE:
        raise ValueError(f"RICE_1 with BYTEPIX = {bytepix} is not supported (1, 2 or 4)")
    fsbits, fsmax, bbits = _RICE[bytepix]
    counts = np.asarray(counts, np.int64)
    sizes = np.array([len(s) for s in streams], np.int64)
    if (sizes[counts > 0] < bytepix).any():
        raise ValueError("a RICE_1 tile is shorter than its first pixel")
    data = np.frombuffer(b"".join(streams) + bytes(16), np.uint8)
    words = np.zeros(len(data) - 8, np.uint64)
    for i in range(8):
        words |= data[i:len(data) - 8 + i].astype(np.uint64) << np.uint64(56 - 8 * i)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    last = _bits(words, starts * 8, np.full(len(starts), 8 * bytepix))
    pos = (starts + bytepix) * 8
    mask = np.uint64((1 << bbits) - 1)
    out = np.zeros((len(streams), int(counts.max(initial=0))), np.uint64)
    fs = np.zeros(len(streams), np.int64)
    for j in range(out.shape[1]):
        live = j < counts
        if j % blocksize == 0:
            fs = np.where(live, _bits(words, pos, np.full(len(pos), fsbits)).astype(np.int64) - 1, fs)
            pos = np.where(live, pos + fsbits, pos)
        raw = live & (fs == fsmax)
        coded = live & (fs >= 0) & ~raw
        zeros, scan, pending = np.zeros(len(pos), np.int64), pos.copy(), coded.copy()
        while pending.any():  # the unary part: the zeros up to the next one bit, 56 bits a look
            window = _bits(words, scan, np.where(pending, 56, 0))
            found = pending & (window > 0)
            zeros += np.where(found, 56 - _bit_length(window), np.where(pending, 56, 0))
            scan += np.where(pending & ~found, 56, 0)
            pending &= ~found
            if (scan[pending] >= 8 * len(words)).any():
                raise ValueError("a RICE_1 tile ends inside a pixel's code")
        after = pos + zeros + 1
        low = _bits(words, after, np.where(coded, fs, 0))
        diff = np.where(raw, _bits(words, pos, np.where(raw, bbits, 0)),
                        np.where(coded, (zeros.astype(np.uint64) << fs.clip(0).astype(np.uint64)) | low, 0))
        pos = np.where(raw, pos + bbits, np.where(coded, after + fs, pos))
        half = diff >> np.uint64(1)
        value = (last + np.where(diff & np.uint64(1), mask - half, half)) & mask
        out[:, j] = value
        last = np.where(live, value, last)
    if ((pos > (starts + sizes) * 8) & (counts > 0)).any():
        raise ValueError("a RICE_1 tile ends inside a pixel's code")
    return out


def _signed(values, bytepix):
    """Unsigned bytepix-byte values as the signed integers they encode (bytes stay unsigned)."""
    if bytepix == 1:
        return values.astype(np.int64)
    bits = 8 * bytepix
    v = values.astype(np.int64)
    return np.where(v >= 1 << (bits - 1), v - (1 << bits), v)


def _gunzip(stream, dtype, count, shuffled):
    """A GZIP_1 tile (big-endian values, gzip'd) or GZIP_2 (the values' bytes shuffled:
    all first bytes, then all second bytes...)."""
    data = np.frombuffer(zlib.decompress(stream, 47), np.uint8)
    if shuffled:
        data = data.reshape(dtype.itemsize, -1).T.reshape(-1)
    return np.frombuffer(data.tobytes(), dtype, count)


def _options(cards):
    """The ZNAMEi/ZVALi pairs, by name."""
    options, i = {}, 1
    while f"ZNAME{i}" in cards:
        options[cards[f"ZNAME{i}"].upper()] = cards.get(f"ZVAL{i}", "")
        i += 1
    return options


def _place(pixels, counts, shape, tile):
    """The C-order image of the tiles' pixels ([tiles, max count], each tile's in its C order,
    tiles in the table's order: the first FITS axis fastest): a reshape when the tiles cut the
    image evenly, else tile by tile (the edge tiles are smaller)."""
    grid = [-(-n // t) for n, t in zip(shape, tile)]
    if all(n % t == 0 for n, t in zip(shape, tile)):
        blocks = pixels[:, :int(np.prod(tile))].reshape(grid + list(tile))
        order = [a for i in range(len(shape)) for a in (i, len(shape) + i)]
        return blocks.transpose(order).reshape(shape)
    image = np.empty(shape, pixels.dtype)
    for k, index in enumerate(np.ndindex(*grid)):
        slices = tuple(slice(i * t, min((i + 1) * t, n)) for i, t, n in zip(index, tile, shape))
        image[slices] = pixels[k, :counts[k]].reshape([x.stop - x.start for x in slices])
    return image


def _tile_counts(shape, tile):
    """Pixels per tile, in the table's order."""
    edges = [np.minimum(tile_n, n - np.arange(0, n, tile_n)) for n, tile_n in zip(shape, tile)]
    return np.prod(np.stack(np.meshgrid(*edges, indexing="ij")), axis=0).reshape(-1)


def decompress(hdu, table):
    """The image of tile-compressed HDU `hdu` from its data (`table`: the rows, then the
    heap), in C order: integers of ZBITPIX's type, floats dequantized; ValueError where the
    table does not hold what its header announces."""
    cards, shape = hdu.cards, hdu.shape
    width, rows = int(cards["NAXIS1"]), int(cards["NAXIS2"])
    axes = len(shape)
    tile = [min(int(cards.get(f"ZTILE{axes - i}", shape[i] if i == axes - 1 else 1)), shape[i]) for i in range(axes)]
    counts = _tile_counts(shape, tile)
    if len(counts) != rows:
        raise ValueError(f"the compressed image has {rows} tiles in its table, its ZTILEn make {len(counts)}")
    columns = _columns(cards)
    if "COMPRESSED_DATA" not in columns:
        raise ValueError("the compressed image has no COMPRESSED_DATA column")
    theap = int(cards["THEAP"]) if cards.get("THEAP") else None
    streams = _cells(table, rows, width, columns["COMPRESSED_DATA"], theap)
    options = _options(cards)
    quantized = hdu.bitpix < 0 and ("ZSCALE" in columns or "ZSCALE" in cards)
    stored = np.dtype(">i4" if quantized else STORED[hdu.bitpix])
    if hdu.compression == "RICE_1":
        bytepix = int(options.get("BYTEPIX", stored.itemsize))
        coded = np.where([len(x) > 0 for x in streams], counts, 0)  # empty: the tile is in a fallback column
        pixels = _signed(rice_decode(streams, coded, int(options.get("BLOCKSIZE", 32)), bytepix), bytepix)
    else:
        pixels = np.zeros((rows, int(counts.max(initial=0))), stored.newbyteorder("="))
        for k, stream in enumerate(streams):
            if stream:
                pixels[k, :counts[k]] = _gunzip(stream, stored, counts[k], hdu.compression == "GZIP_2")
    if quantized:
        pixels = _dequantize(pixels, cards, columns, table, rows, width)
    pixels = pixels.astype(np.dtype(STORED[hdu.bitpix]).newbyteorder("="))
    for name in ("GZIP_COMPRESSED_DATA", "UNCOMPRESSED_DATA"):  # tiles kept as they were (unquantizable floats)
        if name in columns:
            for k, cell in enumerate(_cells(table, rows, width, columns[name], theap)):
                if cell and not streams[k]:
                    raw = zlib.decompress(cell, 47) if name.startswith("GZIP") else cell
                    pixels[k, :counts[k]] = np.frombuffer(raw, STORED[hdu.bitpix], counts[k])
    return _place(pixels, counts, shape, tile)


def _dequantize(ints, cards, columns, table, rows, width):
    """Per tile, integers to floats: (i - dither + 0.5) * ZSCALE + ZZERO with cfitsio's
    subtractive dithering, i * ZSCALE + ZZERO without; ZERO_VALUE gives 0 (SUBTRACTIVE_DITHER_2).
    Blank pixels (ZBLANK) are dequantized like any other: DALI asks cfitsio for no null check
    (a NaN written by astropy comes back as a large negative number there too)."""
    scale = _scalars(table, rows, width, columns.get("ZSCALE"), cards, "ZSCALE", 1.0)[:, None]
    zero = _scalars(table, rows, width, columns.get("ZZERO"), cards, "ZZERO", 0.0)[:, None]
    method = cards.get("ZQUANTIZ", "NO_DITHER").upper()
    if method.startswith("SUBTRACTIVE_DITHER"):
        seeds = np.arange(rows) + int(cards.get("ZDITHER0", "1")) - 1
        values = (ints - _dither(seeds, ints.shape[1]) + 0.5) * scale + zero
    else:
        values = ints * scale + zero
    if method == "SUBTRACTIVE_DITHER_2":
        values[ints == _ZERO_VALUE] = 0.0
    return values


def _dither(seeds, count):
    """cfitsio's dither offsets of tiles ([tiles, count]): tile k's start at value
    int(r[seed_k] * 500) of its random table r and go on, restarting after the table's end at
    the next seed's start."""
    r = _randoms().astype(np.float64)
    n = len(r)
    out = np.empty((len(seeds), count))
    seeds, done = seeds % n, np.zeros(len(seeds), np.int64)
    j = np.arange(count)
    while (done < count).any():  # each pass a run of at least 9,500 values
        start = (r[seeds] * 500).astype(np.int64)
        take = (j >= done[:, None]) & (j < (done + n - start)[:, None])
        index = start[:, None] + j - done[:, None]
        out[take] = r[index[take]]
        done += n - start
        seeds = (seeds + 1) % n
    return out
