"""Image decoding: `decoders.image` on the CPU (JPEGs by our libjpeg-turbo engine,
csrc/libjpeg/, where the extension was built with it; the rest, and JPEGs it refuses,
through torchvision's libjpeg-turbo/libpng/libwebp, PNGs once png.py has checked them,
Pillow for other formats) and 'mixed' (JPEGs on the GPU: our nvJPEG engine, csrc/nvjpeg/,
where the extension was built with it, else torchvision's batched nvJPEG)."""
import collections
import io
import threading
import warnings

import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, FLOAT, IMAGE_TYPE, INT, STR, Arg, register
from ..settings import MAX_IMAGE_PIXELS_VARIABLE, max_image_pixels
from ..kernels.io import EncodedFiles
from ..tensor_list import TensorList
from .base import BatchSpec, Operator, map_samples
from . import png
from .buffers import RecycledBuffers
from .windows import whole_images

# torchvision 0.29 deprecates its image codecs in favour of TorchCodec; they still work,
# and saying so on every decoded image helps nobody.
warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision",
                        category=DeprecationWarning)
try:
    import torchvision.io as _tvio
except Exception:  # noqa: BLE001  (a broken torchvision install raises all sorts of errors)
    _tvio = None

_warned_no_torchvision = threading.Event()
CPU_DECODER = "CPU, one image at a time (torchvision's libjpeg-turbo, libpng, libwebp; Pillow)"
_JPEG_MAGIC = b"\xff\xd8\xff"
# What torchvision decodes well; GIF (animated: 4D) and the rest go to Pillow.
_TV_FORMATS = (_JPEG_MAGIC, b"\x89PNG", b"RIFF")
# DALI's decoder converts to these (FLOAT16, 64-bit and BOOL fail there).
_DTYPES = (types.UINT8, types.UINT16, types.UINT32, types.INT8, types.INT16, types.INT32, types.FLOAT)


def _tv_mode(output_type, head=b""):
    m = _tvio.ImageReadMode
    if output_type == types.ANY_DATA:
        return m.UNCHANGED
    if output_type == types.GRAY and not head.startswith(b"RIFF"):  # WebP has no gray mode
        return m.GRAY
    return m.RGB


def _decode_pillow(data, output_type, orient):
    from PIL import Image, ImageOps

    img = Image.open(io.BytesIO(data.numpy().tobytes()))
    if orient:
        img = ImageOps.exif_transpose(img)
    if img.mode.startswith("I;16"):  # 16-bit gray (TIFF, PNM): keep the precision, as DALI does
        arr = np.asarray(img).astype(np.uint16)
    elif output_type == types.GRAY:
        arr = np.asarray(img.convert("L"))
    elif output_type == types.ANY_DATA and img.mode in ("L", "LA", "RGB", "RGBA"):
        arr = np.asarray(img)
    elif output_type == types.ANY_DATA and img.mode == "CMYK":  # four channels: RGB and an opaque alpha, as DALI
        arr = np.asarray(img.convert("RGBA"))
    else:
        arr = np.asarray(img.convert("RGB"))
    arr = arr[:, :, None] if arr.ndim == 2 else arr
    return torch.from_numpy(arr.copy()).permute(2, 0, 1)


def _jpeg_engine(device):
    """Our JPEG decoder's module for `device` ('mixed': torchdali.kernels.nvjpeg, 'cpu':
    torchdali.kernels.libjpeg) where the extension has it, else None (torchvision decodes)."""
    from ..kernels import libjpeg, nvjpeg  # loads the extension on first use

    engine = nvjpeg if device == "mixed" else libjpeg
    return engine if engine.available() else None


