"""Shared-memory slots that carry samples from worker processes to the pipeline.

A slot is a file in /dev/shm (POSIX shared memory; a temp dir elsewhere) created by the
pipeline's process. A worker copies a task's samples into its mapping of the slot and
sends back only their descriptions (dtype, shape, offset, size). The pipeline maps the
slot and hands samples of varying shapes out as tensors viewing it (no copy): the slot
goes back to the pool only when the last of them is freed, so its bytes never change
under a live tensor. Samples that share one shape are copied into one dense tensor and
free the slot at once. No array data is pickled, and every file carries the pool's
prefix, so closing the pool (or a worker seeing the pipeline's process die) removes
them all (a mapping outlives its unlinked file)."""
import mmap
import os
import tempfile

import numpy as np
import torch

_ALIGN = 64


def shm_dir():
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def slot_path(prefix, slot):
    return os.path.join(shm_dir(), f"{prefix}-{slot}")


def remove_all(prefix):
    """Unlink every slot file of the pool `prefix` (idempotent)."""
    d = shm_dir()
    try:
        names = os.listdir(d)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix + "-"):
            try:
                os.unlink(os.path.join(d, name))
            except OSError:
                pass


def as_array(x, what):
    """A sample produced by a source, as a C-contiguous NumPy array (no copy when it is one)."""
    if isinstance(x, torch.Tensor):
        if x.device.type != "cpu":
            raise TypeError(f"{what} is a {x.device.type} tensor; parallel sources must produce CPU data")
        x = x.detach().numpy()
    a = np.asarray(x)
    if not a.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d sample 1-d)
        a = np.ascontiguousarray(a)
    if a.dtype == object or a.dtype.kind in "USV":
        raise TypeError(f"{what} of type {type(x).__name__} ({a.dtype}) is not a numeric array")
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return a


def _aligned(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class SlotWriter:
    """A worker's mappings of the slots it writes into; a slot that a task outgrows is
    enlarged (with a quarter more room, as sample sizes vary from batch to batch)."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.slots = {}  # slot -> [fd, mmap or None]

    def write(self, slot, outputs):
        """Copy `outputs` (per output, a list of arrays) into `slot`; return their
        descriptions [(dtype str, shape, offset, nbytes)] per output."""
        meta, offset = [], 0
        for samples in outputs:
            descs = []
            for a in samples:
                descs.append((a.dtype.str, a.shape, offset, a.nbytes))
                offset += _aligned(a.nbytes)
            meta.append(descs)
        if offset:
            mm = self._mapping(slot, offset)
            for samples, descs in zip(outputs, meta):
                for a, (_, _, off, n) in zip(samples, descs):
                    if n:
                        np.frombuffer(mm, np.uint8, n, off)[:] = a.reshape(-1).view(np.uint8)
        return meta

    def _mapping(self, slot, size):
        entry = self.slots.get(slot)
        if entry is None:
            entry = self.slots[slot] = [os.open(slot_path(self.prefix, slot), os.O_RDWR), None]
        fd, mm = entry
        if mm is None or len(mm) < size:
            capacity = os.fstat(fd).st_size
            if capacity < size:
                capacity = -(-(size + size // 4) // mmap.PAGESIZE) * mmap.PAGESIZE
                os.ftruncate(fd, capacity)
            entry[1] = mm = mmap.mmap(fd, capacity)
        return mm

    def close(self):
        for fd, _ in self.slots.values():
            os.close(fd)
        self.slots.clear()


def slot_end(descs):
    """The number of bytes of a slot that a task's descriptions (all outputs) cover."""
    return max((d[2] + d[3] for out in descs for d in out), default=0)


class SlotMaps:
    """The pipeline process's mappings of the slot files (read-write, shared), made again
    when a worker has grown a slot past its mapping."""

    def __init__(self):
        self.maps = {}

    def array(self, slot, fd, end):
        """The first `end` bytes of `slot` as a uint8 array viewing the shared memory."""
        if not end:
            return np.empty(0, np.uint8)
        mm = self.maps.get(slot)
        if mm is None or len(mm) < end:
            size = os.fstat(fd).st_size
            if size < end:
                raise RuntimeError("a shared-memory slot is shorter than its sample descriptions")
            mm = self.maps[slot] = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        return np.frombuffer(mm, np.uint8, count=end)


def sample_views(arr, descs):
    """NumPy views of the samples `descs` in a slot's bytes `arr` (no copy)."""
    return [arr[off:off + n] if dtype == "|u1" and len(shape) == 1  # bytes: the common case, kept cheap
            else arr[off:off + n].view(dtype).reshape(shape) for dtype, shape, off, n in descs]


def assemble(views):
    """One output of a batch from its samples' views: (a dense tensor, False) when all share
    dtype and shape (one copy, so the slots are free at once), else (a list of tensors
    viewing the slots, True)."""
    first = views[0] if views else None
    if first is not None and all(v.shape == first.shape and v.dtype == first.dtype for v in views):
        return torch.from_numpy(np.stack(views)), False
    return [torch.from_numpy(v) for v in views], True
