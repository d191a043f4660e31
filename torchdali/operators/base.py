"""What every operator implementation is given: its spec at build time, and per
iteration its input batches, its arguments (constants or per-sample values) and a
run context."""
import dataclasses
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from ..tensor_list import TensorList


@dataclasses.dataclass
class OpSpec:
    """A built operator instance's fixed configuration."""

    schema: Any
    name: str
    device: str
    args: Dict[str, Any]  # constants (converted); arg inputs absent
    arg_input_names: tuple
    num_outputs: int
    seed: int  # resolved: the `seed` argument or one derived from the pipeline's seed
    max_batch_size: int
    num_threads: int
    device_id: Optional[int]
    input_devices: tuple = ()


@dataclasses.dataclass
class RunContext:
    """Per-iteration facts an operator may need."""

    iteration: int
    batch_size: int
    thread_pool: Any  # concurrent.futures.Executor with num_threads workers
    num_threads: int = 1
    cuda_device: Optional[torch.device] = None
    dropped: List[int] = dataclasses.field(default_factory=list)
    messages: List[str] = dataclasses.field(default_factory=list)

    def warn(self, message):
        """A warning for the user, issued in their thread when this iteration's outputs
        are returned (operators run in the pipeline's worker threads)."""
        self.messages.append(message)

    def drop_samples(self, indices):
        """Remove these samples (indices into the current batch) from the whole
        iteration, so every output of the pipeline stays aligned (e.g. undecodable
        images skipped with on_error="skip"). Return the operator's outputs without them."""
        self.dropped.extend(int(i) for i in indices)


class Args:
    """Keyword-argument values of one iteration: constants, or per-sample values read
    from argument inputs (converted with the argument's declared type)."""

    def __init__(self, spec, arg_batches):
        self._spec = spec
        self._batches = arg_batches  # name -> TensorList (CPU)
        self._cache = {}

    def __getitem__(self, name):
        """The constant value; an error for an argument given per sample."""
        if name in self._batches:
            raise TypeError(f"{self._spec.schema.name}: argument '{name}' is per-sample here; use args.sample()")
        return self._spec.args[name]

    def is_per_sample(self, name):
        return name in self._batches

    def sample(self, name, i):
        """The value of `name` for sample `i`."""
        if name not in self._batches:
            return self._spec.args[name]
        values = self._cache.get(name)
        if values is None:
            values = self._cache[name] = self._convert(name)
        return values[i]

    def per_sample(self, name, n):
        """The values of `name` for samples 0..n-1, as a list."""
        return [self.sample(name, i) for i in range(n)]

    def _convert(self, name):
        arg = self._spec.schema.args[name]
        batch = self._batches[name]
        out = []
        for i, t in enumerate(batch.as_torch_list()):
            a = t.numpy()
            value = a.item() if a.size == 1 and arg.type.name in ("int", "float", "bool", "DALIDataType",
                                                                 "DALIInterpType", "DALIImageType") else a
            try:
                value = arg.type.convert(value)
            except (TypeError, ValueError) as e:
                raise TypeError(f"{self._spec.schema.name}: argument input '{name}' sample {i} "
                                f"(shape {tuple(a.shape)}, {a.dtype}): {e}") from None
            if arg.check is not None:
                problem = arg.check(value)
                if problem:
                    raise ValueError(f"{self._spec.schema.name}: argument input '{name}' sample {i} "
                                     f"= {value!r}: {problem}")
            out.append(value)
        return out


class Operator:
    """Base of operator implementations.

    `run(inputs, args, ctx)` takes a list of input TensorLists and returns a list of
    outputs, each a TensorList, a dense batched tensor or a list of sample tensors.
    Stateful operators override `state_dict`/`load_state_dict` (checkpoints) and
    `reset` (new epoch after StopIteration)."""

    is_source = False  # produces the batch (readers, external_source): sets the batch size

    def __init__(self, spec: OpSpec):
        self.spec = spec

    @property
    def name(self):
        return self.spec.schema.name

    def error(self, msg, cls=RuntimeError):
        return cls(f"{self.name} ('{self.spec.name}'): {msg}")

    def run(self, inputs: List[TensorList], args: Args, ctx: RunContext):
        raise NotImplementedError

    def check_rank(self, images):
        """The samples' common number of dims; a ValueError naming the first sample that
        differs from sample 0."""
        ndim = images[0].dim()
        for i, im in enumerate(images):
            if im.dim() != ndim:
                raise self.error(f"sample {i} has shape {tuple(im.shape)}, not {ndim} dims", ValueError)
        return ndim

    def reset(self):
        """Start a new epoch after the pipeline's reset()."""

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass

    def meta(self):
        """Reader metadata (readers only)."""
        return None


class RandomOperator(Operator):
    """An operator with its own deterministic random generator."""

    def __init__(self, spec):
        super().__init__(spec)
        self.rng = np.random.Generator(np.random.PCG64(spec.seed))

    def state_dict(self):
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state):
        self.rng.bit_generator.state = state["rng"]


def map_samples(fn, samples, ctx, parallel=True):
    """fn(i, sample) for each sample, across the pipeline's CPU threads when worthwhile:
    one task per thread, each over a contiguous chunk (a task per sample costs more in
    scheduling than a small decode or read)."""
    n = len(samples)
    pool = ctx.thread_pool
    if not parallel or n <= 1 or pool is None:
        return [fn(i, s) for i, s in enumerate(samples)]
    chunks = min(n, ctx.num_threads)
    bounds = [n * k // chunks for k in range(chunks + 1)]

    def work(k):
        return [fn(i, samples[i]) for i in range(bounds[k], bounds[k + 1])]

    return [r for part in pool.map(work, range(chunks)) for r in part]
