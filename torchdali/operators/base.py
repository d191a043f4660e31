"""The operator form. At build time an operator is given its spec (constant arguments)
and `plan`s once over what is known of its inputs (`BatchSpec`s): every check that does
not depend on the data happens there, and it returns its output specs and the `step`
that runs each batch. A step is given the input batches, the arguments (constants, or
one array per batch for argument inputs) and a run context, and computes over whole
arrays."""
import dataclasses
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch

from ..errors import operator_error
from ..tensor_list import TensorList


@dataclasses.dataclass(frozen=True)
class BatchSpec:
    """What is known of a batch before any data arrives; None: decided by the data."""

    device: str  # "cpu" or "gpu"
    dtype: Optional[torch.dtype] = None
    ndim: Optional[int] = None  # dims of each sample
    layout: Optional[str] = None  # "" for none


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
    unfinished: Optional[List[Callable]] = None  # see finish_later; set by the executor
    frames: Optional[np.ndarray] = None  # over_frames: the batch holds these sequences' frames

    def finish_later(self, finish):
        """Let finish(ctx) complete the operator's outputs when the GPU stage is about to read
        them, instead of now (e.g. a decoder waiting for the GPU's hardware decoder, while
        the decode thread prepares the next batch). True where the executor allows it (an
        operator of the decode stage whose outputs only the GPU stage reads): `finish` may
        then write into the outputs, warn and drop samples. False: finish now."""
        if self.unfinished is None:
            return False
        self.unfinished.append(finish)
        return True

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
    """Keyword-argument values of one batch: constants, or values read from argument
    inputs, converted with the argument's declared type and checked once per batch."""

    def __init__(self, op, arg_batches, rows=None):
        self._op = op
        self._spec = op.spec
        self._batches = arg_batches  # name -> TensorList (CPU)
        self._rows = rows  # sample indices this view keeps (see subset), or None for all
        self._arrays = {}
        self._lists = {}
        self.per_frame = [name for name, b in arg_batches.items() if is_per_frame(b)]
        for name in self.per_frame:
            if not self._spec.schema.args[name].per_frame:
                raise op.error(f"argument input '{name}' is given per frame (layout '{arg_batches[name].layout()}'), "
                               "which this argument does not take; give one value per sample", ValueError)

    def subset(self, rows):
        """These arguments for samples `rows` of the batch only, in that order."""
        return Args(self._op, self._batches, np.asarray(rows, np.int64))

    def frame_counts(self, n):
        """[n] the number of rows each sample's per-frame arguments give (1 where none does); an
        error where two of them disagree, one row serving any number of frames."""
        counts = np.ones(n, np.int64)
        for name in self.per_frame:
            rows = np.array([s.shape[0] for s in self._batches[name].as_torch_list()], np.int64)
            clash = (rows != 1) & (counts != 1) & (rows != counts)
            if clash.any():
                i = int(np.argmax(clash))
                raise self._op.error(f"argument input '{name}' sample {i} has {rows[i]} per-frame values, other "
                                     f"per-frame values of that sample {counts[i]}; give one count (or 1)",
                                     ValueError, sample=i)
            counts = np.maximum(counts, rows)
        return counts

    def over_frames(self, frames):
        """These arguments for every frame of a batch of sequences, `frames[i]` in sample i:
        a per-sample value repeated for each of its sample's frames, a per-frame one's row for
        that frame (a single row serves every frame)."""
        rows = np.repeat(np.arange(len(frames)), frames)
        batches = {}
        for name, batch in self._batches.items():
            samples = batch.as_torch_list()
            if name not in self.per_frame:
                batches[name] = TensorList.make([samples[i] for i in rows], batch.layout(), device=batch.device)
                continue
            for i, (s, f) in enumerate(zip(samples, frames)):
                if len(s) not in (1, f):
                    raise self._op.error(f"argument input '{name}' sample {i} has {len(s)} per-frame values, but the "
                                         f"input's sample {i} has {f} frames; give 1 or {f}", ValueError, sample=i)
            per_frame = [s[k if len(s) > 1 else 0] for s, f in zip(samples, frames) for k in range(f)]
            batches[name] = TensorList.make(per_frame, batch.layout()[1:], device=batch.device)
        return Args(self._op, batches)

    def without_frames(self):
        """These arguments for an input that is not a sequence: a per-frame argument's single
        row per sample (an error where a sample gives more)."""
        if not self.per_frame:
            return self
        counts = self.frame_counts(len(next(iter(self._batches.values()))))
        if (counts != 1).any():
            i = int(np.argmax(counts != 1))
            raise self._op.error(f"sample {i} of a per-frame argument has {counts[i]} values, but input sample {i} is "
                                 "not a sequence; give one value, or a sequence", ValueError, sample=i)
        return Args(self._op, {name: batch if name not in self.per_frame else
                               TensorList.make([s[0] for s in batch.as_torch_list()], batch.layout()[1:],
                                               device=batch.device)
                               for name, batch in self._batches.items()}, self._rows)


    def __getitem__(self, name):
        """The constant value; an error for an argument given per sample."""
        if name in self._batches:
            raise TypeError(f"{self._spec.schema.name}: argument '{name}' is per-sample here; use args.batch()")
        return self._spec.args[name]

    def is_per_sample(self, name):
        return name in self._batches

    def given(self, name):
        """The argument input's batch as given (a TensorList, unconverted), or None for a constant."""
        batch = self._batches.get(name)
        if batch is None or self._rows is None:
            return batch
        return TensorList.make([batch.sample(int(i)) for i in self._rows], batch.layout(), device=batch.device)

    def batch(self, name):
        """The values of `name` for the whole batch: one NumPy array, [N] for a scalar
        argument, [N, k] for a list, or the constant as it was given (it broadcasts)."""
        if name not in self._batches:
            return self._spec.args[name]
        values = self._arrays.get(name)
        if values is None:
            values = _convert_batch(self._op, name, self._batches[name])
            if self._rows is not None:
                values = values[self._rows] if isinstance(values, np.ndarray) else [values[i] for i in self._rows]
            self._arrays[name] = values
        return values

    def rows(self, name, n):
        """List argument `name` as [n, k] float64, one row per sample (a constant repeated),
        or None where it is not given; an error if the samples give different counts."""
        v = self.batch(name)
        if v is None:
            return None
        if self.is_per_sample(name):
            if isinstance(v, list):
                raise self._op.error(f"argument '{name}' has a different number of values per sample", ValueError)
            return np.asarray(v, np.float64).reshape(n, -1)
        v = np.asarray(v, np.float64).reshape(1, -1)
        return np.broadcast_to(v, (n, v.shape[1]))

    def sample(self, name, i):
        """The value of `name` for sample `i`, as a Python value of the argument's type."""
        if name not in self._batches:
            return self._spec.args[name]
        values = self._lists.get(name)
        if values is None:
            values = self._lists[name] = _as_python(self._spec.schema.args[name].type, self.batch(name))
        return values[i]


