"""PNG files are checked before torchvision's decoder sees them, which kills the process on
an error in the image data (torchdali/operators/png.py): every such file is a bad file with
its reason, every file libpng reads whole still decodes, and no mutated file crashes."""
import io
import random
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
from PIL import Image

from torchdali import fn, pipeline_def, types
from torchdali.operators.png import check_png

LIMIT = 1 << 30


def chunk(kind, body, crc=None):
    crc = zlib.crc32(kind + body) if crc is None else crc
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def rows(width=10, height=6, filter_type=0):
    r = np.random.RandomState(width * height).randint(0, 255, (height, width * 3), np.uint8)
    return b"".join(bytes([filter_type]) + bytes(row) for row in r)


def png(width=10, height=6, data=None, idat_parts=1, tail=None, ihdr=None):
    """An RGB PNG of `width` x `height` from raw rows `data` (filter bytes included)."""
    z = zlib.compress(rows(width, height) if data is None else data)
    cuts = [len(z) * k // idat_parts for k in range(idat_parts + 1)]
    idats = b"".join(chunk(b"IDAT", z[a:b]) for a, b in zip(cuts, cuts[1:]))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0) if ihdr is None else ihdr
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"tEXt", b"a\x00b") + idats +
            (chunk(b"IEND", b"") if tail is None else tail))


def unended_stream(data):
    z = zlib.compressobj()
    return z.compress(data) + z.flush(zlib.Z_SYNC_FLUSH)


def idat_stream(body):
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 10, 6, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", body) + chunk(b"IEND", b""))


def bad_adler():
    z = zlib.compress(rows())
    return z[:-4] + bytes(4)


BAD = {  # what torchvision's decoder crashes on, or fails on without saying why
    "size_above_data": (png(4000, 3000, data=rows()), r"image data is cut short \(186 of the 36,003,000 bytes"),
    "size_below_data": (png(3, 2, data=rows()), "a row of the PNG's image data has filter type"),
    "bad_filter": (png(data=rows(filter_type=9)), "filter type 9; PNG has 0 to 4"),
    "zero_size": (png(0, 0, data=rows()), "its PNG header gives a size of 0 x 0"),
    "bad_depth": (png(ihdr=struct.pack(">IIBBBBB", 10, 6, 7, 2, 0, 0, 0)), "colour type 2 with bit depth 7"),
    "too_many_pixels": (png(60000, 60000, data=rows()), r"claims 60000 x 60000 pixels, more than the 1,073,741,824 allowed"),
    "bad_adler": (idat_stream(bad_adler()), r"compressed image data is corrupt \(.*incorrect data check"),
    "no_stream_end": (idat_stream(unended_stream(rows())), "has no end"),
    "cut_in_idat": (png()[:60], r"ends inside its image data"),
    "no_idat": (png()[:41], r"ends before its image data"),
    "no_ihdr": (b"\x89PNG\r\n\x1a\n" + chunk(b"IDAT", b"x"), r"header \(IHDR\) is missing"),
}


def idat_crc():
    data = bytearray(png(idat_parts=2))
    second = data.rfind(b"IDAT")
    data[second + 4] ^= 0xFF  # its first byte of data: the chunk's CRC no longer matches
    return bytes(data)


BAD["idat_crc"] = (idat_crc(), "an IDAT chunk of the PNG has a bad CRC")


def encode(img, **kwargs):
    out = io.BytesIO()
    img.save(out, "PNG", **kwargs)
    return out.getvalue()


def photo(h=23, w=37):
    return np.random.RandomState(h * w).randint(0, 255, (h, w, 3), np.uint8)


GOOD = {  # libpng reads these whole (chunks after the image data are never read)
    "plain": png(),
    "no_iend": png(tail=b""),
    "iend_bad_crc": png(tail=chunk(b"IEND", b"", crc=1)),
    "cut_after_image_data": png(tail=chunk(b"IEND", b"")[:5]),
    "more_data_than_its_size": idat_stream(zlib.compress(rows() + bytes(100))),
    "idat_in_parts": png(idat_parts=3),
    "palette": encode(Image.fromarray(photo()).convert("P")),
    "gray_1_bit": encode(Image.fromarray(photo()[..., 0]).convert("1")),
    "gray_16_bit": encode(Image.fromarray(photo()[..., 0].astype(np.uint16) * 257)),
    "gray_alpha": encode(Image.fromarray(photo()).convert("LA")),
    "rgba": encode(Image.fromarray(photo()).convert("RGBA")),
}


