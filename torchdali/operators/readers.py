"""File readers. `readers.file` lists (path, label) pairs from a class-per-folder tree, a
list file or the `files` argument, and yields file contents and labels with DALI's
sharding, padding, wrap-around and shuffle-buffer semantics.

The sample order follows DALI's loader: one stream of reads runs ahead of the consumer,
epochs are cut out of it by shard size, a shuffle buffer of `initial_fill` samples picks
randomly only among samples of the epoch being returned, and `pad_last_batch` repeats the
last sample until every shard has returned the same number of whole batches.
"""
import errno
import fnmatch
import os
import re

import numpy as np
import torch

from .. import storage
from ..distributed import AUTO, resolve_shards
from ..kernels.io import read_files
from ..schema import BOOL, INT, INTS, STR, STRS, Arg, ArgType, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator

# DALI's loader arguments (its LoaderBase's) that every reader built on FileReader takes;
# readers.file adds shuffle_after_epoch and its seed, which some of DALI's readers lack.
LOADER_ARGS = ("shard_id", "num_shards", "stick_to_shard", "pad_last_batch", "random_shuffle", "initial_fill",
               "dont_use_mmap", "read_ahead", "lazy_init", "prefetch_queue_depth", "skip_cached_images",
               "tensor_init_bytes")

# DALI's kDaliDataloaderSeed: the fixed seed of whole-list shuffles, equal on every shard.
_LIST_SEED = 524287

_DEFAULT_FILTERS = ["*.jpg", "*.jpeg", "*.png", "*.bmp", "*.tif", "*.tiff", "*.pnm", "*.ppm", "*.pgm",
                    "*.pbm", "*.jp2", "*.webp", "*.flac", "*.ogg", "*.wav"]


def _at_least(n):
    return lambda v: None if v >= n else f"must be at least {n}"


def _int_or_auto(v):
    return v if v == AUTO else INT.convert(v)


# shard_id / num_shards: an int, or "auto" for this process's rank / the number of ranks.
_SHARD = ArgType("int or 'auto'", _int_or_auto)


def _auto_or_at_least(n):
    return lambda v: None if v == AUTO or v >= n else f"must be at least {n} or 'auto'"


def _start_index(shard_id, num_shards, size):
    """First sample of a shard: floor(size * shard_id / num_shards), as DALI computes it."""
    return size * shard_id // num_shards


def take_from_buffer(buffer, picks, incoming):
    """The shuffle buffer's steps over a batch, as arrays: step k takes buffer[picks[k]],
    moves the buffer's last entry into that place and appends incoming[k] (the next entry
    read). Returns (the taken entries, the buffer after the batch).

    The last place holds incoming[k - 1] when step k starts (the initial last entry for
    k = 0): that is what step k moves. So step k takes what the latest earlier step with the
    same pick moved there, the initial entry if none did, or the moved entry itself when it
    picks the last place."""
    n, last = len(picks), len(buffer) - 1
    moved = np.concatenate([buffer[last:], incoming[:-1]])  # moved[k]: the last entry at step k
    order = np.lexsort((np.arange(n), picks))  # steps grouped by pick, in step order
    grouped = picks[order]
    first = np.ones(n, bool)
    first[1:] = grouped[1:] != grouped[:-1]
    earlier = np.empty(n, np.int64)  # per step: the previous step with its pick, -1 if none
    earlier[order] = np.where(first, -1, np.roll(order, 1))
    taken = np.where(earlier >= 0, moved[np.maximum(earlier, 0)], buffer[picks])
    taken = np.where(picks == last, moved, taken)
    after = buffer.copy()
    final = np.ones(n, bool)  # the last step of each pick writes the place's final entry
    final[:-1] = grouped[1:] != grouped[:-1]
    after[grouped[final]] = moved[order[final]]
    after[last] = incoming[-1]
    return taken, after


