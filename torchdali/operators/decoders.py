"""Image decoding: `decoders.image` on the CPU (libjpeg-turbo/libpng through torchvision,
Pillow for other formats) and 'mixed' (batched nvJPEG through torchvision on the GPU)."""
import io
import threading
import warnings

import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, FLOAT, IMAGE_TYPE, INT, STR, Arg, register
from ..tensor_list import TensorList
from .base import Operator, map_samples

# torchvision 0.29 deprecates its image codecs in favour of TorchCodec; they still work,
# and saying so on every decoded image helps nobody.
warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision",
                        category=DeprecationWarning)
try:
    import torchvision.io as _tvio
except Exception:  # noqa: BLE001  (a broken torchvision install raises all sorts of errors)
    _tvio = None

_warned_no_torchvision = threading.Event()
_JPEG_MAGIC = b"\xff\xd8\xff"
_TV_FORMATS = (b"\xff\xd8\xff", b"\x89PNG", b"GIF8", b"RIFF")  # what torchvision decodes


def _tv_mode(output_type):
    m = _tvio.ImageReadMode
    return {types.GRAY: m.GRAY, types.ANY_DATA: m.UNCHANGED}.get(output_type, m.RGB)


def _to_output_type(chw, output_type):
    """Decoded CHW uint8 (RGB, gray or as stored) -> HWC in the requested colour space."""
    if output_type in (types.RGB, types.BGR, types.YCbCr) and chw.shape[0] == 1:
        chw = chw.expand(3, -1, -1)
    if output_type == types.BGR:
        chw = chw.flip(0)
    elif output_type == types.YCbCr:
        chw = rgb_to_ycbcr(chw)
    return chw.permute(1, 2, 0).contiguous()


def rgb_to_ycbcr(chw):
    """ITU-R BT.601 (JPEG's full-range YCbCr), rounded to uint8."""
    r, g, b = chw.float().unbind(0)
    y = 0.299 * r + 0.587 * g + 0.114 * b
    cb = 128.0 - 0.168736 * r - 0.331264 * g + 0.5 * b
    cr = 128.0 + 0.5 * r - 0.418688 * g - 0.081312 * b
    return torch.stack([y, cb, cr]).add_(0.5).floor_().clamp_(0, 255).to(torch.uint8)


def _decode_pillow(data, output_type, orient):
    from PIL import Image, ImageOps

    img = Image.open(io.BytesIO(data.numpy().tobytes()))
    if orient:
        img = ImageOps.exif_transpose(img)
    if output_type == types.GRAY:
        img = img.convert("L")
    elif output_type != types.ANY_DATA or img.mode not in ("L", "RGB", "RGBA", "LA"):
        img = img.convert("RGB")
    arr = np.asarray(img)
    arr = arr[:, :, None] if arr.ndim == 2 else arr
    return torch.from_numpy(arr.copy()).permute(2, 0, 1)


def decode_cpu(data, output_type, orient=True):
    """One encoded image (1D uint8 tensor) -> CHW uint8, EXIF orientation applied if `orient`."""
    if data.numel() == 0:
        raise ValueError("the file is empty")
    head = bytes(data[:4].tolist())
    if _tvio is not None and head.startswith(_TV_FORMATS):
        return _tvio.decode_image(data, mode=_tv_mode(output_type), apply_exif_orientation=orient)
    if _tvio is None and not _warned_no_torchvision.is_set():
        _warned_no_torchvision.set()
        warnings.warn("decoders.image: torchvision cannot be imported; decoding with Pillow (slower)")
    try:
        return _decode_pillow(data, output_type, orient)
    except Exception as e:  # noqa: BLE001  (Pillow raises many types for bad data)
        if type(e).__name__ == "UnidentifiedImageError":
            raise ValueError("not an image in a known format") from None
        raise ValueError(f"not a readable image ({type(e).__name__}: {e})") from None


def _reason(exc):
    """A decoder's message without torchvision's "function, source-file:line, " prefix."""
    text = str(exc)
    parts = text.split(", ", 2)
    return parts[2] if len(parts) == 3 and ".cpp:" in parts[1] else text


