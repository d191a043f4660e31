"""Per-operator output memory figures (`Pipeline.executor_statistics()` with
`enable_memory_stats=True`), under DALI's keys. Each figure is the largest seen so far,
which is what sizing hints such as `bytes_per_sample_hint` need."""
import threading

KEYS = ("real_memory_size", "max_real_memory_size", "reserved_memory_size", "max_reserved_memory_size")


def batch_memory(batch):
    """(bytes of the samples, bytes of the largest sample, bytes of the storage holding
    them, largest storage of one sample): DALI's real and reserved sizes."""
    samples = batch.as_torch_list()
    sizes = [s.numel() * s.element_size() for s in samples]
    dense = batch.as_torch() if batch.is_dense_tensor() and samples else None
    if dense is not None:
        reserved = dense.untyped_storage().nbytes()
        per_sample = reserved // len(samples)
    else:
        storages = {s.untyped_storage().data_ptr(): s.untyped_storage().nbytes() for s in samples}
        reserved = sum(storages.values())
        per_sample = max((s.untyped_storage().nbytes() for s in samples), default=0)
    return sum(sizes), max(sizes, default=0), reserved, per_sample


class MemoryStats:
    """The figures of every operator output, updated as iterations run."""

    def __init__(self):
        self._lock = threading.Lock()
        self._stats = {}

    def record(self, node, outputs):
        key = f"{node.device.upper()}_{node.name}"
        figures = [batch_memory(b) for b in outputs]
        with self._lock:
            old = self._stats.setdefault(key, [(0, 0, 0, 0)] * len(figures))
            self._stats[key] = [tuple(max(a, b) for a, b in zip(o, f)) for o, f in zip(old, figures)]

    def as_dict(self):
        with self._lock:
            return {key: {name: [f[i] for f in outs] for i, name in enumerate(KEYS)}
                    for key, outs in self._stats.items()}