def decode_cpu(data, output_type, orient=True):
    """One encoded image (1D uint8 tensor) -> CHW uint8 (uint16 for 16-bit files), with
    the EXIF orientation applied if `orient`; channels roughly as `output_type` asks
    (`finish` makes them exact)."""
    if data.numel() == 0:
        raise ValueError("the file is empty")
    head = bytes(data[:4].tolist())
    if _tvio is not None and head.startswith(_TV_FORMATS):
        mode = _tv_mode(output_type, head)
        if head.startswith(png.SIGNATURE[:4]):
            header = png.check_png(memoryview(data.numpy()), max_image_pixels())
            if header.colour_type == png.PALETTE:  # its colours, not its indices, even for ANY_DATA (as DALI)
                mode = _tvio.ImageReadMode.RGB if output_type != types.GRAY else mode
        return _tvio.decode_image(data, mode=mode, apply_exif_orientation=orient)
    if _tvio is None and not _warned_no_torchvision.is_set():
        _warned_no_torchvision.set()
        warnings.warn("decoders.image: torchvision cannot be imported; decoding with Pillow (slower)")
    try:
        return _decode_pillow(data, output_type, orient)
    except Exception as e:  # noqa: BLE001  (Pillow raises many types for bad data)
        if type(e).__name__ == "UnidentifiedImageError":
            raise ValueError("not an image in a known format") from None
        raise ValueError(f"not a readable image ({type(e).__name__}: {e})") from None


# --- colour spaces and types, on whichever device the image is -------------------------

def _max_value(dtype):
    return 1.0 if dtype.is_floating_point else float(torch.iinfo(dtype).max)


def rgb_to_gray(chw):
    """BT.601 luma over the full range (DALI's gray), rounded, in the input's type."""
    r, g, b = chw.float().unbind(0)
    y = 0.299 * r + 0.587 * g + 0.114 * b
    return y.round_().clamp_(0, _max_value(chw.dtype)).to(chw.dtype)[None]


def rgb_to_ycbcr(chw):
    """ITU-R BT.601 YCbCr with head- and footroom (Y in 16..235 for uint8), as DALI
    decodes to; a gray pixel gets neutral chroma exactly. Integer types are rounded."""
    top = _max_value(chw.dtype)
    r, g, b = chw.float().unbind(0)
    y_off, c_off = (16.0, 128.0) if chw.dtype == torch.uint8 else (0.0625 * top, 0.5 * top)
    y = 0.257 * r + 0.504 * g + 0.098 * b + y_off
    cb = -0.148 * r - 0.291 * g + 0.439 * b + c_off
    cr = 0.439 * r - 0.368 * g - 0.071 * b + c_off
    neutral = (r == g) & (g == b)
    out = torch.stack([y, torch.where(neutral, c_off, cb), torch.where(neutral, c_off, cr)])
    return out.to(chw.dtype) if chw.dtype.is_floating_point else out.round_().clamp_(0, top).to(chw.dtype)


def convert_dtype(img, dtype):
    """Scale an image to `dtype`'s dynamic range (floats: 0..1), computing in float32 and
    rounding as DALI's normalising conversion does (bit-exact for 32-bit integers too)."""
    if img.dtype == dtype:
        return img
    x = img.float() * (1.0 / _max_value(img.dtype))
    if dtype.is_floating_point:
        return x.to(dtype)
    top = _max_value(dtype)
    return (x * top).double().round_().clamp_(0, top).to(dtype)


def finish(chw, output_type, dtype=torch.uint8):
    """Decoded CHW (RGB, gray or as stored) -> HWC in the requested colour space and type."""
    c = chw.shape[0]
    if c == 3 and output_type is types.RGB and chw.dtype == dtype:  # the usual case, at once
        return chw.permute(1, 2, 0).contiguous()
    if output_type == types.GRAY and c >= 3:
        chw = rgb_to_gray(chw[:3])
    elif output_type == types.GRAY and c == 2:
        chw = chw[:1]
    elif output_type in (types.RGB, types.BGR, types.YCbCr):
        chw = chw[:3] if c >= 3 else chw[:1].expand(3, -1, -1)
    if output_type == types.BGR:
        chw = chw.flip(0)
    elif output_type == types.YCbCr and dtype == torch.uint8 == chw.dtype:
        chw = rgb_to_ycbcr(chw)
    elif output_type == types.YCbCr:  # DALI converts the type first, then the colours
        chw = rgb_to_ycbcr(convert_dtype(chw, torch.float32))
    return convert_dtype(chw.permute(1, 2, 0), dtype).contiguous()