def exif_orientation(data):
    """The EXIF orientation tag (1-8) of an encoded JPEG (1D uint8 tensor), 1 when absent.

    Reads the marker segments up to the image data, without decoding anything."""
    head = data[:65536].numpy().tobytes()
    pos = 2
    while pos + 4 <= len(head) and head[pos] == 0xFF:
        marker, length = head[pos + 1], int.from_bytes(head[pos + 2:pos + 4], "big")
        if marker == 0xDA:  # start of scan: no EXIF before the image data
            break
        seg = head[pos + 4:pos + 2 + length]
        if marker == 0xE1 and seg[:6] == b"Exif\0\0":
            return _tiff_orientation(seg[6:])
        pos += 2 + length
    return 1


def _tiff_orientation(tiff):
    order = {b"II": "little", b"MM": "big"}.get(tiff[:2])
    if order is None or len(tiff) < 8:
        return 1
    ifd = int.from_bytes(tiff[4:8], order)
    count = int.from_bytes(tiff[ifd:ifd + 2], order) if ifd + 2 <= len(tiff) else 0
    for k in range(count):
        entry = tiff[ifd + 2 + 12 * k: ifd + 14 + 12 * k]
        if len(entry) == 12 and int.from_bytes(entry[:2], order) == 0x0112:
            value = int.from_bytes(entry[8:10], order)
            return value if 1 <= value <= 8 else 1
    return 1


def _has_end_marker(data):
    """True when a JPEG ends with its EOI marker (possibly followed by padding): truncated
    files don't, and nvJPEG would decode them silently where libjpeg reports them."""
    tail = data[-64:].numpy().tobytes()
    return b"\xff\xd9" in tail


def apply_orientation(chw, orientation):
    """Rotate/flip a CHW image as EXIF orientation 1-8 says, on whichever device it is."""
    if orientation in (5, 6, 7, 8):
        chw = chw.transpose(1, 2)
    flips = {2: (2,), 3: (1, 2), 4: (1,), 6: (2,), 7: (1, 2), 8: (1,)}.get(orientation, ())
    return chw.flip(flips) if flips else chw


@register("decoders.image", devices=("cpu", "mixed"), inputs=(1, 1), aliases=("ImageDecoder",),
          args=[Arg("output_type", IMAGE_TYPE, types.RGB, "Colour space of the output: RGB, BGR, GRAY, "
                    "YCbCr, or ANY_DATA (the channels as stored)."),
                Arg("dtype", DTYPE, types.UINT8, "Output type.", choices=(types.UINT8,)),
                Arg("adjust_orientation", BOOL, True, "Apply the EXIF orientation."),
                Arg("on_error", STR, "raise", "A file that can't be decoded: 'raise' an error naming it, or "
                    "'skip' it (the sample leaves the batch, with a warning counting skipped files).",
                    choices=("raise", "skip")),
                Arg("hw_decoder_load", FLOAT, 0.65, "Accepted for compatibility."),
                Arg("hybrid_huffman_threshold", INT, 1000000, "Accepted for compatibility."),
                Arg("device_memory_padding", INT, 16777216, "Accepted for compatibility."),
                Arg("host_memory_padding", INT, 8388608, "Accepted for compatibility."),
                Arg("device_memory_padding_jpeg2k", INT, 0, "Accepted for compatibility."),
                Arg("host_memory_padding_jpeg2k", INT, 0, "Accepted for compatibility."),
                Arg("preallocate_width_hint", INT, 0, "Accepted for compatibility."),
                Arg("preallocate_height_hint", INT, 0, "Accepted for compatibility."),
                Arg("affine", BOOL, True, "Accepted for compatibility."),
                Arg("split_stages", BOOL, False, "Accepted for compatibility."),
                Arg("use_chunk_allocator", BOOL, False, "Accepted for compatibility."),
                Arg("use_fast_idct", BOOL, False, "Accepted for compatibility."),
                Arg("jpeg_fancy_upsampling", BOOL, False, "Accepted for compatibility."),
                Arg("memory_stats", BOOL, False, "Accepted for compatibility."),
                Arg("cache_size", INT, 0, "Accepted for compatibility."),
                Arg("cache_threshold", INT, 0, "Accepted for compatibility."),
                Arg("cache_type", STR, "", "Accepted for compatibility."),
                Arg("cache_debug", BOOL, False, "Accepted for compatibility."),
                Arg("cache_batch_copy", BOOL, True, "Accepted for compatibility.")])
