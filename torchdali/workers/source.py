"""One parallel `external_source` as the pipeline sees it: which tasks make which batch,
`prefetch_queue_depth` batches ahead, and turning replies into batches or errors."""
import pickle

from ..errors import operator_error


def sample_where(info):
    """Where a per-sample source failed, for error messages (both paths)."""
    return (f"sample {info.idx_in_epoch} (idx_in_batch {info.idx_in_batch}, iteration {info.iteration}, "
            f"epoch {info.epoch_idx})")


def batch_where(iteration, epoch):
    return f"the batch of iteration {iteration} (epoch {epoch})"


def source_failure(error, where, type_name=None):
    """What to say of an error raised by an external_source's source (after the operator's name)."""
    return f"the source raised {type_name or type(error).__name__}: {error} for {where}"


class ParallelSource:
    """Schedules and receives the batches of one source, identified in the pool by `ctx_id`."""

    def __init__(self, pool, ctx_id, spec, batch_size, depth, bytes_per_sample_hint, name):
        self.pool = pool
        self.ctx_id = ctx_id
        self.spec = spec
        self.batch_size = batch_size
        self.depth = depth
        self.hint = bytes_per_sample_hint or 0
        self.name = name
        self.scheduled = {}  # (epoch, iteration) -> task ids, in sample order
        self.num_outputs = spec.num_outputs or 1

    def _tasks(self, iteration, epoch):
        n = self.batch_size
        spec = self.spec
        if spec.iterable:
            pinned = self.pool.pin(self.ctx_id)
            return [self.pool.submit(self.ctx_id, "iter", (iteration, epoch), n, self.hint * n, pinned)]
        if spec.batch:
            return [self.pool.submit(self.ctx_id, "batch", (iteration, epoch), n, self.hint * n)]
        chunks = min(n, self.pool.num_workers)
        bounds = [n * c // chunks for c in range(chunks + 1)]
        return [self.pool.submit(self.ctx_id, "sample",
                                 (iteration * n + lo, lo, hi - lo, iteration, epoch), hi - lo,
                                 self.hint * (hi - lo))
                for lo, hi in zip(bounds, bounds[1:])]

    def prefetch(self, iteration, epoch):
        """Have iterations [iteration, iteration + depth) of `epoch` scheduled."""
        for it in range(iteration, iteration + self.depth):
            if (epoch, it) not in self.scheduled:
                self.scheduled[(epoch, it)] = self._tasks(it, epoch)

    def receive(self, iteration, epoch):
        """Per output, the batch of `iteration` (a dense tensor or a list of tensors)."""
        self.prefetch(iteration, epoch)
        tids = self.scheduled.pop((epoch, iteration))
        try:
            replies = self.pool.wait(tids)
            for r in replies:
                if r[0] == "error":
                    raise self._error(r[2])
                if r[0] == "died":
                    raise operator_error("external_source", self.name, r[2] + "; call reset() to go on")
            if any(r[0] == "stop" for r in replies):
                raise StopIteration
            out = self.pool.read(tids, replies, self.num_outputs)
        finally:
            self.pool.release(tids)
        self.prefetch(iteration + 1, epoch)
        return out

    def _error(self, info):
        type_name, message, where, text, exc_bytes = info
        err = operator_error("external_source", self.name, source_failure(message, where or "the batch", type_name) +
                             f" in a worker process.\n\nTraceback in the worker:\n{text}")
        if exc_bytes is not None:
            try:
                err.__cause__ = pickle.loads(exc_bytes)
            except Exception:
                pass
        return err

    def discard(self):
        """Drop everything scheduled (reset() or a restored checkpoint)."""
        for tids in self.scheduled.values():
            self.pool.discard(tids)
        self.scheduled.clear()