def is_per_frame(batch):
    """Whether a batch (an argument input, or a transform) holds sequences: its layout starts
    with 'F' (fn.per_frame sets that)."""
    return batch.layout().startswith("F")


_SCALAR_KINDS = {"int": np.int64, "float": np.float64, "bool": np.bool_, "DALIDataType": np.int64,
                 "DALIInterpType": np.int64, "DALIImageType": np.int64}
_LIST_KINDS = {"list of int": np.int64, "list of float": np.float64}


def _convert_batch(op, name, batch):
    """An argument input's batch as one checked array (see Args.batch)."""
    arg = op.spec.schema.args[name]
    kind = arg.type.name
    where = f"argument input '{name}'"
    dense = batch.dense_tensor()
    samples = None if dense is not None else batch.as_torch_list()
    if kind in _SCALAR_KINDS:
        if dense is None:
            if any(s.numel() != 1 for s in samples):
                i = next(i for i, s in enumerate(samples) if s.numel() != 1)
                raise op.error(f"{where} sample {i} has shape {tuple(samples[i].shape)}; expected one "
                               f"value ({arg.type})", TypeError, sample=i)
            dense = torch.stack([s.reshape(()) for s in samples]) if samples else torch.zeros(0)
        elif len(dense) and dense[0].numel() != 1:
            raise op.error(f"{where} has samples of shape {tuple(dense.shape[1:])}; expected one value "
                           f"({arg.type})", TypeError, sample=0)
        raw = dense.reshape(len(dense)).numpy()
        values = _cast(op, where, raw, kind)
    elif kind in _LIST_KINDS:
        if dense is None:
            flat = [s.reshape(-1) for s in samples]
            lengths = {len(f) for f in flat}
            if len(lengths) > 1:  # ragged: one array per sample
                values = [_cast(op, where, f.numpy()[None], kind, sample=i)[0] for i, f in enumerate(flat)]
                _check_values(op, arg, where, values)
                return values
            dense = torch.stack(flat) if flat else torch.zeros(0, 0)
        raw = dense.reshape(len(dense), -1).numpy()
        values = _cast(op, where, raw, kind)
    else:  # strings, callables ...: converted one by one
        values = []
        for i, t in enumerate(batch.as_torch_list()):
            try:
                values.append(arg.type.convert(t.numpy()))
            except (TypeError, ValueError) as e:
                raise op.error(f"{where} sample {i}: {e}", TypeError, sample=i) from None
        return values
    _check_values(op, arg, where, values)
    return values


