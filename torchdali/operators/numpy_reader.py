"""readers.numpy: NumPy .npy files from `file_root`, a `file_list` or `files`, whole or a
region of interest (ROI) of each, in readers.file's order: sharding, shuffling, padding and
checkpoints are FileReader's.

Each file's header is read first (or kept, with cache_header_information); then an ROI
reads only the bytes from its first to its last element in the file's storage order, so a
window along the outer axes of a C-order array reads just its rows, straight into the output
where the file holds them as they come out. Fortran-order arrays come out in C order, as DALI
gives them (the format itself: file_io.py)."""
import os

import numpy as np
import torch

from .. import storage
from ..errors import OperatorError
from ..schema import BOOL, FLOAT, FLOATS, INTS, STR, STRS, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, map_samples
from .file_io import byte_range, convert_sat, copy_window, header_length, parse_header, read_into, read_path
from .readers import LOADER_ARGS, FileReader, _matcher, file_list_root, list_url, read_file_list
from .slicing import SliceWindows

_HEADER_BYTES = 256  # read first for a header (numpy.save writes 128 bytes for up to ~10 dims)


def _placements(anchor, extent, shapes):
    """Per sample, where its window goes, computed for the whole batch at once: (begin, end) in
    the flat output, the output shape, the part inside the array (lo, hi) and its place in the
    output (slices; None where nothing is inside), and whether the rest is padding."""
    lo = np.clip(anchor, 0, shapes)
    hi = np.maximum(np.clip(anchor + extent, 0, shapes), lo)
    padded = ((lo != anchor) | (hi != anchor + extent)).any(axis=1)
    empty = (hi == lo).any(axis=1)
    sizes = extent.prod(axis=1)
    ends = np.cumsum(sizes)
    rows = zip((ends - sizes).tolist(), ends.tolist(), extent.tolist(), lo.tolist(), hi.tolist(),
               (lo - anchor).tolist(), (hi - anchor).tolist(), padded.tolist(), empty.tolist())
    return [(b, e, shape, low, high, None if nothing else tuple(slice(x, y) for x, y in zip(a, z)), pad)
            for b, e, shape, low, high, a, z, pad, nothing in rows]


def _discover(op, root, pattern):
    """DALI's traversal: files matching `pattern` (case-sensitive) in `root` itself ('./name')
    and in its immediate sub-folders ('sub/name'), the sub-folders (symlinks followed) in byte
    order after the root, files in byte order within each."""
    keep = _matcher([pattern], case_sensitive=True)
    if storage.is_url(root):
        return _discover_url(op, root, keep)
    if not os.path.isdir(root):
        raise op.error(f"file_root '{root}' is not a directory (it does not exist or cannot be opened)", ValueError)
    names = []
    try:
        with os.scandir(root) as it:
            subdirs = sorted((e.name for e in it if e.is_dir()), key=os.fsencode)
        for sub in ["."] + subdirs:
            with os.scandir(os.path.join(root, sub)) as it:
                files = [e.name for e in it if (e.is_file(follow_symlinks=False) or e.is_symlink()) and keep(e.name)]
            names += [f"{sub}/{name}" for name in sorted(files, key=os.fsencode)]
    except OSError as e:
        raise op.error(f"cannot list '{e.filename}' under file_root: {e.strerror}") from None
    return names


def _discover_url(op, root, keep):
    """`_discover` under a URL, from one recursive listing; the root's own files are named
    without DALI's './' (a URL has no '.' folder)."""
    listed = list_url(op, root)
    chosen = [parts for parts in listed if len(parts) <= 2 and keep(parts[-1])]
    chosen.sort(key=lambda parts: (len(parts), [os.fsencode(p) for p in parts]))
    return ["/".join(parts) for parts in chosen]


def _list_file(op, path):
    """The names of a file list: one a line, as written (spaces kept); empty lines skipped."""
    return [os.fsdecode(line) for line in read_file_list(op, path).split(b"\n") if line]


# The slice arguments under readers.numpy's names.
_ROI_NAMES = {"start": "roi_start", "rel_start": "rel_roi_start", "end": "roi_end", "rel_end": "rel_roi_end",
              "shape": "roi_shape", "rel_shape": "rel_roi_shape", "axes": "roi_axes"}