def interlaced_png():
    """An Adam7-interlaced RGB PNG of 13 x 11 (Pillow writes none): its passes' rows."""
    img = photo(11, 13)
    passes = ((0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1))
    raw = b"".join(b"\x00" + img[r, c::cs].tobytes() for r0, c, rs, cs in passes for r in range(r0, 11, rs)
                   if img[r, c::cs].size)
    return png(13, 11, data=raw, ihdr=struct.pack(">IIBBBBB", 13, 11, 8, 2, 0, 0, 1)), img


@pytest.mark.parametrize("case", BAD)
def test_a_png_that_would_crash_the_decoder_is_refused_with_its_reason(case):
    data, reason = BAD[case]
    with pytest.raises(ValueError, match=reason):
        check_png(data, LIMIT)


@pytest.mark.parametrize("case", GOOD)
def test_a_png_libpng_reads_whole_passes(case):
    header = check_png(GOOD[case], LIMIT)
    assert header.width > 0 and header.height > 0


def test_an_interlaced_png_passes_and_decodes_to_its_pixels(tmp_path):
    data, img = interlaced_png()
    assert check_png(data, LIMIT).interlace == 1
    (tmp_path / "interlaced.png").write_bytes(data)
    (out,) = decode([str(tmp_path / "interlaced.png")])
    np.testing.assert_array_equal(out, img)


def decode(paths, **kwargs):
    @pipeline_def(batch_size=len(paths), num_threads=1, device_id=None)
    def pipe():
        jpegs, _ = fn.readers.file(files=paths)
        return fn.decoders.image(jpegs, **kwargs)

    (out,) = pipe().run()
    return [np.asarray(out.at(i)) for i in range(len(paths))]


@pytest.mark.parametrize("case", BAD)
def test_decoders_image_names_the_file_and_the_reason(tmp_path, case):
    data, reason = BAD[case]
    path = tmp_path / f"{case}.png"
    path.write_bytes(data)
    with pytest.raises(RuntimeError, match=f"cannot decode {path}: .*{reason}"):
        decode([str(path)])


def test_good_pngs_decode_as_pillow_reads_them(tmp_path):
    paths = []
    for case, data in GOOD.items():
        paths.append(str(tmp_path / f"{case}.png"))
        (tmp_path / f"{case}.png").write_bytes(data)
    for path, out in zip(paths, decode(paths)):
        if "16_bit" in path:  # values k * 257, scaled back to k (Pillow cannot convert 16-bit to RGB)
            ref = np.repeat(photo()[..., :1], 3, axis=2)
        else:
            ref = np.asarray(Image.open(path).convert("RGB"))
        np.testing.assert_array_equal(out, ref, err_msg=path)


def test_palette_any_data_gives_its_colours_as_dali(tmp_path):
    path = tmp_path / "palette.png"
    path.write_bytes(GOOD["palette"])
    (out,) = decode([str(path)], output_type=types.ANY_DATA)
    np.testing.assert_array_equal(out, np.asarray(Image.open(path).convert("RGB")))


MUTATIONS = 300


def mutated_pngs(seed):
    rng = random.Random(seed)
    bases = [v for k, v in GOOD.items()] + [interlaced_png()[0]]
    for _ in range(MUTATIONS):
        d = bytearray(rng.choice(bases))
        how = rng.randrange(4)
        if how == 0:
            del d[rng.randrange(8, len(d)):]
        elif how == 1:
            for _ in range(rng.randint(1, 4)):
                d[rng.randrange(8, len(d))] = rng.randrange(256)
        elif how == 2:
            d[rng.randrange(8, len(d))] ^= 1 << rng.randrange(8)
        else:
            start = rng.randrange(8, len(d))
            del d[start:start + rng.randrange(1, 50)]
        yield bytes(d)


def test_no_mutated_png_that_passes_the_check_crashes_the_decoder(tmp_path):
    """Seeded mutations (cuts, changed bytes and bits, removed runs) of the good files; those
    the check passes are decoded by torchvision in a child process, where a crash is seen."""
    passed = []
    for k, data in enumerate(mutated_pngs(0)):
        try:
            check_png(data, LIMIT)
        except ValueError:
            continue
        (tmp_path / f"{k}.png").write_bytes(data)
        passed.append(str(tmp_path / f"{k}.png"))
    assert 0 < len(passed) < MUTATIONS
    code = ("import sys, warnings, torch, torchvision.io as io\nwarnings.simplefilter('ignore')\n"
            "for p in sys.argv[1:]:\n    print(p, flush=True)\n"
            "    try:\n        io.decode_image(torch.frombuffer(bytearray(open(p, 'rb').read()), dtype=torch.uint8))\n"
            "    except Exception:\n        pass\n")
    run = subprocess.run([sys.executable, "-c", code, *passed], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"the decoder crashed on {run.stdout.split()[-1:]}"
