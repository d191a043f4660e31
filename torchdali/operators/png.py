"""PNG files checked before torchvision decodes them.

torchvision's PNG decoder kills the process (SIGSEGV) when libpng reports an error while
it reads the image data: IDAT chunks cut short or with a bad CRC, a zlib stream that is
corrupt, fails its checksum or gives fewer bytes than the header's size, a row with an
unknown filter type. Errors in the chunks before the image data come back as exceptions.
So the image data is checked here first, as libpng reads it (chunks after it are never
read), and a file that would crash is a bad file with its reason."""
import struct
import zlib

import numpy as np

from ..settings import MAX_IMAGE_PIXELS_VARIABLE

SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Colour type -> (channels, allowed bit depths).
_COLOUR_TYPES = {0: (1, (1, 2, 4, 8, 16)), 2: (3, (8, 16)), 3: (1, (1, 2, 4, 8)), 4: (2, (8, 16)),
                 6: (4, (8, 16))}
PALETTE = 3
# Adam7 interlacing: (first row, first column, row step, column step) of each pass.
_ADAM7 = ((0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1))
_LAST_FILTER_TYPE = 4  # none, sub, up, average, Paeth


class Header:
    """What IHDR says."""

    def __init__(self, body):
        (self.width, self.height, self.bit_depth, self.colour_type, compression, filtering,
         self.interlace) = struct.unpack(">IIBBBBB", body)
        if self.width == 0 or self.height == 0:
            raise ValueError(f"its PNG header gives a size of {self.width} x {self.height}")
        channels, depths = _COLOUR_TYPES.get(self.colour_type, (0, ()))
        if self.bit_depth not in depths:
            raise ValueError(f"its PNG header gives colour type {self.colour_type} with bit depth {self.bit_depth}, "
                             "which PNG does not have")
        if compression or filtering or self.interlace > 1:
            raise ValueError("its PNG header names an unknown compression, filter or interlace method")
        self.bits_per_pixel = channels * self.bit_depth

    def rows(self):
        """(rows, bytes per row without its filter byte) of each pass of the image data."""
        passes = _ADAM7 if self.interlace else ((0, 0, 1, 1),)
        for row, column, row_step, column_step in passes:
            height = -(-(self.height - row) // row_step)
            width = -(-(self.width - column) // column_step)
            if height > 0 and width > 0:
                yield height, -(-(width * self.bits_per_pixel) // 8)


def png_header(data):
    """The IHDR of PNG `data` (a bytes-like object), without looking further; a ValueError if it is bad."""
    if len(data) < 33 or data[12:16] != b"IHDR" or struct.unpack_from(">I", data, 8)[0] != 13:
        raise ValueError("its PNG header (IHDR) is missing or cut short")
    return Header(data[16:29])


def check_png(data, max_pixels):
    """Raise a ValueError saying what is wrong with PNG `data` (a bytes-like object) where torchvision's
    decoder would crash on it, or where its header claims more than `max_pixels` pixels;
    returns its Header."""
    header = png_header(data)
    if header.width * header.height > max_pixels:
        raise ValueError(f"its PNG header claims {header.width} x {header.height} pixels, more than the "
                         f"{max_pixels:,} allowed (set {MAX_IMAGE_PIXELS_VARIABLE} to allow more)")
    stream = zlib.decompressobj()
    expected = sum(h * (1 + w) for h, w in header.rows())
    pixels = bytearray()
    pos, in_image = 8, False
    while True:
        if pos + 12 > len(data):
            if in_image:
                break  # no chunk after the image data (libpng reads none)
            raise ValueError("the PNG ends before its image data (IDAT)")
        length, kind = struct.unpack_from(">I4s", data, pos)
        end = pos + 12 + length
        if kind != b"IDAT":
            if in_image:
                break  # the image data ends at the first other chunk: libpng reads no further
            pos = end
            continue
        if end > len(data):
            raise ValueError("the PNG ends inside its image data (an IDAT chunk is cut short)")
        body = data[pos + 8:pos + 8 + length]
        if zlib.crc32(body, zlib.crc32(kind)) != struct.unpack_from(">I", data, pos + 8 + length)[0]:
            raise ValueError("an IDAT chunk of the PNG has a bad CRC (the file is corrupt)")
        in_image = True
        if len(pixels) <= expected and not stream.eof:
            try:
                pixels += stream.decompress(body, expected + 1 - len(pixels))
            except zlib.error as e:
                raise ValueError(f"the PNG's compressed image data is corrupt ({e})") from None
        pos = end
    # libpng accepts more data than the size needs (with a warning), not less, nor a stream without its end.
    if len(pixels) < expected:
        raise ValueError(f"the PNG's image data is cut short ({len(pixels):,} of the {expected:,} bytes its size needs)")
    if len(pixels) == expected and not stream.eof:
        raise ValueError("the PNG's compressed image data has no end (its zlib stream is cut short)")
    _check_filters(np.frombuffer(pixels, np.uint8), header)
    return header


def _check_filters(pixels, header):
    start = 0
    for height, width in header.rows():
        filters = pixels[start:start + height * (width + 1):width + 1]
        if filters.max() > _LAST_FILTER_TYPE:
            raise ValueError(f"a row of the PNG's image data has filter type {int(filters.max())}; PNG has 0 to 4")
        start += height * (width + 1)