# DALI takes the policy in any case, and "constant" for "pad".
_POLICIES = {"error": "error", "trim_to_shape": "trim_to_shape", "pad": "pad", "constant": "pad"}
_LOADER_ARGS = LOADER_ARGS + ("shuffle_after_epoch", "shuffle_after_epoch_seed")
# The arguments that list the files (experimental.readers.fits takes them too).
FILE_ARGS = ("file_root", "file_filter", "file_list", "files")


@register(
    "readers.numpy", devices=("cpu", "gpu"), aliases=("NumpyReader",), deprecated_names=("numpy_reader",),
    args=[
        Arg("file_root", STR, None, "Folder of the files: those matching `file_filter` in it and in its "
            "immediate sub-folders, or the root of the names of `file_list` or `files`."),
        Arg("file_filter", STR, "*.npy", "Glob selecting the files under `file_root` (case-sensitive)."),
        Arg("file_list", STR, None, "Text file naming one file a line, relative to `file_root` or, without "
            "it, to the list's folder."),
        Arg("files", STRS, None, "File paths to read (relative to `file_root` if given)."),
        Arg("roi_start", INTS, None, "Start of the region of interest, per axis of `roi_axes`.", per_sample=True),
        Arg("rel_roi_start", FLOATS, None, "Start of the region of interest, as fractions of the extents.",
            per_sample=True),
        Arg("roi_end", INTS, None, "End of the region of interest (exclusive).", per_sample=True),
        Arg("rel_roi_end", FLOATS, None, "End of the region of interest, as fractions of the extents.",
            per_sample=True),
        Arg("roi_shape", INTS, None, "Extents of the region of interest.", per_sample=True),
        Arg("rel_roi_shape", FLOATS, None, "Extents of the region of interest, as fractions of the array's.",
            per_sample=True),
        Arg("roi_axes", INTS, [], "Axes the ROI arguments refer to (negative count from the back; empty: all)."),
        Arg("out_of_bounds_policy", STR, "error", "An ROI outside the array: 'error', 'trim_to_shape' (cut to "
            "the array) or 'pad' (with fill_value).",
            check=lambda v: None if v.lower() in _POLICIES else "is not one of ['error', 'trim_to_shape', 'pad']"),
        Arg("fill_value", FLOAT, 0.0, "Padding value of out_of_bounds_policy='pad' (converted to the array's "
            "type as DALI does: rounded and saturated)."),
        Arg("use_o_direct", BOOL, False, "Accepted for compatibility (needs dont_use_mmap=True, as in DALI)."),
        Arg("cache_header_information", BOOL, False, "Keep each file's header after its first read (ROI reads "
            "then read only the window)."),
        Arg("register_buffers", BOOL, True, "Accepted for compatibility."),
    ] + [FileReader.schema.args[name] for name in _LOADER_ARGS])
