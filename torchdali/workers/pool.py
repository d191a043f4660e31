"""The pool of Python worker processes behind a pipeline's parallel `external_source`s.

The pipeline's process sends small task messages over one pipe per worker and polls
the pipes and the processes' sentinels together, so a worker that dies is noticed
at once (never a hang). Results are kept by task id until their source asks for them,
which keeps every batch in the order of the non-parallel run whatever order the
workers finish in.

A worker that dies is replaced, and the tasks it held go to the new worker: a callable
source is a function of its sample or batch index, so every sample is computed again,
exactly once. The task the worker was computing when it died becomes an error if it
kills the new worker too (a source that crashes its process on that sample), and so does
an iterable's task at once (its iterator's state died with the worker); the pipeline then
goes on after reset()."""
import collections
import itertools
import multiprocessing
import os
import secrets
import select
import signal
import threading
import types as pytypes
import warnings
import weakref

import torch

from . import worker
from .shm import SlotMaps, assemble, remove_all, sample_views, slot_end, slot_path
from .source import batch_where


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


def _describe_task(msg):
    """The samples a task message asks for, for error messages."""
    _, _, kind, args, _ = msg
    if kind == "sample":
        first, _, count, iteration, epoch = args
        return f"samples {first} to {first + count - 1} (iteration {iteration}, epoch {epoch})"
    return batch_where(*args)


class _Resources:
    """What must be released when the pool goes: processes, pipes, slot files."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.procs = []
        self.conns = []
        self.slot_fds = []

    def release(self):
        self.procs = [p for p in self.procs if p is not None]
        self.conns = [c for c in self.conns if c is not None]
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
        self.sent = {}  # task id -> its message, until the reply comes (sent again if the worker dies)
        self.deaths = collections.Counter()  # task id -> workers that died computing it
        self.deaths_in_a_row = [0] * num_workers  # per worker index, deaths since its last reply
        self.slot_batch = {}  # slot -> samples per task when created (statistics)
        self.failure = None
        self.pinned = {}
        self.iterator_epoch = {}  # iterable's context id -> the epoch its worker's iterator is in
        self.lost_iterators = {}  # iterable's context id -> (epoch, why): its worker died in that epoch
        self._start(specs, start_method, pickler)

    def _start(self, specs, method, pickler):
        self.mp = multiprocessing.get_context(method)
        if method == "fork":
            self.payload, self.loader = specs, None
        else:
            from ..pickling import callback_pickler
            pickler = callback_pickler(pickler)
            self.payload, self.loader = pickler[0].dumps(specs, **pickler[1]), _loader_ref(pickler)
        # One poll set for the pool: replies, and exits through the processes' sentinels.
        self.poller = select.poll()
        self.fd_owner = {}
        self.res.procs = [None] * self.num_workers
        self.res.conns = [None] * self.num_workers
        for k in range(self.num_workers):
            self._spawn(k)

    def _spawn(self, k):
        """Start worker `k` (at first, or in place of a dead one)."""
        parent, child = self.mp.Pipe()
        close = []
        if self.mp.get_start_method() == "fork":  # the other workers' pipe ends, inherited
            close = [c.fileno() for c in self.res.conns if c is not None] + [parent.fileno()]
        p = self.mp.Process(target=worker.main, name=f"torchdali-worker-{k}", daemon=True,
                            args=(k, child, self.res.prefix, self.payload, self.loader, close))
        try:
            p.start()
        finally:
            child.close()
        self.res.procs[k], self.res.conns[k] = p, parent
        for fd, kind in ((parent.fileno(), "reply"), (p.sentinel, "exit")):
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
            msg = self.sent[tid] = (tid, ctx_id, kind, args, slot)
            lost = self.lost_iterators.get(ctx_id)
            if kind == "iter" and lost is not None and lost[0] == args[1]:  # mid-epoch: no iterator to go on with
                self._fail(tid, f"{lost[1]} before {_describe_task(msg)}; the iterable's state died with it")
                return tid
            if kind == "iter":
                self.iterator_epoch[ctx_id] = args[1]
            self._send(k, tid)
            return tid

    def _send(self, k, tid):
        self.outstanding[k] += 1
        try:
            self.res.conns[k].send(self.sent[tid])
        except OSError:
            self._died(k)

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
        """The replies of `tids`, waiting for them (a dead worker is replaced at once, never a hang)."""
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
        for k in dict.fromkeys(died):  # after every reply that came before
            self._died(k)

    def _accept(self, k, reply):
        tid = reply[1]
        self.outstanding[k] -= 1
        self.deaths_in_a_row[k] = 0
        del self.sent[tid]
        self.deaths.pop(tid, None)
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

    # A worker index whose processes die this often in a row without a reply (at start, or
    # killed again and again) ends the pool.
    MAX_DEATHS_IN_A_ROW = 3

    def _died(self, k):
        """Replace dead worker `k` and send it the tasks the dead one held (see the module's text)."""
        p, conn = self.res.procs[k], self.res.conns[k]
        p.join(timeout=1)
        if p.is_alive():  # its pipe broke, yet it runs: it goes too
            p.kill()
            p.join()
        try:
            while conn.poll():  # replies sent before it died
                self._accept(k, conn.recv())
        except (EOFError, OSError):
            pass
        for fd in (conn.fileno(), p.sentinel):
            self.poller.unregister(fd)
            del self.fd_owner[fd]
        conn.close()
        self.res.procs[k] = self.res.conns[k] = None
        died = f"Python worker {k} (pid {p.pid}) {_describe_exit(p.exitcode)}"
        self.deaths_in_a_row[k] += 1
        self.outstanding[k] = 0
        held = [t for t in self.sent if self.worker_of.get(t) == k]  # in the order sent: held[0] was running
        try:
            if self.deaths_in_a_row[k] >= self.MAX_DEATHS_IN_A_ROW:
                raise RuntimeError(f"it died {self.deaths_in_a_row[k]} times in a row without a result")
            self._spawn(k)
        except Exception as e:  # noqa: BLE001 - any failure to go on ends the pool, named
            self.failure = (f"parallel external_source: {died}, and the pool cannot go on ({e}); the "
                            "pipeline cannot continue, even after reset(): create a new pipeline (an "
                            "out-of-memory kill needs fewer py_num_workers or a smaller prefetch_queue_depth).")
            self.close()
            raise WorkerDied(self.failure) from None
        again = []
        for position, t in enumerate(held):
            msg = self.sent[t]
            if t in self.discarded:
                self.discarded.remove(t)
                del self.sent[t]
                self._free(t)
                continue
            if position == 0:
                self.deaths[t] += 1
            if msg[2] == "iter":
                fate = "; the iterable's state died with it, so this batch cannot be computed again"
            elif self.deaths[t] > 1:
                fate = ", and so did a new worker computing them again"
            else:
                again.append(t)
                continue
            self._fail(t, f"{died} while computing {_describe_task(msg)}{fate}")
        for ctx_id, index in self.pinned.items():
            if index == k and ctx_id in self.iterator_epoch:
                self.lost_iterators[ctx_id] = (self.iterator_epoch[ctx_id], died)
        redo = f" and computes again the {len(again)} task(s) it held" if again else ""
        warnings.warn(f"parallel external_source: {died}; a new worker (pid {self.res.procs[k].pid}) took its "
                      f"place{redo}", RuntimeWarning)
        for t in again:
            self._send(k, t)

    def _fail(self, tid, message):
        """Task `tid` ends in an error reply that names why (a worker's death)."""
        del self.sent[tid]
        self.deaths.pop(tid, None)
        self.results[tid] = ("died", tid, message)

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
