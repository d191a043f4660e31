"""The main loop of one Python worker process of parallel `external_source`s.

A task names a source, what to compute (a range of samples, a batch, or the next batch
of an iterable) and the slot to write it to; the reply describes the written samples,
or says StopIteration, or carries the source's error with its traceback text."""
import importlib
import inspect
import os
import signal
import traceback

import torch

from .. import types
from .shm import SlotWriter, as_array, remove_all
from .source import batch_where, sample_where


class SourceSpec:
    """What a worker needs to know about one parallel source (picklable)."""

    def __init__(self, source, batch, batch_info, num_outputs, cycle, iterable):
        self.source = source
        self.batch = batch
        self.batch_info = batch_info
        self.num_outputs = num_outputs  # None: a single output, not a tuple
        self.cycle = cycle
        self.iterable = iterable


def load_sources(payload, loader):
    """The worker's sources: given directly (fork) or serialized by the callback pickler."""
    if loader is None:
        return payload
    kind, ref, loads_kwargs = loader
    module = importlib.import_module(ref) if kind == "module" else ref
    return module.loads(payload, **loads_kwargs)


def _split(value, n, what):
    if n is None:
        return [value]
    if not isinstance(value, (list, tuple)) or len(value) != n:
        raise TypeError(f"{what} must be a tuple of {n} outputs (num_outputs={n}), got {type(value).__name__}")
    return list(value)


def _batch_samples(batch, what):
    if isinstance(batch, (list, tuple)):
        return [as_array(x, f"{what} sample {i}") for i, x in enumerate(batch)]
    a = as_array(batch, what)
    if a.ndim == 0:
        raise TypeError(f"{what} is a scalar, not a batch")
    return list(a)


class _Iterators:
    """The iterables' iterators, restarted at each new epoch."""

    def __init__(self):
        self.current = {}

    def next(self, ctx_id, spec, epoch):
        it_epoch = self.current.get(ctx_id)
        if it_epoch is None or it_epoch[1] != epoch:
            it_epoch = self.current[ctx_id] = [self._start(spec), epoch]
        try:
            return next(it_epoch[0])
        except StopIteration:
            if spec.cycle not in (True, "quiet"):
                raise
            it_epoch[0] = self._start(spec)
            return next(it_epoch[0])

    @staticmethod
    def _start(spec):
        src = spec.source
        return iter(src() if inspect.isgeneratorfunction(src) else src)


def _compute(spec, kind, args, iterators, ctx_id):
    """The task's outputs: per output, a list of arrays."""
    if kind == "sample":
        first, first_in_batch, count, iteration, epoch = args
        per_sample = []
        for j in range(count):
            info = types.SampleInfo(first + j, first_in_batch + j, iteration, epoch)
            try:
                per_sample.append(_split(spec.source(info), spec.num_outputs, "the sample"))
            except StopIteration:
                raise
            except BaseException as e:
                e._torchdali_where = sample_where(info)
                raise
        n = len(per_sample[0]) if per_sample else 1
        return [[as_array(s[k], f"output {k} of sample {first + j}") for j, s in enumerate(per_sample)]
                for k in range(n)]
    iteration, epoch = args
    try:
        if kind == "batch":
            value = spec.source(types.BatchInfo(iteration, epoch) if spec.batch_info else iteration)
        else:
            value = iterators.next(ctx_id, spec, epoch)
    except StopIteration:
        raise
    except BaseException as e:
        e._torchdali_where = batch_where(iteration, epoch)
        raise
    return [_batch_samples(v, f"output {k} of the batch of iteration {iteration}") for k, v in
            enumerate(_split(value, spec.num_outputs, "the batch"))]


def _error_reply(task_id, e):
    where = getattr(e, "_torchdali_where", None)
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    try:
        import pickle
        exc = pickle.dumps(e)
    except Exception:
        exc = None
    return ("error", task_id, (type(e).__name__, str(e), where, text, exc))


def main(index, conn, prefix, payload, loader, close_fds):
    """Serve tasks until told to stop or until the pipeline's process goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the pipeline process's to handle
    # One intra-op thread per worker, as in torch's DataLoader workers: py_num_workers
    # processes already share the machine's cores.
    torch.set_num_threads(1)
    for fd in close_fds:  # pipe ends of the pipeline process inherited by fork
        try:
            os.close(fd)
        except OSError:
            pass
    sources = load_sources(payload, loader)
    slots = SlotWriter(prefix)
    iterators = _Iterators()
    try:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                remove_all(prefix)  # the pipeline's process died: nobody else will
                return
            if msg is None:
                return
            task_id, ctx_id, kind, args, slot = msg
            spec = sources[ctx_id]
            try:
                outputs = _compute(spec, kind, args, iterators, ctx_id)
                reply = ("ok", task_id, slots.write(slot, outputs))
            except StopIteration:
                reply = ("stop", task_id, None)
            except Exception as e:  # MemoryError too: the worker survives it
                reply = _error_reply(task_id, e)
            conn.send(reply)
    finally:
        slots.close()