class NumpyReader(FileReader):
    """Reads NumPy .npy arrays, whole or a region of interest of each, as arrays of the files'
    type and shape (C order); shards, pads and shuffles as readers.file does."""

    def __init__(self, spec):
        super().__init__(spec)
        a = spec.args
        self.policy = _POLICIES[a["out_of_bounds_policy"].lower()]
        roi = [n for n in _ROI_NAMES.values() if n != "roi_axes"]
        self.windows = SliceWindows(self, _ROI_NAMES) if any(
            n in spec.arg_input_names or a[n] is not None for n in roi) else None
        self.headers = {} if a["cache_header_information"] else None

    def _check_args(self, a):
        if a["file_root"] is None and a["files"] is None and a["file_list"] is None:
            raise self.error("give file_root, file_list or files", ValueError)
        if a["files"] is not None and a["file_list"] is not None:
            raise self.error("file paths come from files or from file_list, not both", ValueError)
        if a["file_list"] == "":
            raise self.error("file_list cannot be an empty string", ValueError)
        if a["use_o_direct"] and not a["dont_use_mmap"]:
            raise self.error("use_o_direct needs dont_use_mmap=True", ValueError)

    def _list_entries(self):
        a = self.spec.args
        root = a["file_root"]
        if a["files"] is not None:
            names = a["files"]
        elif a["file_list"] is not None:
            root = file_list_root(a["file_list"]) if root is None else root
            names = _list_file(self, a["file_list"])
        else:
            names = _discover(self, root, a["file_filter"])
        if not names:
            where = f"'{a['file_list']}'" if a["file_list"] else f"'{root}' matching '{a['file_filter']}'"
            raise self.error(f"no files found in {where}", ValueError)
        return root, [(name, 0) for name in names]

    def plan(self, inputs):
        """Arrays of the files' type and rank (known from the data), no layout."""
        return [BatchSpec("gpu" if self.spec.device == "gpu" else "cpu", None, None, "")], self.run

    def run(self, inputs, args, ctx):
        if self.entries is None:
            self._prepare()
        picks = self._next_batch(ctx.batch_size)
        paths = [self.paths[e] for e in picks]
        headers = map_samples(lambda i, e: self._header(e), picks, ctx)
        shapes, dtype = self._agree(headers, paths)
        anchor, extent = (np.zeros_like(shapes), shapes) if self.windows is None else \
            self._windows(args, shapes, paths)
        places = _placements(anchor, extent, shapes)
        gpu = self.spec.device == "gpu"
        out = torch.empty(int(extent.prod(axis=1).sum()), dtype=dtype, pin_memory=gpu)
        flat, fill = out.numpy(), None
        if self.policy == "pad":
            fill = convert_sat(torch.tensor([self.spec.args["fill_value"]], dtype=torch.float32), dtype).item()

        def copy(i, path):
            begin, end, shape, lo, hi, inside, padded = places[i]
            dst = flat[begin:end].reshape(shape)
            if padded:
                dst.fill(fill)
            if inside is None:
                return
            h, window = headers[i], dst[inside] if inside else dst  # a 0-D array's [()] is no view
            start, length = byte_range(h, lo, hi)
            if length == window.nbytes and window.flags.c_contiguous and h.dtype.isnative and \
                    (not h.fortran or len(lo) < 2):  # the file holds the window's bytes as they come out
                read_into(self, path, start, window)
            else:
                copy_window(h, self._read_range(path, start, length), lo, hi, window)

        map_samples(copy, paths, ctx)
        if gpu:
            out = out.to(ctx.cuda_device, non_blocking=True)
        names = [self.names[e] for e in picks]
        return [TensorList.from_flat(out, extent, "", device="gpu" if gpu else "cpu", source_info=names)]

    def _read_range(self, path, start, length):
        """`length` bytes of `path` from `start`, all of them (else an error: the file is truncated)."""
        data = read_path(self, path, start, length)
        if len(data) < length:
            raise self.error(f"'{path}' is truncated: {len(data)} of the {length} bytes at offset {start} "
                             "that its header announces", file=path)
        return data

    def _header(self, entry):
        """The header of entry `entry`, read (and kept with cache_header_information)."""
        if self.headers is not None and entry in self.headers:
            return self.headers[entry]
        path = self.paths[entry]
        data = read_path(self, path, 0, _HEADER_BYTES)
        try:
            length = header_length(data)
        except ValueError as e:
            raise self.error(f"'{path}': {e}", file=path) from None
        if length > len(data):
            data = read_path(self, path, 0, length)
        try:
            h = parse_header(data)
        except ValueError as e:
            raise self.error(f"'{path}': {e}", file=path) from None
        if self.headers is not None:
            self.headers[entry] = h
        return h

    def _agree(self, headers, paths):
        """The samples' shapes ([N, ndim]) and their common type; an error naming two files of
        different ranks or types."""
        first = headers[0]
        for i, h in enumerate(headers):
            if len(h.shape) != len(first.shape) or h.torch_dtype != first.torch_dtype:
                what, a, b = ("number of dimensions", len(first.shape), len(h.shape)) \
                    if len(h.shape) != len(first.shape) else ("data type", first.dtype.name, h.dtype.name)
                raise self.error(f"all samples of a batch must have the same {what}: '{paths[0]}' has {a}, "
                                 f"'{paths[i]}' has {b}", sample=i, file=paths[i])
        shapes = np.array([h.shape for h in headers], np.int64).reshape(len(headers), len(first.shape))
        return shapes, first.torch_dtype

    def _windows(self, args, shapes, paths):
        """The ROI's anchors and extents after the policy; errors name the file."""
        try:
            return self.windows.windows(args, shapes, "", policy=self.policy)
        except OperatorError as e:
            if e.sample is None:
                raise
            prefix = f"{self.name} ('{self.spec.name}'): "
            path = paths[e.sample]
            raise self.error(f"{str(e)[len(prefix):]} (file '{path}')", type(e), sample=e.sample,
                             file=path) from None
