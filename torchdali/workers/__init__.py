"""Worker processes for parallel `external_source` (fork or spawn, shared memory)."""
from .pool import WorkerDied, WorkerPool
from .source import ParallelSource
from .worker import SourceSpec

__all__ = ["WorkerDied", "WorkerPool", "ParallelSource", "SourceSpec"]