def apply_orientation(chw, orientation):
    """Rotate/flip a CHW image as EXIF orientation 1-8 says, on whichever device it is."""
    if orientation in (5, 6, 7, 8):
        chw = chw.transpose(1, 2)
    flips = {2: (2,), 3: (1, 2), 4: (1,), 6: (2,), 7: (1, 2), 8: (1,)}.get(orientation, ())
    return chw.flip(flips) if flips else chw


_COMPAT = "Accepted for compatibility (nvJPEG/cache tuning of DALI's own decoder); no effect here."


# decoders.image's arguments, shared by its fused variants (operators/decoder_crops.py).
DECODER_ARGS = [
    Arg("output_type", IMAGE_TYPE, types.RGB, "Colour space of the output: RGB, BGR, GRAY, "
        "YCbCr (ITU-R BT.601, Y in 16..235), or ANY_DATA (the channels as stored, alpha "
        "included; as in DALI, a palette image gives its colours as RGB, a CMYK TIFF RGB and an opaque alpha)."),
    Arg("dtype", DTYPE, types.UINT8, "Output type; values are scaled to its dynamic range "
        "(floats: 0..1). 16-bit images keep their precision until this conversion.",
        choices=_DTYPES),
    Arg("adjust_orientation", BOOL, True, "Apply the EXIF orientation."),
    Arg("jpeg_fancy_upsampling", BOOL, False, "'mixed': upsample JPEG chroma like the CPU "
        "decoder (libjpeg-turbo's fancy upsampling). The GPU decoders do not upsample that way, "
        "so chroma-subsampled JPEGs are then decoded on the CPU and copied."),
    Arg("on_error", STR, "raise", "A file that can't be decoded: 'raise' an error naming it, or "
        "'skip' it (the sample leaves the iteration, with a warning counting skipped files).",
        choices=("raise", "skip")),
    Arg("use_fast_idct", BOOL, False, "CPU: libjpeg-turbo's fast integer IDCT (a little faster, a "
        "little less accurate) in our CPU JPEG decoder; no effect where torchvision decodes."),
    Arg("hw_decoder_load", FLOAT, 1.0, "'mixed': the fraction of each batch's JPEGs given to the GPU's "
        "hardware decoder (A100, H100, H200 ...), the rest decoded on the hybrid path (Huffman on the "
        "CPU threads, IDCT on the GPU). DALI's default is 0.65; here the hardware decoder alone measured "
        "fastest (benchmarks/NOTES.md), so it takes the whole batch unless told otherwise.",
        check=lambda v: None if 0.0 <= v <= 1.0 else "must be in [0, 1]"),
    Arg("hybrid_huffman_threshold", INT, 1000000, _COMPAT),
    Arg("device_memory_padding", INT, 16777216, _COMPAT),
    Arg("host_memory_padding", INT, 8388608, _COMPAT),
    Arg("device_memory_padding_jpeg2k", INT, 0, _COMPAT),
    Arg("host_memory_padding_jpeg2k", INT, 0, _COMPAT),
    Arg("preallocate_width_hint", INT, 0, _COMPAT),
    Arg("preallocate_height_hint", INT, 0, _COMPAT),
    Arg("affine", BOOL, True, _COMPAT),
    Arg("cache_size", INT, 0, _COMPAT),
    Arg("cache_threshold", INT, 0, _COMPAT),
    Arg("cache_type", STR, "", _COMPAT),
    Arg("cache_debug", BOOL, False, _COMPAT),
    Arg("cache_batch_copy", BOOL, True, _COMPAT),
]
DECODER_DEPRECATED_ARGS = {"split_stages": None, "use_chunk_allocator": None, "memory_stats": None}


@register("decoders.image", devices=("cpu", "mixed"), inputs=(1, 1), aliases=("ImageDecoder",),
          deprecated_names=("image_decoder", "experimental.decoders.image"),
          deprecated_args=DECODER_DEPRECATED_ARGS, args=DECODER_ARGS)
