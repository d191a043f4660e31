"""readers.sequence: sequences of frames from `file_root`, whose sub-folders each hold one
stream's frames as image files, decoded into one FHWC uint8 tensor per sample.

The sequences are the entries of readers.file's loader, so sharding, shuffling, padding and
checkpoints are FileReader's. A batch's frames are read in one call and decoded in one call
of decoders.image's CPU decoder (JPEGs batched by our engine where it is built)."""
import dataclasses
import os

import numpy as np
import torch

from .. import storage, types
from ..kernels.io import EncodedFiles
from ..schema import IMAGE_TYPE, INT, REQUIRED, STR, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec
from .decoders import ImageDecoder, _reason
from .readers import _DEFAULT_FILTERS, LOADER_ARGS, FileReader, _at_least, _matcher, list_url

# DALI's image extensions: readers.file's default filters without the audio formats.
_IMAGE_FILTERS = [f for f in _DEFAULT_FILTERS if f not in ("*.flac", "*.ogg", "*.wav")]


def _streams(op, root):
    """DALI's streams: per sub-folder of `root` holding frames, the relative names of its image
    files (by extension, in any case), sub-folders and files in byte order. Hidden names are
    left out, as DALI's glob('*/*') leaves them; files in `root` itself are not frames."""
    keep = _matcher(_IMAGE_FILTERS, case_sensitive=False)
    frames = {}
    if storage.is_url(root):
        for parts in list_url(op, root):
            if len(parts) == 2 and not parts[0].startswith(".") and not parts[1].startswith(".") and keep(parts[1]):
                frames.setdefault(parts[0], []).append(parts[1])
    else:
        if not os.path.isdir(root):
            raise op.error(f"file_root '{root}' is not a directory (it does not exist or cannot be opened)",
                           ValueError)
        try:
            with os.scandir(root) as it:
                subdirs = [e.name for e in it if e.is_dir() and not e.name.startswith(".")]
            for sub in subdirs:
                with os.scandir(os.path.join(root, sub)) as it:
                    frames[sub] = [e.name for e in it if e.is_file() and not e.name.startswith(".") and keep(e.name)]
        except OSError as e:
            raise op.error(f"cannot list '{e.filename}' under file_root: {e.strerror}") from None
    # DALI sorts the full paths: a stream 'a.b' ('.' < '/') comes before a stream 'a'.
    return [[f"{sub}/{name}" for name in sorted(names, key=os.fsencode)]
            for sub, names in sorted(frames.items(), key=lambda kv: os.fsencode(kv[0] + "/")) if names]


def _sequences(lengths, length, step, stride):
    """[sequences, length] indices into the streams' frames laid end to end: in each stream,
    one sequence starting every `step` frames, its frames `stride` apart, as long as it fits."""
    rows = []
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    for start, n in zip(first.tolist(), lengths):
        starts = np.arange(0, max(n - (length - 1) * stride, 0), step, dtype=np.int64)
        rows.append(start + starts[:, None] + stride * np.arange(length, dtype=np.int64))
    return np.concatenate(rows) if rows else np.zeros((0, length), np.int64)


@register(
    "readers.sequence", aliases=("SequenceReader",), deprecated_names=("sequence_reader",),
    deprecated_use="fn.external_source",
    args=[
        Arg("file_root", STR, REQUIRED, "Folder with one sub-folder per stream, each holding the stream's frames "
            "as image files, in the order of their names (may be a URL that fsspec lists and reads)."),
        Arg("sequence_length", INT, REQUIRED, "Frames per sequence.", check=_at_least(1)),
        Arg("step", INT, 1, "Frames between the first frames of consecutive sequences of a stream.",
            check=_at_least(1)),
        Arg("stride", INT, 1, "Frames between consecutive frames of a sequence.", check=_at_least(1)),
        Arg("image_type", IMAGE_TYPE, types.RGB, "Colour space of the frames: RGB, BGR, GRAY or ANY_DATA (the "
            "channels as stored).", choices=(types.RGB, types.BGR, types.GRAY, types.ANY_DATA)),
    ] + [FileReader.schema.args[name] for name in LOADER_ARGS])
