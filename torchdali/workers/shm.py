"""Shared-memory slots that carry samples from worker processes to the pipeline.

A slot is a file in /dev/shm (POSIX shared memory; a temp dir elsewhere) created by the
pipeline's process. A worker writes a task's samples into its slot with `pwrite` and
sends back only their descriptions (dtype, shape, offset); the pipeline reads them with
`preadv` straight into the batch's memory. No array data is pickled, and every file
carries the pool's prefix, so closing the pool (or a worker seeing the pipeline's
process die) removes them all."""
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
    a = np.ascontiguousarray(x)
    if a.dtype == object or a.dtype.kind in "USV":
        raise TypeError(f"{what} of type {type(x).__name__} ({a.dtype}) is not a numeric array")
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return a


def write_samples(fd, outputs):
    """Write `outputs` (per output, a list of arrays) into the slot `fd`; return their
    descriptions [(dtype str, shape, offset)] per output."""
    offset = 0
    meta = []
    for samples in outputs:
        descs = []
        for a in samples:
            descs.append((a.dtype.str, a.shape, offset))
            if a.nbytes:
                view = memoryview(a.reshape(-1).view(np.uint8))
                done = 0
                while done < a.nbytes:
                    done += os.pwrite(fd, view[done:], offset + done)
            offset += (a.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
        meta.append(descs)
    return meta


def _read_into(fd, dst, offset):
    view = memoryview(dst.reshape(-1).view(np.uint8))
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            raise RuntimeError("a shared-memory slot is shorter than its sample descriptions")
        done += n


def read_batch(parts):
    """Assemble one output of a batch from [(fd, descs), ...] (the tasks in sample order):
    a dense tensor when all samples share dtype and shape, else a list of tensors."""
    descs = [(fd, d) for fd, ds in parts for d in ds]
    kinds = {(d[0], tuple(d[1])) for _, d in descs}
    if len(kinds) == 1 and descs:
        dtype, shape = kinds.pop()
        out = np.empty((len(descs),) + shape, np.dtype(dtype))
        if out.size:
            rows = out.reshape(len(descs), -1)
            for i, (fd, d) in enumerate(descs):
                _read_into(fd, rows[i], d[2])
        return torch.from_numpy(out)
    samples = []
    for fd, (dtype, shape, off) in descs:
        a = np.empty(shape, np.dtype(dtype))
        if a.size:
            _read_into(fd, a, off)
        samples.append(torch.from_numpy(a))
    return samples
