"""The pool of Python worker processes behind a pipeline's parallel `external_source`s.

The pipeline's process sends small task messages over one pipe per worker and polls
the pipes and the processes' sentinels together, so a worker that dies is noticed
at once (never a hang). Results are kept by task id until their source asks for them,
which keeps every batch in the order of the non-parallel run whatever order the
workers finish in."""
import collections
import itertools
import multiprocessing
import os
import secrets
import select
import signal
import threading
import types as pytypes
import weakref

import torch

from . import worker
from .shm import SlotMaps, assemble, remove_all, sample_views, slot_end, slot_path


class WorkerDied(RuntimeError):
    """A worker process of the pool exited while the pipeline needed it."""


def _describe_exit(code):
    if code is None:
        return "stopped responding"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}" + (" (a crash in native code)" if name in ("SIGSEGV", "SIGBUS") else "")
    return f"exited with code {code}"


def _loader_ref(pickler):
    """How a spawned worker finds the `loads` of `pickler` (module, dumps_kwargs, loads_kwargs)."""
    module, _, loads_kwargs = pickler
    if isinstance(module, pytypes.ModuleType):
        return ("module", module.__name__, loads_kwargs)
    return ("object", module, loads_kwargs)


class _Resources:
    """What must be released when the pool goes: processes, pipes, slot files."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.procs = []
        self.conns = []
        self.slot_fds = []

    def release(self):
        for conn in self.conns:
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
        for p in self.procs:
            p.join(timeout=1)
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        for conn in self.conns:
            conn.close()
        for fd in self.slot_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.procs, self.conns, self.slot_fds = [], [], []
        remove_all(self.prefix)


class WorkerPool:
    """`num_workers` processes running the sources `specs` (context id -> SourceSpec)."""

    def __init__(self, specs, num_workers, start_method="fork", pickler=None):
        if start_method not in ("fork", "spawn"):
            raise ValueError(f"Pipeline: py_start_method must be 'fork' or 'spawn', got {start_method!r}")
        if start_method == "fork" and torch.cuda.is_initialized():
            raise RuntimeError(
                "parallel external_source: cannot start Python workers with 'fork' because CUDA is "
                "already initialised in this process (a forked child cannot use it and may hang). Call "
                "pipe.start_py_workers() on every pipeline with parallel external sources before "
                "anything touches CUDA (building or running a GPU pipeline, creating CUDA tensors), "
                "or create the pipeline with py_start_method='spawn'.")
        self.num_workers = num_workers
        self.res = _Resources(f"torchdali-{os.getpid()}-{secrets.token_hex(4)}")
        self._finalizer = weakref.finalize(self, self.res.release)
        self.lock = threading.RLock()
        self.task_ids = itertools.count()
        self.free_slots = []
        self.returned = collections.deque()  # slots whose last tensor was freed (any thread)
        self.maps = SlotMaps()
        self.slot_of = {}  # task id -> slot
        self.worker_of = {}  # task id -> worker index
        self.results = {}  # task id -> reply
        self.discarded = set()
        self.outstanding = [0] * num_workers
        self.slot_batch = {}  # slot -> samples per task when created (statistics)
        self.failure = None
        self.pinned = {}
        self._start(specs, start_method, pickler)

    def _start(self, specs, method, pickler):
        mp = multiprocessing.get_context(method)
        if method == "fork":
            payload, loader = specs, None
        else:
            from ..pickling import callback_pickler
            pickler = callback_pickler(pickler)
            payload, loader = pickler[0].dumps(specs, **pickler[1]), _loader_ref(pickler)
        for k in range(self.num_workers):
            parent, child = mp.Pipe()
            close = [c.fileno() for c in self.res.conns] + [parent.fileno()] if method == "fork" else []
            p = mp.Process(target=worker.main, name=f"torchdali-worker-{k}", daemon=True,
                           args=(k, child, self.res.prefix, payload, loader, close))
            p.start()
            child.close()
            self.res.procs.append(p)
            self.res.conns.append(parent)
        # One poll set for the whole life of the pool: replies, and exits through the sentinels.
        self.poller = select.poll()
        self.fd_owner = {}
        for k, (conn, p) in enumerate(zip(self.res.conns, self.res.procs)):
            for fd, kind in ((conn.fileno(), "reply"), (p.sentinel, "exit")):
                self.poller.register(fd, select.POLLIN)
                self.fd_owner[fd] = (kind, k)

    # --- tasks ---
    def pin(self, ctx_id):
        """A worker dedicated to an iterable source (its state lives there)."""
        if ctx_id not in self.pinned:
            self.pinned[ctx_id] = len(self.pinned) % self.num_workers
        return self.pinned[ctx_id]

    def submit(self, ctx_id, kind, args, samples, hint_bytes=0, worker_index=None):
        with self.lock:
            self._check()
            slot = self._slot(samples, hint_bytes)
            k = worker_index if worker_index is not None else min(
                range(self.num_workers), key=lambda i: (i in self.pinned.values(), self.outstanding[i]))
            tid = next(self.task_ids)
            self.slot_of[tid], self.worker_of[tid] = slot, k
            self.outstanding[k] += 1
            try:
                self.res.conns[k].send((tid, ctx_id, kind, args, slot))
            except OSError:
                self._died(k)
            return tid

    def _slot(self, samples, hint_bytes):
        while self.returned:
            self.free_slots.append(self.returned.popleft())
        if self.free_slots:
            return self.free_slots.pop()
        slot = len(self.res.slot_fds)
        fd = os.open(slot_path(self.res.prefix, slot), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        if hint_bytes:
            os.ftruncate(fd, hint_bytes)
        self.res.slot_fds.append(fd)
        self.slot_batch[slot] = max(1, samples)
        return slot

    def wait(self, tids):
        """The replies of `tids`, waiting for them (an error as soon as a worker dies)."""
        while True:
            with self.lock:
                self._check()
                if all(t in self.results for t in tids):
                    return [self.results[t] for t in tids]
                self._pump()

    def _pump(self, timeout=0.5):
        died = []
        for fd, _ in self.poller.poll(timeout * 1000):
            kind, k = self.fd_owner[fd]
            if kind == "exit":
                died.append(k)
                continue
            try:  # one reply per event: the next poll reports any other at once
                self._accept(k, self.res.conns[k].recv())
            except (EOFError, OSError):
                died.append(k)
        for k in died:  # after every reply that came before
            self._died(k)

    def _accept(self, k, reply):
        tid = reply[1]
        self.outstanding[k] -= 1
        if tid in self.discarded:
            self.discarded.remove(tid)
            self._free(tid)
        else:
            self.results[tid] = reply

    def read(self, tids, replies, num_outputs):
        """Per output, the samples the `ok` replies of `tids` describe (in their order). Slots
        that tensors view stay leased until those tensors are freed."""
        arrays = []
        for t, r in zip(tids, replies):
            slot = self.slot_of[t]
            arrays.append(self.maps.array(slot, self.res.slot_fds[slot], slot_end(r[2])))
        outputs, viewed = [], False
        for k in range(num_outputs):
            views = [v for arr, r in zip(arrays, replies) for v in sample_views(arr, r[2][k])]
            out, is_view = assemble(views)
            outputs.append(out)
            viewed |= is_view
        if viewed:
            with self.lock:
                for t, arr in zip(tids, arrays):
                    if arr.size:  # an empty task's slot is not viewed: release() frees it
                        self.worker_of.pop(t, None)
                        # The views keep `arr` alive; deque.append is safe from any thread.
                        weakref.finalize(arr, self.returned.append, self.slot_of.pop(t)).atexit = False
        return outputs

    def release(self, tids):
        with self.lock:
            for t in tids:
                self.results.pop(t, None)
                self._free(t)

    def discard(self, tids):
        """Forget tasks no longer wanted (a new epoch): their slots come back when they finish."""
        with self.lock:
            for t in tids:
                if t in self.results:
                    del self.results[t]
                    self._free(t)
                elif t in self.slot_of:
                    self.discarded.add(t)

    def _free(self, tid):
        self.worker_of.pop(tid, None)
        slot = self.slot_of.pop(tid, None)
        if slot is not None:
            self.free_slots.append(slot)

    # --- failures and shutdown ---
    def _check(self):
        if self.failure is not None:
            raise WorkerDied(self.failure)
        if not self._finalizer.alive:
            raise RuntimeError("parallel external_source: the worker pool was closed")

    def _died(self, k):
        p = self.res.procs[k]
        p.join(timeout=1)
        if self.failure is None:
            self.failure = (f"parallel external_source: Python worker {k} (pid {p.pid}) "
                            f"{_describe_exit(p.exitcode)}; the pool was shut down and the pipeline "
                            "cannot continue, even after reset(): create a new pipeline (an "
                            "out-of-memory kill needs fewer py_num_workers or a smaller "
                            "prefetch_queue_depth).")
        self.close()
        raise WorkerDied(self.failure)

    def close(self):
        """Stop the workers and remove the shared memory (idempotent)."""
        self._finalizer()

    def statistics(self):
        """DALI's `external_source_shm_statistics()` figures for this pool."""
        caps, per_sample = [], []
        for slot, fd in enumerate(self.res.slot_fds):
            cap = os.fstat(fd).st_size
            caps.append(cap)
            per_sample.append(cap // self.slot_batch[slot])
        return {"capacities": caps, "per_sample_capacities": per_sample}