class ImageDecoder(Operator):
    """Decode JPEG, PNG and the other formats Pillow reads into HWC uint8 images,
    following EXIF orientation. 'mixed' decodes JPEGs in one batched nvJPEG call."""

    def __init__(self, spec):
        super().__init__(spec)
        if spec.device == "mixed" and _tvio is None:
            raise RuntimeError("decoders.image: device='mixed' needs torchvision (with CUDA) for nvJPEG "
                               "decoding, and it cannot be imported")
        self.output_type = spec.args["output_type"]
        self.skipped = 0

    def _fail(self, batch, i, exc):
        name = batch.source_info[i] if batch.source_info and batch.source_info[i] else f"sample {i}"
        return RuntimeError(f"decoders.image: cannot decode {name}: {_reason(exc)}")

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        data = batch.as_torch_list()
        for i, d in enumerate(data):
            if d.dim() != 1 or d.dtype != torch.uint8:
                raise self.error(f"sample {i}: expected encoded bytes (1D uint8), got {tuple(d.shape)} {d.dtype}",
                                 TypeError)
        errors = {}
        gpu = self.spec.device == "mixed"
        decoded = self._decode_mixed(data, errors, ctx) if gpu else self._decode_host(data, errors, ctx)
        if errors:
            if args["on_error"] == "raise":
                i = min(errors)
                raise self._fail(batch, i, errors[i]) from errors[i]
            self.skipped += len(errors)
            names = [batch.source_info[i] if batch.source_info else f"sample {i}" for i in sorted(errors)]
            ctx.warn(f"decoders.image: skipped {len(errors)} undecodable sample(s) in this batch "
                     f"({', '.join(names)}); {self.skipped} skipped so far")
            ctx.drop_samples(sorted(errors))
        keep = [i for i in range(len(data)) if i not in errors]
        info = [batch.source_info[i] for i in keep] if batch.source_info else None
        return [TensorList.make([decoded[i] for i in keep], "HWC", device="gpu" if gpu else "cpu",
                                source_info=info)]

    def _decode_one(self, d, errors, i):
        try:
            chw = decode_cpu(d, self.output_type, self.spec.args["adjust_orientation"])
            return _to_output_type(chw, self.output_type)
        except Exception as e:  # noqa: BLE001  (any decoder failure is reported per file)
            errors[i] = e
            return None

    def _decode_host(self, data, errors, ctx):
        return map_samples(lambda i, d: self._decode_one(d, errors, i), data, ctx)

    def _decode_mixed(self, data, errors, ctx):
        device = ctx.cuda_device
        out = [None] * len(data)
        # JPEGs go to nvJPEG; other formats, and truncated JPEGs (for libjpeg's error), to the CPU.
        jpegs = [i for i, d in enumerate(data)
                 if d.numel() >= 3 and d[:3].numpy().tobytes() == _JPEG_MAGIC and _has_end_marker(d)]
        if jpegs:
            mode = _tv_mode(self.output_type)
            try:
                images = _tvio.decode_jpeg([data[i] for i in jpegs], mode=mode, device=device)
            except RuntimeError:
                images = [None] * len(jpegs)  # one bad file fails the batch: decode one by one
                for k, i in enumerate(jpegs):
                    try:
                        images[k] = _tvio.decode_jpeg(data[i], mode=mode, device=device)
                    except RuntimeError:
                        pass  # not for nvJPEG (e.g. CMYK) or broken: the CPU path decides below
            adjust = self.spec.args["adjust_orientation"]
            orient = [exif_orientation(data[i]) if adjust else 1 for i in jpegs]
            for k, i in enumerate(jpegs):
                if images[k] is not None:
                    out[i] = _to_output_type(apply_orientation(images[k], orient[k]), self.output_type)
        rest = [i for i in range(len(data)) if out[i] is None]
        host = map_samples(lambda k, i: self._decode_one(data[i], errors, i), rest, ctx)
        for i, img in zip(rest, host):
            if img is not None:
                out[i] = img.pin_memory().to(device, non_blocking=True)
        return out