class SequenceReader(FileReader):
    """Reads sequences of `sequence_length` frames from the streams of `file_root` (one sub-folder
    each), decoded into one uint8 FHWC tensor per sample (no labels); a sequence never crosses
    a stream's end, and a stream shorter than a sequence gives none. Shards, pads and shuffles
    the sequences as readers.file does its files; the frames of a sequence must share one shape.
    DALI 2.4 deprecates it (for external_source or its video readers), and so its fn names warn here."""

    def __init__(self, spec):
        super().__init__(spec)
        decoding = ImageDecoder.schema
        self.decoder = ImageDecoder(dataclasses.replace(
            spec, schema=decoding, args=decoding.check_args({"output_type": spec.args["image_type"]}),
            arg_input_names=(), num_outputs=1))

    def _check_args(self, a):
        if not a["file_root"]:
            raise self.error("file_root is empty; give the folder of the streams", ValueError)

    def _list_entries(self):
        """The sequences: (first frame, index) pairs; their frames' names and rows of indices
        kept for `_prepare`."""
        a = self.spec.args
        root, length, stride = a["file_root"], a["sequence_length"], a["stride"]
        streams = _streams(self, root)
        if not streams:
            raise self.error(f"no image files found in the sub-folders of file_root '{root}'", ValueError)
        self.frame_names = [name for stream in streams for name in stream]
        self.sequences = _sequences([len(s) for s in streams], length, a["step"], stride)
        if not len(self.sequences):
            longest = max(len(s) for s in streams)
            raise self.error(f"no stream of file_root '{root}' is long enough for a sequence of {length} frames "
                             f"{stride} apart ({(length - 1) * stride + 1} frames): the longest has {longest}",
                             ValueError)
        if self.num_shards > len(self.sequences):
            raise self.error(f"num_shards = {self.num_shards} is larger than the number of sequences "
                             f"({len(self.sequences)})", ValueError)
        return root, [(self.frame_names[row[0]], k) for k, row in enumerate(self.sequences.tolist())]

    def _prepare(self):
        super()._prepare()
        # FileReader._read reads entries by index into names and paths: here, the frames'.
        self.names = self.frame_names
        self.paths = [storage.join(self.root, name) for name in self.frame_names]

    def plan(self, inputs):
        """One uint8 FHWC sequence per sample."""
        return [BatchSpec("cpu", torch.uint8, 4, "FHWC")], self.run

    def run(self, inputs, args, ctx):
        if self.entries is None:
            self._prepare()
        rows = self.sequences[self._next_batch(ctx.batch_size)]
        flat, shapes = self._decode(self._read(rows.reshape(-1).tolist()), rows, ctx)
        return [TensorList.from_flat(flat, self._sequence_shapes(rows, shapes), "FHWC", device="cpu")]

    def _sequence_shapes(self, rows, shapes):
        """The FHWC shapes of the sequences `rows`, from their frames' `shapes`; an error naming
        the first frame whose shape differs from its sequence's first."""
        shapes = shapes.reshape(len(rows), rows.shape[1], -1)
        differ = (shapes != shapes[:, :1]).any(axis=2)
        if differ.any():
            s, f = (int(x) for x in np.argwhere(differ)[0])
            path = self.paths[rows[s, f]]
            raise self.error(f"the frames of a sequence must have one shape: '{path}' is {tuple(shapes[s, f].tolist())}"
                             f", '{self.paths[rows[s, 0]]}' {tuple(shapes[s, 0].tolist())}", sample=s, file=path)
        return np.concatenate([np.full((len(rows), 1), rows.shape[1], np.int64), shapes[:, 0]], axis=1)

    def _decode(self, encoded, rows, ctx):
        """The batch's frames (`encoded`, in the order of `rows`) decoded in one call: one
        buffer of the HWC frames back to back and their shapes [frames, 3]; an error naming
        the first frame that cannot be decoded."""
        errors = {}
        images = self.decoder.decode(EncodedFiles.back_to_back(*encoded.flat()), errors, ctx, encoded)
        if errors:
            i = min(errors)
            s, f = divmod(i, rows.shape[1])
            path = self.paths[rows[s, f]]
            raise self.error(f"cannot decode frame {f} of sample {s}, '{path}': {_reason(errors[i])}",
                             sample=s, file=path) from errors[i]
        if isinstance(images, TensorList):  # our engine's one buffer
            return images.flat()
        return torch.cat([im.reshape(-1) for im in images]), np.array([im.shape for im in images], np.int64)

    def statistics(self):
        """What decoded the frames: Pipeline.executor_statistics()'s `decoder_backend`."""
        return self.decoder.statistics()