def _max_shard_size(num_shards, size):
    return -(-size // num_shards)


def _matcher(patterns, case_sensitive):
    """A predicate for POSIX fnmatch() with these globs (FNM_CASEFOLD unless case_sensitive)."""
    # fnmatch() takes "[^...]" as a negated set like "[!...]"; Python's fnmatch does not.
    regex = "|".join(fnmatch.translate(p.replace("[^", "[!")) for p in patterns)
    compiled = re.compile(regex, 0 if case_sensitive else re.IGNORECASE)
    return lambda name: compiled.match(name) is not None


def _discover(op, root, file_filters, dir_filters, case_sensitive):
    """(relative path, label) pairs: one label per sub-folder of `root` (sorted, empty
    ones included), files sorted within; files directly in `root` are not listed."""
    keep_dir = _matcher(dir_filters, case_sensitive) if dir_filters else (lambda name: True)
    keep_file = _matcher(file_filters, case_sensitive)
    if storage.is_url(root):
        return _discover_url(op, root, keep_dir, keep_file)
    if not os.path.isdir(root):
        raise op.error(f"file_root '{root}' is not a directory (it does not exist or cannot be opened)", ValueError)
    try:
        with os.scandir(root) as it:
            subdirs = sorted((e.name for e in it if e.is_dir() and keep_dir(e.name)), key=os.fsencode)
        pairs = []
        for label, sub in enumerate(subdirs):
            with os.scandir(os.path.join(root, sub)) as it:
                # DALI lists regular files and symlinks only.
                names = [e.name for e in it
                         if (e.is_file(follow_symlinks=False) or e.is_symlink()) and keep_file(e.name)]
            pairs += [(f"{sub}/{name}", label) for name in sorted(names, key=os.fsencode)]
    except OSError as e:
        raise op.error(f"cannot list '{e.filename}' under file_root: {e.strerror}") from None
    return pairs


def list_url(op, root):
    """The files under URL `root`, recursively, as lists of path parts; an error of `op` naming
    the URL where it cannot be listed."""
    try:
        return [name.split("/") for name in storage.list_files(root)]
    except OSError as e:
        hint = "; name the files with files or file_list instead" if e.errno == errno.EOPNOTSUPP else ""
        raise op.error(f"cannot list file_root '{root}': {e.strerror or e}{hint}", ValueError) from None
    except ImportError as e:
        raise op.error(str(e), ImportError) from None


def read_file_list(op, path):
    """The bytes of file list `path` (a path or URL); an error of `op` naming it otherwise."""
    try:
        return storage.read_bytes(path)
    except OSError as e:
        raise op.error(f"cannot open file_list '{path}': {e.strerror or e}", ValueError) from None
    except ImportError as e:
        raise op.error(str(e), ImportError) from None


def _discover_url(op, root, keep_dir, keep_file):
    """`_discover` under a URL, from one recursive listing: a class is a sub-folder holding
    anything (object stores keep no empty folders), its files those directly in it."""
    listed = list_url(op, root)
    subdirs = sorted({parts[0] for parts in listed if len(parts) > 1 and keep_dir(parts[0])}, key=os.fsencode)
    files = {}
    for parts in listed:
        if len(parts) == 2 and keep_file(parts[1]):
            files.setdefault(parts[0], []).append(parts[1])
    return [(f"{sub}/{name}", label) for label, sub in enumerate(subdirs)
            for name in sorted(files.get(sub, []), key=os.fsencode)]


def file_list_root(path):
    """The folder of file list `path` (a path or URL): the root of its names where file_root
    is not given, as in DALI."""
    cut = path.rfind("/")
    return path[:cut] if cut >= 0 else ""


def _parse_file_list(op, path):
    """(name, label) pairs of a "name label" list; names may hold inner spaces."""
    data = read_file_list(op, path)
    pairs = []
    for n, raw in enumerate(data.split(b"\n"), 1):
        line = os.fsdecode(raw)
        body = line.rstrip(" \t\n\r\f\v")
        if not body:
            continue
        digits = len(body) - len(body.rstrip("0123456789"))
        name = body[:len(body) - digits].rstrip(" \t\n\r\f\v")
        gap = len(body) - digits - len(name)
        if not digits or not name or not gap or not body[len(body) - digits:].isascii():
            raise op.error(f"file_list '{path}' line {n}: expected a file name, whitespace and a "
                           f"non-negative integer label; got {line!r}")
        pairs.append((name, int(body[len(body) - digits:])))
    return pairs


@register(
    "readers.file", aliases=("FileReader",), outputs=2, deprecated_names=("file_reader",),
    args=[
        Arg("file_root", STR, None, "Folder with one sub-folder per class; the root of relative "
            "paths given by `file_list` or `files`. Any of the three may be a URL that fsspec reads "
            "(s3://, gs://, http(s)://, ...; an http(s) folder cannot be listed: name its files)."),
        Arg("file_list", STR, None, "Text file of 'name label' lines; names are relative to `file_root` "
            "or, without it, to the list's folder."),
        Arg("files", STRS, None, "File paths to read (relative to `file_root` if given)."),
        Arg("labels", INTS, None, "Labels of `files`; their indices when not given."),
        Arg("file_filters", STRS, list(_DEFAULT_FILTERS), "Globs selecting files under `file_root` "
            "(ignored with `file_list` or `files`).", check=lambda v: None if v else "cannot be empty"),
        Arg("dir_filters", STRS, None, "Globs selecting the class sub-folders of `file_root`."),
        Arg("case_sensitive_filter", BOOL, False, "Match the filters case-sensitively."),
        Arg("shard_id", _SHARD, 0, "Index of the shard to read; 'auto': this process's rank (from "
            "torch.distributed, else RANK set by torchrun, else 0).", check=_auto_or_at_least(0)),
        Arg("num_shards", _SHARD, 1, "Number of parts the data is split into; 'auto': the number of "
            "ranks (torch.distributed, else WORLD_SIZE, else 1).", check=_auto_or_at_least(1)),
        Arg("stick_to_shard", BOOL, False, "Read the same shard every epoch instead of moving to the next."),
        Arg("pad_last_batch", BOOL, False, "Repeat the shard's last sample so that every shard returns "
            "the same number of whole batches per epoch."),
        Arg("random_shuffle", BOOL, False, "Pick samples randomly from a buffer of `initial_fill` samples "
            "(the file list itself is shuffled once, identically on every shard)."),
        Arg("initial_fill", INT, 1024, "Size of the shuffle buffer.", check=_at_least(1)),
        Arg("shuffle_after_epoch", BOOL, False, "Shuffle the whole file list every epoch, identically "
            "on every shard."),
        Arg("shuffle_after_epoch_seed", INT, None, "Seed of the per-epoch shuffles (a fixed one by default)."),
        # Mapping measured no faster than a read into the output tensor here, and a mapping
        # per sample costs a descriptor or a munmap per batch, so files are always read with
        # plain I/O (torchdali::read_files, in C++ without the GIL).
        Arg("dont_use_mmap", BOOL, False, "Read with plain I/O instead of mapping files in memory; "
            "torchdali always reads with plain I/O."),
        Arg("read_ahead", BOOL, False, "Accepted for compatibility."),
        Arg("lazy_init", BOOL, False, "List the files at the first run instead of at build time."),
        Arg("prefetch_queue_depth", INT, 1, "Accepted for compatibility.", check=_at_least(1)),
        Arg("skip_cached_images", BOOL, False, "Accepted for compatibility (there is no decoder cache)."),
        Arg("tensor_init_bytes", INT, 1048576, "Accepted for compatibility."),
    ])
class FileReader(Operator):
    """Reads file contents (1D uint8) and labels (int32, shape (1,)) from `file_root`'s
    class sub-folders, a `file_list` or `files`; shards, pads and shuffles as DALI does."""

    is_source = True

    def __init__(self, spec):
        super().__init__(spec)
        a = spec.args
        self.shard_id, self.num_shards = resolve_shards(a["shard_id"], a["num_shards"],
                                                        f"{self.name} ('{spec.name}')")
        self._check_args(a)
        self._check_order(a)
        self.pad = a["pad_last_batch"]
        self.shuffle = a["random_shuffle"]
        self.shuffle_after_epoch = a.get("shuffle_after_epoch", False)  # some readers lack it, as in DALI
        # As in DALI, shuffle_after_epoch implies stick_to_shard (every shard reshuffles alike).
        self.stick = a["stick_to_shard"] or self.shuffle_after_epoch
        self.fill = a["initial_fill"] if self.shuffle else 1
        seed = a.get("shuffle_after_epoch_seed")
        self._epoch_seed = _LIST_SEED if seed is None else seed
        self.rng = np.random.Generator(np.random.PCG64(max(spec.seed, 0)))
        self.entries = None
        if not a["lazy_init"]:
            self._prepare()

    def _check_args(self, a):
        if a["file_root"] is None and a["files"] is None and a["file_list"] is None:
            raise self.error("give file_root, file_list or files", ValueError)
        if a["files"] is not None and a["file_list"] is not None:
            raise self.error("file paths come from files or from file_list, not both", ValueError)
        if a["labels"] is not None and a["files"] is None:
            raise self.error("labels are valid only with files", ValueError)
        if a["files"] is not None and not a["files"]:
            raise self.error("files is an empty list", ValueError)
        if a["labels"] is not None and len(a["labels"]) != len(a["files"]):
            raise self.error(f"got {len(a['labels'])} labels for {len(a['files'])} files; "
                             "labels and files must have the same length", ValueError)
        if a["file_list"] == "":
            raise self.error("file_list cannot be an empty string", ValueError)

    def _check_order(self, a):
        """The shuffling arguments' conflicts (shared by the readers built on this one)."""
        if a.get("shuffle_after_epoch") and a["random_shuffle"]:
            raise self.error("shuffle_after_epoch and random_shuffle cannot both be True", ValueError)
        if a.get("shuffle_after_epoch") and a["stick_to_shard"]:
            raise self.error("shuffle_after_epoch and stick_to_shard cannot both be True", ValueError)

    # --- the dataset ---
    def _prepare(self):
        """List the (name, label) pairs and put the reader at the start of its shard."""
        root, entries = self._list_entries()
        if self.num_shards > len(entries):
            raise self.error(f"num_shards = {self.num_shards} is larger than the number of files "
                             f"({len(entries)})", ValueError)
        self.root = root or ""
        self.entries = entries
        self.size = len(entries)
        # Per entry, once: its name as listed (source_info), its path and its label.
        self.names = [name for name, _ in entries]
        # DALI's join_path: an absolute name or an empty root leaves the name as it is.
        self.paths = [storage.join(self.root, name) for name in self.names]
        self.remote = any(storage.is_url(p) for p in self.paths)
        self.labels = torch.tensor([[label] for _, label in entries], dtype=torch.int32)
        starts = [_start_index(s, self.num_shards, self.size) for s in range(self.num_shards + 1)]
        self.shard_ranges = list(zip(starts[:-1], starts[1:]))
        base = np.arange(self.size)
        if self.shuffle:  # once, with a fixed seed, so that the shards stay disjoint
            base = np.random.Generator(np.random.PCG64(_LIST_SEED)).permutation(self.size)
        self.base_order = base
        self._restart()

    def _list_entries(self):
        """The root of relative names and the (name, label) pairs to read."""
        a = self.spec.args
        root = a["file_root"]
        if a["files"] is not None:
            labels = a["labels"] if a["labels"] is not None else range(len(a["files"]))
            entries = list(zip(a["files"], labels))
        elif a["file_list"] is not None:
            root = file_list_root(a["file_list"]) if root is None else root
            entries = _parse_file_list(self, a["file_list"])
        else:
            entries = _discover(self, root, a["file_filters"], a["dir_filters"], a["case_sensitive_filter"])
        if not entries:
            where = f"'{a['file_list']}'" if a["file_list"] else f"'{root}' matching {a['file_filters']}"
            raise self.error(f"no files found in {where}", ValueError)
        for _, label in entries:
            if not -2**31 <= label < 2**31:
                raise self.error(f"label {label} does not fit in int32", ValueError)
        return root, entries

    def _restart(self):
        """The state right after DALI's PrepareMetadata: nothing read yet."""
        self.epoch = 1  # DALI's current_epoch_: incremented by every wrap of the read position
        self.order = self._order_for(self.epoch)
        self.pos = _start_index(self.shard_id, self.num_shards, self.size)  # next list index to read
        self.vshard = self.shard_id  # the shard whose epoch the next read belongs to
        self.read_in_epoch = 0
        self.segments = []  # per epoch, read but not yet returned entry indices (the buffer)
        self.returned = 0  # returned in the current epoch, padding included
        self.last = None
        self.filled = False

    def _order_for(self, epoch):
        if not self.shuffle_after_epoch:
            return self.base_order
        # Each epoch's order is a fresh permutation of the original one (equal on every shard).
        return np.random.Generator(np.random.PCG64([self._epoch_seed, epoch])).permutation(self.size)


    # --- DALI's loader, without the files' contents ---
    def _read_next(self):
        """The next entry of the read stream, placed in the epoch segment it belongs to."""
        entry = int(self.order[self.pos])
        self.pos += 1
        start, end = self.shard_ranges[self.shard_id]
        if self.pos >= self.size or (self.stick and self.pos >= end):
            self.pos = start if self.stick else 0
            self.epoch += 1
            if self.shuffle_after_epoch:
                self.order = self._order_for(self.epoch)
        self.read_in_epoch += 1
        vstart, vend = self.shard_ranges[self.vshard]
        if not self.segments or vstart + self.read_in_epoch - 1 >= vend:
            if self.segments:  # this read opens the next epoch
                if not self.stick:
                    self.vshard = (self.vshard + 1) % self.num_shards
                self.read_in_epoch = 1
            self.segments.append([])
        self.segments[-1].append(entry)

    def _next_sample(self, new_batch):
        if not self.filled:
            for _ in range(self.fill):
                self._read_next()
            self.filled = True
        if not self.segments[0]:
            if self.pad and (self.returned < _max_shard_size(self.num_shards, self.size) or not new_batch):
                self.returned += 1
                return self.last
            self.segments.pop(0)
            self.returned = 0
        front = self.segments[0]
        if self.shuffle:
            i = int(self.rng.integers(len(front)))
            front[i], front[-1] = front[-1], front[i]
            entry = front.pop()
        else:
            entry = front.pop(0)
        self._read_next()
        self.returned += 1
        self.last = entry
        return entry

    def _next_batch(self, n):
        """The next n entries, in runs of steps taken at once: while the buffer is one
        epoch's segment (`take_from_buffer`), or while an older epoch's segment drains (a
        random draw of it); sample by sample through DALI's loader above only at the events
        between runs (the first fill, an epoch's segment emptied or padded, a new one opened)."""
        out = []
        while len(out) < n:
            if self.pad and self.filled and not self.segments[0] and \
                    (out or self.returned < _max_shard_size(self.num_shards, self.size)):
                self.returned += n - len(out)
                out.extend([self.last] * (n - len(out)))  # the epoch's padding fills the batch
                break
            front = self.segments[0] if self.filled and self.segments else None
            room = self._reads_before_opening() if front else 0
            steps = min(n - len(out), room, len(front) if front and len(self.segments) > 1 else n)
            if not steps:
                out.append(self._next_sample(not out))
                continue
            front = np.array(front, np.int64)
            incoming = self._advance_reads(steps)
            if len(self.segments) > 1:  # the reads go to a later epoch's segment
                order = self.rng.permutation(len(front)) if self.shuffle else np.arange(len(front))
                taken, self.segments[0] = front[order[:steps]], front[order[steps:]].tolist()
                self.segments[-1].extend(incoming.tolist())
            elif self.shuffle:
                taken, front = take_from_buffer(front, self.rng.integers(len(front), size=steps), incoming)
                self.segments[0] = front.tolist()
            else:  # first in, first out
                stream = np.concatenate([front, incoming])
                taken, self.segments[0] = stream[:steps], stream[steps:].tolist()
            out.extend(taken.tolist())
            self.returned += steps
            self.last = out[-1]
        return out

    def _reads_before_opening(self):
        """How many reads go to the newest segment before one opens the next epoch's."""
        vstart, vend = self.shard_ranges[self.vshard]
        return max(0, vend - vstart - self.read_in_epoch)

    def _advance_reads(self, count):
        """The next `count` entries read, none of which opens a segment (the caller files
        them): the read position moves on, wrapping to the next epoch's order as
        `_read_next` does."""
        start, end = self.shard_ranges[self.shard_id]
        limit = end if self.stick else self.size
        parts = []
        while count:
            chunk = min(count, limit - self.pos)
            parts.append(self.order[self.pos:self.pos + chunk])
            self.pos += chunk
            self.read_in_epoch += chunk
            count -= chunk
            if self.pos >= limit:
                self.pos = start if self.stick else 0
                self.epoch += 1
                if self.shuffle_after_epoch:
                    self.order = self._order_for(self.epoch)
        return np.concatenate(parts).astype(np.int64)

    # --- the operator ---
    def plan(self, inputs):
        """The files' contents (1D uint8) and labels (int32, shape (1,))."""
        return [BatchSpec("cpu", torch.uint8, 1, ""), BatchSpec("cpu", torch.int32, 1, "")], self.run

    def run(self, inputs, args, ctx):
        if self.entries is None:
            self._prepare()
        picks = self._next_batch(ctx.batch_size)
        labels = self.labels[torch.from_numpy(np.array(picks, np.int64))]
        return [self._read(picks),
                TensorList.make(labels, layout="", device="cpu", source_info=[""] * len(picks))]

    def _read(self, picks):
        """The files of entries `picks` in one buffer (the decoders take it whole), with the
        names as listed as source info (DALI sets it on the contents only)."""
        paths = [self.paths[e] for e in picks]
        if self.remote:
            data, sizes = self._read_remote(paths)
        else:
            try:
                files = read_files(paths)
            except RuntimeError as e:  # the kernel's message names the file and the reason
                raise self.error(str(e).splitlines()[0]) from None
            data, sizes = files.data, files.spans[:, 1:].numpy()
        names = [self.names[e] for e in picks]
        return TensorList.from_flat(data, sizes, device="cpu", source_info=names)

    def _read_remote(self, paths):
        """The files at `paths`, some of them URLs (which the kernel cannot read), read
        concurrently: one buffer and the sizes."""
        try:
            contents = storage.read_many(paths)
        except OSError as e:
            raise self.error(f"cannot read '{e.filename}': {e.strerror}") from None
        except ImportError as e:
            raise self.error(str(e), ImportError) from None
        sizes = np.array([len(c) for c in contents], np.int64).reshape(-1, 1)
        data = torch.empty(int(sizes.sum()), dtype=torch.uint8)
        out, at = data.numpy(), 0
        for c in contents:
            out[at:at + len(c)] = np.frombuffer(c, np.uint8)
            at += len(c)
        return data, sizes

    def meta(self):
        if self.entries is None:
            self._prepare()
        padded = _max_shard_size(self.num_shards, self.size) * self.num_shards if self.pad else self.size
        return {"epoch_size": self.size, "epoch_size_padded": padded,
                "number_of_shards": self.num_shards, "shard_id": self.shard_id,
                "pad_last_batch": int(self.pad), "stick_to_shard": int(self.stick)}

    _STATE = ("epoch", "pos", "vshard", "read_in_epoch", "returned", "last", "filled")

    def state_dict(self):
        if self.entries is None:
            return {"prepared": False, "rng": self.rng.bit_generator.state}
        state = {k: getattr(self, k) for k in self._STATE}
        state.update(prepared=True, size=self.size, segments=[list(s) for s in self.segments],
                     rng=self.rng.bit_generator.state)
        return state

    def load_state_dict(self, state):
        self.rng.bit_generator.state = state["rng"]
        if not state["prepared"]:
            return
        if self.entries is None:
            self._prepare()
        if state["size"] != self.size:
            raise self.error(f"the checkpoint was taken with {state['size']} files; "
                             f"this reader lists {self.size}", ValueError)
        for k in self._STATE:
            setattr(self, k, state[k])
        self.segments = [list(s) for s in state["segments"]]
        self.order = self._order_for(self.epoch)