def _cast(op, where, raw, kind, sample=None):
    """`raw` (a numeric array, one row a sample) as the argument type's array; a TypeError
    names the first sample (or `sample`) whose value the type cannot hold."""
    base = kind.replace("list of ", "")
    if base == "bool":
        bad = (raw != 0) & (raw != 1)
    elif base == "float":
        bad = np.zeros(raw.shape, bool) if raw.dtype.kind in "biuf" else np.ones(raw.shape, bool)
    else:  # integers and enums: integral values
        bad = (raw != np.trunc(raw)) if raw.dtype.kind == "f" else np.zeros(raw.shape, bool)
    if bad.any():
        i = int(np.argwhere(bad)[0][0])
        value, i = raw[i].tolist(), i if sample is None else sample
        raise op.error(f"{where} sample {i} = {value!r} ({raw.dtype}): expected {kind}", TypeError, sample=i)
    return raw.astype(_SCALAR_KINDS.get(kind) or _LIST_KINDS[kind], copy=False)


def _check_values(op, arg, where, values):
    """The argument's declared check and choices over a batch: each distinct value once."""
    if arg.check is None and arg.choices is None:
        return
    rows = values if isinstance(values, list) else np.unique(values, axis=0)
    for row in _as_python(arg.type, rows):
        problem = arg.check(row) if arg.check is not None else None
        if problem is None and arg.choices is not None and row not in arg.choices:
            problem = f"is not one of {list(arg.choices)}"
        if problem:
            i = _first_sample(values, row)
            raise op.error(f"{where} sample {i} = {row!r}: {problem}", ValueError, sample=i)


def _first_sample(values, row):
    if isinstance(values, list):
        return next(i for i, v in enumerate(values) if np.array_equal(v, row))
    row = np.asarray(row)
    same = (values == row) | (np.isnan(values) & np.isnan(row)) if values.dtype.kind == "f" else values == row
    match = same.reshape(len(values), -1).all(axis=1)
    return int(np.argmax(match))


def _as_python(arg_type, values):
    """Batch values as a list of Python values of the argument's type (enums as enums)."""
    out = values.tolist() if isinstance(values, np.ndarray) else \
        [v.tolist() if isinstance(v, np.ndarray) else v for v in values]
    if arg_type.name in ("DALIDataType", "DALIInterpType", "DALIImageType"):
        out = [arg_type.convert(v) for v in out]
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

    def error(self, msg, cls=RuntimeError, *, sample=None, file=None):
        """An OperatorError (also a `cls`) naming this operator and instance."""
        return operator_error(self.name, self.spec.name, msg, cls, sample=sample, file=file)

    def plan(self, inputs: List[BatchSpec]):
        """Once, at build time: check what does not depend on the data and decide what
        the constant arguments decide. Returns (output specs, step), where
        step(inputs, args, ctx) computes one batch. This default knows nothing of the
        outputs and steps with `run`."""
        device = "gpu" if self.spec.device in ("gpu", "mixed") else "cpu"
        return [BatchSpec(device)] * self.spec.num_outputs, self.run

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

    def statistics(self):
        """What the operator reports in Pipeline.executor_statistics() beside the memory
        figures (e.g. the decoders' `decoder_backend`); empty for most."""
        return {}


class RandomOperator(Operator):
    """An operator with its own deterministic random generator."""

    def __init__(self, spec):
        super().__init__(spec)
        self.rng = np.random.Generator(np.random.PCG64(spec.seed))

    def state_dict(self):
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state):
        self.rng.bit_generator.state = state["rng"]


def shapes_or_none(batch):
    """The batch's sample shapes [N, ndim], or None where the samples differ in ndim."""
    try:
        return batch.sample_shapes()
    except ValueError:
        return None


def sample_shapes(op, batch):
    """The batch's sample shapes [N, ndim]; an error naming `op` where the samples differ in ndim."""
    try:
        return batch.sample_shapes()
    except ValueError as e:
        raise op.error(str(e), ValueError) from None


def map_samples(fn, samples, ctx, parallel=True):
    """fn(i, sample) for each sample, across the pipeline's CPU threads when worthwhile:
    one task per thread, each over a contiguous chunk (a task per sample costs more in
    scheduling than a small decode or read)."""
    n = len(samples)
    pool = ctx.thread_pool
    if not parallel or n <= 1 or pool is None or ctx.num_threads <= 1:
        return [fn(i, s) for i, s in enumerate(samples)]
    chunks = min(n, ctx.num_threads)
    bounds = [n * k // chunks for k in range(chunks + 1)]

    def work(k):
        return [fn(i, samples[i]) for i in range(bounds[k], bounds[k + 1])]

    return [r for part in pool.map(work, range(chunks)) for r in part]
