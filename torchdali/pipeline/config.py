"""A Pipeline's configuration: its constructor arguments, checked once when it is made
(and again when deserialization fills in what was left unset), with what follows from
them (the seed in use, the two prefetch queue sizes). Serialization stores `stored()`."""
import dataclasses
from typing import Any, Optional

import numpy as np

from . import output_checks

# Constructor arguments that serialization stores (the seed as the one in use).
STORED = ("batch_size", "num_threads", "device_id", "seed", "exec_pipelined", "exec_async",
          "prefetch_queue_depth", "bytes_per_sample", "set_affinity", "enable_memory_stats",
          "enable_checkpointing", "py_num_workers", "py_start_method", "output_dtype",
          "output_ndim", "exec_dynamic")


@dataclasses.dataclass
class PipelineConfig:
    """See `Pipeline`'s arguments. exec_dynamic, as in DALI 2.4, is on unless given False, or
    unless exec_async or exec_pipelined is off or the prefetch queues are separated; it allows
    moving GPU data to the CPU (DataNode.cpu()) and, as DALI's dynamic executor, keeps no
    memory statistics. torchdali's executor is otherwise the same either way."""

    batch_size: int = -1
    num_threads: int = -1
    device_id: Optional[int] = -1  # -1: the current CUDA device, None: CPU only
    seed: Optional[int] = -1
    exec_pipelined: bool = True
    prefetch_queue_depth: Any = 2
    exec_async: bool = True
    bytes_per_sample: int = 0
    set_affinity: bool = False
    enable_memory_stats: bool = False
    enable_checkpointing: bool = False
    py_num_workers: int = 1
    py_start_method: str = "fork"
    py_callback_pickler: Any = None
    output_dtype: Any = None
    output_ndim: Any = None
    exec_dynamic: Optional[bool] = None  # None: on where the other arguments allow it
    # What follows from the arguments.
    seed_value: int = dataclasses.field(init=False)
    cpu_queue: int = dataclasses.field(init=False)
    gpu_queue: int = dataclasses.field(init=False)
    exec_separated: bool = dataclasses.field(init=False)

    def __post_init__(self):
        self.exec_pipelined, self.exec_async = bool(self.exec_pipelined), bool(self.exec_async)
        self.enable_checkpointing = bool(self.enable_checkpointing)
        self.seed_value = int(self.seed) if self.seed is not None and self.seed >= 0 else \
            int(np.random.SeedSequence().generate_state(1)[0] & 0x7FFFFFFF)
        depth = self.prefetch_queue_depth
        if isinstance(depth, dict):
            unknown = set(depth) - {"cpu_size", "gpu_size"}
            if unknown:
                raise ValueError(f"Pipeline: prefetch_queue_depth has unknown keys {sorted(unknown)}; "
                                 "use {'cpu_size': x, 'gpu_size': y}")
            self.cpu_queue, self.gpu_queue = int(depth.get("cpu_size", 2)), int(depth.get("gpu_size", 2))
            self.exec_separated = True
            if not (self.exec_async and self.exec_pipelined) or self.exec_dynamic:
                raise ValueError("Pipeline: separate prefetch queues need exec_async=True, "
                                 "exec_pipelined=True and exec_dynamic=False")
        elif isinstance(depth, int) and not isinstance(depth, bool):
            self.cpu_queue = self.gpu_queue = depth
            self.exec_separated = False
        else:
            raise TypeError(f"Pipeline: prefetch_queue_depth must be an int or a dict, got {depth!r}")
        if self.exec_dynamic is None:
            self.exec_dynamic = self.exec_async and self.exec_pipelined and not self.exec_separated
        self.exec_dynamic = bool(self.exec_dynamic)
        if self.cpu_queue < 1 or self.gpu_queue < 1:
            raise ValueError("Pipeline: prefetch_queue_depth must be at least 1")
        if self.py_start_method not in ("fork", "spawn"):
            raise ValueError(f"Pipeline: py_start_method must be 'fork' or 'spawn', got {self.py_start_method!r}")
        if self.py_callback_pickler is not None and self.py_start_method == "fork":
            raise ValueError("Pipeline: py_callback_pickler applies to py_start_method='spawn' only "
                             "(forked workers get the callbacks without pickling)")
        workers = self.py_num_workers
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 0:
            raise ValueError(f"Pipeline: py_num_workers must be a non-negative int, got {workers!r}")
        output_checks.check_declaration("output_dtype", self.output_dtype)
        output_checks.check_declaration("output_ndim", self.output_ndim)

    def check_runnable(self):
        """What build() needs that a pipeline to be deserialized may still lack."""
        if self.batch_size is None or self.batch_size < 1:
            raise ValueError(f"Pipeline: batch_size must be a positive int, got {self.batch_size}")
        if self.num_threads is None or self.num_threads < 1:
            raise ValueError(f"Pipeline: num_threads must be a positive int, got {self.num_threads}")

    def stored(self):
        """The arguments serialization keeps, the seed as the one in use."""
        return {name: self.seed_value if name == "seed" else getattr(self, name) for name in STORED}

    def filled_from(self, stored):
        """This configuration with batch_size, num_threads, device_id and seed taken from
        `stored` where they were left unset (deserialize_and_build)."""
        unset = {"batch_size": self.batch_size is None or self.batch_size < 1,
                 "num_threads": self.num_threads is None or self.num_threads < 1,
                 "device_id": self.device_id == -1, "seed": self.seed is None or self.seed < 0}
        args = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        args.update({name: stored[name] for name, missing in unset.items() if missing})
        return PipelineConfig(**args)