class ImageDecoder(Operator):
    """Decode JPEG, PNG, WebP and the other formats Pillow reads (BMP, TIFF, PNM, ...)
    into HWC images, following EXIF orientation. JPEGs are decoded in one batched call
    (libjpeg-turbo on the CPU threads, or nvJPEG on the GPU for 'mixed'); other formats are
    decoded one by one on the CPU (and copied to the GPU for 'mixed')."""

    def __init__(self, spec):
        super().__init__(spec)
        self.engine = _jpeg_engine(spec.device)
        self.buffers = RecycledBuffers() if spec.device == "cpu" else None  # the CPU engine's output batches
        if spec.device == "mixed" and _tvio is None and (
                self.engine is None or spec.args["output_type"] in (types.GRAY, types.ANY_DATA)):
            raise RuntimeError(f"{spec.schema.name}: device='mixed' needs torchvision (with CUDA) for nvJPEG "
                               "decoding here, and it cannot be imported")
        self.output_type = spec.args["output_type"]
        self.dtype = types.to_torch_type(spec.args["dtype"])
        self.orient = spec.args["adjust_orientation"]
        self.skipped = 0  # running total of samples skipped with on_error="skip"
        self.bytes_planned = False  # the input is known to be 1D uint8 (plan)
        self.decoded_by = collections.Counter()  # images decoded so far, by decoder (statistics())
        # The GPU stage finishes some batches (finish_later) while the decode thread runs the next.
        self.counts_lock = threading.Lock()  # for `skipped` and `decoded_by`

    def plan(self, inputs):
        """Encoded bytes (1D uint8, as far as known at build) in, HWC images of `dtype` out."""
        spec = inputs[0]
        if (spec.ndim is not None and spec.ndim != 1) or (spec.dtype is not None and spec.dtype != torch.uint8):
            raise self.error(f"expected encoded bytes (1D uint8) as input, got {spec.ndim}D {spec.dtype} samples",
                             TypeError)
        self.bytes_planned = spec.ndim == 1 and spec.dtype == torch.uint8  # no per-sample check then
        device = "gpu" if self.spec.device == "mixed" else "cpu"
        return [BatchSpec(device, self.dtype, 3, "HWC")], self.run

    @staticmethod
    def _name(batch, i):
        return batch.source_info[i] if batch.source_info and batch.source_info[i] else f"sample {i}"

    def _fail(self, batch, i, exc):
        file = batch.source_info[i] if batch.source_info and batch.source_info[i] else None
        return self.error(f"cannot decode {self._name(batch, i)}: {_reason(exc)}", sample=i, file=file)

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        data = self.encoded(batch)
        errors = {}
        return [self.settle(batch, self.decode(data, errors, ctx, batch), errors, args, ctx)]

    def encoded(self, batch):
        """The batch's files as EncodedFiles (no copy for a batch read by readers.file); a
        TypeError names a sample that is not encoded bytes."""
        if not self.bytes_planned:
            for i, d in enumerate(batch.as_torch_list()):
                if d.dim() != 1 or d.dtype != torch.uint8:
                    raise self.error(f"sample {i}: expected encoded bytes (1D uint8), got {tuple(d.shape)} "
                                     f"{d.dtype}", TypeError)
        if not len(batch):
            return EncodedFiles.of([])
        flat, shapes = batch.flat()  # a decoder's input is on the CPU
        return EncodedFiles.back_to_back(flat, shapes[:, 0])

    def decode(self, data, errors, ctx, batch=None):
        """The decoded images (HWC, on the operator's device), None where decoding failed,
        with the exception in `errors[i]`. `batch`: the operator's input, where `data` is all
        of it and the images are its output as they come: the usual batch then comes as
        our engine's one buffer (a TensorList; see decode_windows)."""
        if self.spec.device == "mixed" or self.decodes_windows:
            return self._decode_batch(data, errors, ctx, batch)
        from ..kernels.io import JPEG_FIELDS, jpeg_headers

        out = [None] * len(data)
        oversized = self._refuse_oversized(dict(zip(JPEG_FIELDS, jpeg_headers(data).numpy().T)), errors)
        self._decode_rest(data, [i for i in range(len(data)) if i not in oversized], out, errors, ctx)
        return out

    def statistics(self):
        """How many images each decoder has decoded so far: the `decoder_backend` entry of
        Pipeline.executor_statistics()."""
        with self.counts_lock:
            counts = [(name, n) for name, n in self.decoded_by.most_common() if n]
        return {"decoder_backend": ", ".join(f"{name}: {n}" for name, n in counts)} if counts else {}

    def settle(self, batch, images, errors, args, ctx):
        """The output batch of `images` (one per input sample, or a dense tensor when all
        were decoded): an error for the first sample in `errors`, or with on_error="skip" the
        batch without them (dropped from the whole iteration, with a warning counting them)."""
        if isinstance(images, TensorList):  # every file decoded into one buffer
            images.source_info = batch.source_info
            return images
        device = "gpu" if self.spec.device == "mixed" else "cpu"
        if isinstance(images, torch.Tensor) or not errors:
            return TensorList.make(images, "HWC", device=device, source_info=batch.source_info)
        self.skip(batch, errors, ctx)
        keep = [i for i in range(len(images)) if i not in errors]
        info = [batch.source_info[i] for i in keep] if batch.source_info else None
        return TensorList.make([images[i] for i in keep], "HWC", device=device, source_info=info)

    def skip(self, batch, errors, ctx):
        """The samples of `errors` leave the iteration (on_error="skip", with a warning
        counting them), or the first one's error is raised (on_error="raise")."""
        if self.spec.args["on_error"] == "raise":
            i = min(errors)
            raise self._fail(batch, i, errors[i]) from errors[i]
        with self.counts_lock:
            self.skipped += len(errors)
            skipped = self.skipped
        names = [self._name(batch, i) for i in sorted(errors)]
        ctx.warn(f"{self.name}: skipped {len(errors)} undecodable sample(s) in this batch "
                 f"({', '.join(names)}); {skipped} skipped so far")
        ctx.drop_samples(sorted(errors))

    def count(self, decoder, n):
        """n more images decoded by `decoder` (statistics())."""
        with self.counts_lock:
            self.decoded_by[decoder] += n

    def decode_one(self, d, errors, i):
        """One file decoded on the CPU as this operator outputs it; None if it fails, with the
        exception in errors[i]."""
        try:
            return finish(decode_cpu(d, self.output_type, self.orient), self.output_type, self.dtype)
        except Exception as e:  # noqa: BLE001  (any decoder failure is reported per file)
            errors[i] = e
            return None

    def batched_jpegs(self, data, errors=None):
        """The files' JPEG headers (JPEG_FIELDS -> one array each, one C++ call for the batch)
        and which files go to the batched decoder: JPEGs that end with their EOI marker
        (truncated ones go one by one to torchvision, for libjpeg's error) and, on the GPU
        with jpeg_fancy_upsampling, are not chroma subsampled. Other formats are decoded one
        by one on the CPU. A JPEG whose header claims more than max_image_pixels() goes to
        neither: with `errors`, its error is there."""
        from ..kernels.io import JPEG_FIELDS, jpeg_headers

        head = dict(zip(JPEG_FIELDS, jpeg_headers(data).numpy().T))
        fancy = self.spec.device == "mixed" and bool(self.spec.args["jpeg_fancy_upsampling"])
        batched = (head["is_jpeg"] == 1) & (head["complete"] == 1) & ~((head["subsampled"] == 1) & fancy)
        if errors is not None:
            batched[self._refuse_oversized(head, errors)] = False
        return head, batched

    @staticmethod
    def _refuse_oversized(head, errors):
        """The JPEGs whose headers claim more than max_image_pixels(), with their errors."""
        limit = max_image_pixels()
        over = np.flatnonzero((head["is_jpeg"] == 1) & (head["height"] * head["width"] > limit)).tolist()
        for i in over:
            errors[i] = ValueError(f"its JPEG header claims {head['width'][i]} x {head['height'][i]} pixels, "
                                   f"more than the {limit:,} allowed (set {MAX_IMAGE_PIXELS_VARIABLE} to allow more)")
        return over

    @property
    def decodes_windows(self):
        """Whether our engine decodes this operator's JPEGs, so it can decode windows only
        (GRAY and ANY_DATA, which keep a grayscale file's one channel, go through torchvision)."""
        return self.engine is not None and self.output_type not in (types.GRAY, types.ANY_DATA)

    def _decode_batch(self, data, errors, ctx, batch=None):
        """decode() with the JPEGs decoded in one batched call (batched_jpegs)."""
        out = [None] * len(data)
        oversized = {}
        head, batched = self.batched_jpegs(data, oversized)
        errors.update(oversized)
        index = np.flatnonzero(batched)
        if len(index):
            sizes = np.stack([head["height"], head["width"]], axis=1)[index]
            orientation = head["orientation"][index] if self.orient else np.ones(len(index), np.int64)
            as_is = len(index) == len(data) and self.plain_rgb and (orientation == 1).all()
            decoded, refused = self._decode_jpegs(data.subset(index), sizes, ctx, batch if as_is else None)
            if isinstance(decoded, TensorList):
                return decoded
            for k in (np.flatnonzero(orientation != 1) if self.plain_rgb else range(len(index))):
                if decoded[k] is not None:  # oriented or converted; the usual case stays as it is
                    decoded[k] = self.finish_rgb(decoded[k], int(orientation[k]))
            place(out, index, decoded)
            batched[index[refused]] = False
        self._decode_rest(data, [i for i in np.flatnonzero(~batched).tolist() if i not in oversized], out, errors, ctx)
        return out

    def _decode_rest(self, data, rest, out, errors, ctx):
        """The files `rest`, which no batched decoder decoded, decoded one by one on the CPU
        (across the pipeline's threads) into out (copied to the GPU for 'mixed')."""
        failed = len(errors)
        host = map_samples(lambda k, i: self.decode_one(data.file(i), errors, i), rest, ctx)
        self.count(CPU_DECODER, len(rest) - (len(errors) - failed))
        for i, img in zip(rest, host):
            if img is not None:
                out[i] = self.on_device(img, ctx)

    def on_device(self, img, ctx):
        """An image decoded on the CPU (or a view of one), on this operator's output device:
        copied to the GPU for 'mixed', made contiguous on the CPU."""
        if self.spec.device == "mixed":
            return img.pin_memory().to(cuda_device(ctx), non_blocking=True)
        return img.contiguous()

    @property
    def plain_rgb(self):
        """Whether this operator outputs what our engines decode to: RGB uint8."""
        return self.output_type == types.RGB and self.dtype == torch.uint8

    def finish_rgb(self, img, orientation=1):
        """An engine-decoded HWC RGB uint8 image as this operator outputs it: the usual case
        as it is, the rest oriented and converted."""
        if orientation == 1 and self.plain_rgb:
            return img
        return finish(apply_orientation(img.permute(2, 0, 1), orientation), self.output_type, self.dtype)

    def decode_windows(self, data, windows, ctx, batch=None):
        """Our engine's decode of only windows[i] = (y, x, h, w) of each JPEG of `data`: an
        HWC batch in one buffer (TensorList.from_flat), and the indices of the files the
        engine refused (their samples unwritten).

        `batch`: the operator's input, given where `data` is all of it and the caller outputs
        the decoded batch as it is when nothing is refused. On the GPU the hardware decoder's
        share may then be left to finish in the GPU stage (RunContext.finish_later): the
        decode thread goes on with the next batch while the hardware decodes this one."""
        windows = np.ascontiguousarray(windows, np.int64)
        shapes = np.concatenate([windows[:, 2:], np.full((len(windows), 1), 3)], axis=1)
        if self.spec.device == "cpu":
            out = self.buffers.take(self.engine.window_bytes(windows))
            flat, status = self.engine.decode_jpegs(data, torch.from_numpy(windows), self.spec.args["use_fast_idct"],
                                                    ctx.num_threads, out)
            return TensorList.from_flat(flat, shapes, "HWC"), self.refused(status.numpy())
        flat, status, pending = self.engine.decode_jpegs_start(data, torch.from_numpy(windows),
                                                               self.spec.args["hw_decoder_load"], cuda_device(ctx))
        decoded = TensorList.from_flat(flat, shapes, "HWC")
        if (batch is None or (status.numpy() > 0).any()
                or not ctx.finish_later(lambda c: self._finish_late(pending, decoded, data, windows, batch, c))):
            return decoded, self.refused(self.engine.decode_jpegs_finish(pending).numpy())
        return decoded, np.zeros(0, np.int64)

    def refused(self, status):
        """The files our engine refused, by its `status`; the decoded ones counted."""
        for name, code in self.engine.DECODERS.items():
            self.count(name, int((status == code).sum()))
        return np.flatnonzero(status > 0)

    def _finish_late(self, pending, decoded, data, windows, batch, ctx):
        """decode_windows' batch completed in the GPU stage: a file the engine refused only now
        (its hardware decoder failed on the batch, and the hybrid path refused the file) is
        decoded on the CPU into its place, or fails as on_error says."""
        errors = {}
        for i in self.refused(self.engine.decode_jpegs_finish(pending).numpy()).tolist():
            img = self.decode_one(data.file(i), errors, i)
            if img is not None:
                self.count(CPU_DECODER, 1)
                y, x, h, w = windows[i].tolist()
                decoded.as_torch_list()[i].copy_(self.on_device(img[y:y + h, x:x + w], ctx))
        if errors:
            self.skip(batch, errors, ctx)

    @staticmethod
    def but_refused(decoded, refused):
        """decode_windows' batch as a list of images, None for the refused files."""
        images = decoded.as_torch_list()
        for k in refused.tolist():
            images[k] = None
        return images

    def _decode_jpegs(self, encoded, sizes, ctx, batch=None):
        """JPEGs decoded whole to HWC RGB uint8 on the operator's device (None where the
        decoder refuses one, e.g. CMYK or a broken file: torchvision decodes it or reports the
        error), and the indices of the refused ones: our engine (see decodes_windows), else
        torchvision's batched nvJPEG. With `batch` (see decode_windows), a batch our engine
        decodes fully comes as its one buffer, a TensorList."""
        if self.decodes_windows:
            decoded, refused = self.decode_windows(encoded, whole_images(sizes), ctx, batch)
            return (decoded if batch is not None and not len(refused) else self.but_refused(decoded, refused)), refused
        decoded = self._nvjpeg(encoded, cuda_device(ctx))
        self.count("torchvision nvJPEG", sum(img is not None for img in decoded))
        # 3-channel images go CHW -> HWC in one kernel call, the others (GRAY, ANY_DATA) as views.
        rgb = [k for k, img in enumerate(decoded) if img is not None and img.shape[0] == 3]
        hwc = [None if img is None else img.permute(1, 2, 0) for img in decoded]
        if rgb:
            from ..kernels.geometry import transpose
            for k, img in zip(rgb, transpose([decoded[k] for k in rgb], [1, 2, 0])):
                hwc[k] = img
        return hwc, np.array([k for k, img in enumerate(hwc) if img is None], np.int64)

    def _nvjpeg(self, encoded, device):
        """torchvision's batched GPU decode (CHW); None for the images nvJPEG refuses."""
        mode = _tv_mode(self.output_type)
        encoded = [encoded.file(i) for i in range(len(encoded))]
        try:
            return _tvio.decode_jpeg(encoded, mode=mode, device=device)
        except RuntimeError:  # one bad file fails the batch: decode one by one
            images = []
            for d in encoded:
                try:
                    images.append(_tvio.decode_jpeg(d, mode=mode, device=device))
                except RuntimeError:
                    images.append(None)  # the CPU path decodes it or reports the error
            return images


def place(out, index, values):
    """out[index[k]] = values[k] (one slice assignment when `index` is all of `out`)."""
    if len(index) == len(out):
        out[:] = values
    else:
        for i, v in zip(index.tolist(), values):
            out[i] = v


def cuda_device(ctx):
    """The pipeline's CUDA device."""
    return ctx.cuda_device if ctx.cuda_device is not None else torch.device("cuda")


def _reason(exc):
    """A decoder's message without torchvision's "function, source-file:line, " prefix."""
    text = str(exc)
    parts = text.split(", ", 2)
    return parts[2] if len(parts) == 3 and ".cpp:" in parts[1] else text
