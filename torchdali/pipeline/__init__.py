"""`Pipeline` and `pipeline_def`: define a graph once, then run it batch by batch."""
import functools
import inspect
import warnings

import torch

from .. import _current, conditionals
from ..executor import AsyncRunner, Executor, Failure, Halt, SyncRunner, hand_over
from ..graph import DataNode, Definition, call_operator, topological_order
from ..operators.external_source import worker_spec
from ..workers import ParallelSource, WorkerPool
from . import checkpoints, output_checks
from .config import PipelineConfig

class Pipeline:
    """A data processing graph and the engine that runs it (DALI's `Pipeline`)."""

    def __init__(self, batch_size=-1, num_threads=-1, device_id=-1, seed=-1, exec_pipelined=True,
                 prefetch_queue_depth=2, exec_async=True, bytes_per_sample=0, set_affinity=False,
                 max_streams=None, default_cuda_stream_priority=None, *, enable_memory_stats=False,
                 enable_checkpointing=False, checkpoint=None, py_num_workers=1, py_start_method="fork",
                 py_callback_pickler=None, output_dtype=None, output_ndim=None, exec_dynamic=None,
                 experimental_exec_dynamic=None):
        if max_streams is not None and max_streams != -1:
            warnings.warn("max_streams is deprecated and has no effect", DeprecationWarning, stacklevel=2)
        if default_cuda_stream_priority not in (None, 0):
            warnings.warn("default_cuda_stream_priority is deprecated and has no effect",
                          DeprecationWarning, stacklevel=2)
        if experimental_exec_dynamic is not None:
            exec_dynamic = exec_dynamic or experimental_exec_dynamic
        self.config = PipelineConfig(
            batch_size, num_threads, device_id, seed, exec_pipelined, prefetch_queue_depth, exec_async,
            bytes_per_sample, set_affinity, enable_memory_stats, enable_checkpointing, py_num_workers,
            py_start_method, py_callback_pickler, output_dtype, output_ndim, exec_dynamic)
        self._checkpoint_to_restore = checkpoint
        self._py_pool = None
        self._py_specs = {}
        self.definition = Definition()
        self._graph_defined = False
        self._built = False
        self._executor = None
        self._runner = None
        self._first_run = True
        self._shared = None
        self._api_mode = None
        self._api_check = True
        self._setup_ended = False  # iter_setup() raised StopIteration: nothing more is scheduled until reset()
        self._restored = False
        self._iterator_data = None  # what an iterator stored in the checkpoint restored from
        self._next_index = 0  # the iteration the next outputs() returns
        self._stopped = None  # what outputs() raised (StopIteration or an error) since the last reset()

    # --- properties ---
    @property
    def batch_size(self):
        """The number of samples of each batch (DALI's maximum batch size)."""
        return self.config.batch_size

    @property
    def max_batch_size(self):
        """The largest batch the pipeline makes: `batch_size` (a source may give fewer samples)."""
        return self.config.batch_size

    @property
    def num_threads(self):
        """The CPU threads an operator spreads its batch over."""
        return self.config.num_threads

    @property
    def device_id(self):
        """The GPU used by the pipeline, None for a CPU-only pipeline."""
        if self.config.device_id is None:
            return None
        if self.config.device_id == -1:
            return torch.cuda.current_device() if torch.cuda.is_available() else None
        return self.config.device_id

    @property
    def seed(self):
        """The seed of the random operators, None when none was given (each run then draws its own)."""
        return self.config.seed if self.config.seed is not None and self.config.seed >= 0 else None

    @property
    def exec_pipelined(self):
        """Whether the stages of consecutive iterations overlap."""
        return self.config.exec_pipelined

    @property
    def exec_async(self):
        """Whether the stages run in threads of their own, ahead of the caller."""
        return self.config.exec_async

    @property
    def exec_dynamic(self):
        """Whether GPU data may come back to the host (`DataNode.cpu()`), as DALI's dynamic executor allows."""
        return self.config.exec_dynamic

    @property
    def exec_separated(self):
        """Whether the CPU and GPU prefetch queues are sized separately."""
        return self.config.exec_separated

    @property
    def prefetch_queue_depth(self):
        """The batches in flight: an int, or {"cpu_size": c, "gpu_size": g}."""
        return self.config.prefetch_queue_depth

    @property
    def cpu_queue_size(self):
        """The batches the CPU stage may work ahead."""
        return self.config.cpu_queue

    @property
    def gpu_queue_size(self):
        """The finished batches that may wait for the caller."""
        return self.config.gpu_queue

    @property
    def set_affinity(self):
        """Accepted for DALI's API: torchdali does not pin its threads to cores."""
        return self.config.set_affinity

    @property
    def enable_memory_stats(self):
        """Whether executor_statistics() reports each operator's memory."""
        return self.config.enable_memory_stats

    @property
    def max_streams(self):
        """Deprecated in DALI and without effect: always -1."""
        return -1

    @property
    def default_cuda_stream_priority(self):
        """Deprecated in DALI and without effect: always 0."""
        return 0

    @property
    def py_num_workers(self):
        """The worker processes of the parallel external sources."""
        return self.config.py_num_workers

    @property
    def py_start_method(self):
        """How those workers start: 'fork' or 'spawn'."""
        return self.config.py_start_method

    @property
    def num_outputs(self):
        """The number of the pipeline's outputs (defines the graph if it is not yet)."""
        self._ensure_graph()
        return len(self.definition.outputs)

    @property
    def is_restored_from_checkpoint(self):
        """Whether the pipeline took its state from a checkpoint."""
        return self._restored

    def output_dtype(self):
        """The declared type of each output (None where not declared)."""
        return self._output_declarations()[0]

    def output_ndim(self):
        """The declared number of dimensions of each output (None where not declared)."""
        return self._output_declarations()[1]

    def _output_declarations(self):
        self._ensure_graph()
        return output_checks.expand(self.config.output_dtype, self.config.output_ndim, len(self.definition.outputs))

    # --- the current pipeline ---
    @staticmethod
    def current():
        """The pipeline whose graph is being defined (inside `with pipe:`), or None."""
        return _current.pipeline()

    @staticmethod
    def push_current(pipeline):
        """Make `pipeline` the one that operator calls add to (what `with pipeline:` does)."""
        _current.stack().append(pipeline)

    @staticmethod
    def pop_current():
        """Stop adding operator calls to the current pipeline; returns it."""
        return _current.stack().pop()

    def __enter__(self):
        Pipeline.push_current(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        Pipeline.pop_current()

    # --- graph definition ---
    def define_graph(self):
        """Override in a subclass to return the pipeline's outputs (the legacy API)."""
        raise NotImplementedError("define the graph with set_outputs(), @pipeline_def or a define_graph override")

    def set_outputs(self, *output_data_nodes):
        """Set the pipeline's outputs (DataNodes; constants become constant outputs)."""
        if self._built:
            raise RuntimeError("set_outputs() after build()")
        self.definition.outputs = flatten_outputs(output_data_nodes)
        self._graph_defined = True

    def add_sink(self, edge):
        """Keep `edge`'s operator even if it reaches no output."""
        self.definition.sinks.append(edge.source)

    def _ensure_graph(self, define_graph=None):
        if self._graph_defined or self.definition.function is not None:  # debug: what the last run defined
            return
        with self:
            outs = (define_graph or self.define_graph)()
        self.definition.outputs = flatten_outputs(outs if isinstance(outs, (list, tuple)) else [outs])
        self._graph_defined = True

    # --- build and run ---
    def start_py_workers(self):
        """Start the worker processes of the parallel external sources. With 'fork', call it on
        every such pipeline before anything initialises CUDA; build() calls it otherwise.
        With py_num_workers=0 parallel sources run in-process and nothing starts."""
        self._ensure_graph()
        if self._py_pool is not None or self.config.py_num_workers == 0:
            return
        nodes = [n for n in topological_order(self.definition.outputs, self.definition.sinks)
                 if n.schema.name == "external_source" and n.args.get("parallel")]
        if not nodes:
            return
        self._py_specs = {n.id: worker_spec(n.args) for n in nodes}
        self._py_pool = WorkerPool(self._py_specs, self.config.py_num_workers, self.config.py_start_method,
                                   self.config.py_callback_pickler)

    def _attach_py_workers(self):
        for step in self._executor.steps:
            spec = self._py_specs.get(step.node.id)
            if spec is not None:
                a = step.node.args
                step.impl.worker = ParallelSource(self._py_pool, step.node.id, spec, self.max_batch_size,
                                                  a["prefetch_queue_depth"] or 1, a["bytes_per_sample_hint"][0],
                                                  step.node.name)

    def external_source_shm_statistics(self):
        """Shared memory used by the parallel external sources: `capacities` (bytes per slot)
        and `per_sample_capacities` (a slot's bytes per sample of its task)."""
        if self._py_pool is None:
            return {"capacities": [], "per_sample_capacities": []}
        return self._py_pool.statistics()

    def build(self, define_graph=None):
        """Check the graph and plan its execution (optional: run() builds on demand)."""
        if self._built:
            return
        self.config.check_runnable()
        if self.definition.function is not None:  # debug mode: the definition runs at every iteration
            from .debug import DebugRunner
            self._executor = self._runner = DebugRunner(self, self.definition.function)
            self._built = True
            return
        self._ensure_graph(define_graph)
        outputs = self.definition.outputs
        self._output_declarations()
        if any(n.device != "cpu" for n in topological_order(outputs, self.definition.sinks)):
            if self.device_id is None:
                raise RuntimeError("the pipeline has GPU operators but no GPU: pass a device_id "
                                   "(or device_id=None only for CPU-only pipelines)")
            if not torch.cuda.is_available():
                raise RuntimeError("the pipeline has GPU operators but CUDA is not available")
        self.start_py_workers()  # before the executor touches CUDA
        self._executor = Executor(self, outputs, self.definition.sinks)
        self._attach_py_workers()
        if self.config.exec_async and self.config.exec_pipelined:
            self._runner = AsyncRunner(self._executor, self.config.cpu_queue, self.config.gpu_queue)
        else:
            self._runner = SyncRunner(self._executor)
        self._built = True
        if self._checkpoint_to_restore is not None:
            self._restore(self._checkpoint_to_restore)

    def enable_api_check(self, enable):
        """Turn on (default) or off the check that run() is not mixed with
        schedule_run()/share_outputs()/release_outputs() on this pipeline."""
        self._api_check = bool(enable)

    def iter_setup(self):
        """A hook called before each iteration is scheduled (run(), schedule_run(), and each
        iteration that fills the prefetch queue); override it to feed external sources with
        feed_input(). Raising StopIteration ends the epoch: outputs() raises StopIteration
        once the iterations already scheduled are returned. Deprecated in DALI in favour of
        external_source's `source`."""

    def _schedule_one(self):
        """iter_setup(), then one iteration scheduled; False once iter_setup ended the epoch."""
        if self._setup_ended:
            return False
        try:
            self.iter_setup()
        except StopIteration as e:
            self._setup_ended = True
            self._stopped = self._stopped or Halt(e)
            return False
        self._runner.schedule()
        return True

    def _check_mode(self, mode):
        if not self._api_check:
            return
        if self._api_mode is None:
            self._api_mode = mode
        elif self._api_mode != mode:
            raise RuntimeError("mixing run() with schedule_run()/share_outputs()/release_outputs() "
                               "on one pipeline is not allowed")

    def schedule_run(self):
        """Start the next iteration(s) without waiting; on the first call, fill the
        prefetch queue."""
        self.build()
        if self._first_run:
            self._first_run = False
            # Separate queues: the CPU stage's buffers, then the GPU stage's, all filled.
            depth = (self.config.cpu_queue + self.config.gpu_queue if self.exec_separated else self.config.cpu_queue) \
                if self.config.exec_pipelined else 1
            for _ in range(depth):
                if not self._schedule_one():
                    break
        else:
            self._schedule_one()

    def _next(self, cuda_stream):
        if self._stopped is not None and self._runner.undelivered() == 0:
            raise self._stopped.error()  # as DALI: stopped until reset(), even with nothing scheduled
        item = self._runner.next()
        if isinstance(item, Failure):
            exc = item.exc
            self._stopped = Halt(exc)
            del item
            try:
                raise exc
            finally:
                del exc  # no cycle exception -> traceback -> this frame -> exception
        self._next_index = item.index + 1
        for message in item.ctx.messages:
            warnings.warn(message, stacklevel=3)
        outs = item.outputs
        self._check_outputs(outs)
        hand_over(item, cuda_stream)
        return outs

    def outputs(self, cuda_stream=None):
        """The next iteration's outputs (blocks until ready)."""
        self.build()
        return tuple(self._next(cuda_stream))

    def share_outputs(self, cuda_stream=None):
        """The next iteration's outputs, held until release_outputs() (the scheduled API,
        with schedule_run())."""
        self._check_mode("scheduled")
        self.build()
        self._shared = tuple(self._next(cuda_stream))
        return self._shared

    def release_outputs(self):
        """Give back the buffers of share_outputs(); the tensors are reference counted,
        so this only drops the pipeline's reference."""
        self._check_mode("scheduled")
        self._shared = None

    def run(self, cuda_stream=None, /, **pipeline_inputs):
        """Run one iteration and return its outputs (a tuple of TensorLists)."""
        self._check_mode("basic")
        self.build()
        if pipeline_inputs:
            if self._runner.runs_ahead and (self.config.cpu_queue != 1 or self.config.gpu_queue != 1):
                raise ValueError("run() with pipeline inputs needs prefetch_queue_depth=1")
            for name, data in pipeline_inputs.items():
                self.feed_input(name, data)
        self.schedule_run()
        return self.outputs(cuda_stream)

    def reset(self):
        """Start the next epoch after outputs() raised StopIteration (or an error): drop
        scheduled iterations and rewind external sources. As in DALI, it does nothing
        while the epoch runs, so prefetched batches and the readers' positions are kept."""
        if not self._built or self._stopped is None:
            return
        self._stopped = None
        self._setup_ended = False
        self._runner.clear()
        self._executor.reset()
        self._next_index = self._executor.iteration
        self._first_run = True

    def empty(self):
        """True when no scheduled iteration waits to be returned by outputs()."""
        return not self._built or self._runner.undelivered() == 0

    def feed_input(self, data_node, data, layout=None, cuda_stream=None, use_copy_kernel=False):
        """Give the next batch to an `external_source` without `source`, by name or DataNode."""
        self.build()
        name = data_node.source.name if isinstance(data_node, DataNode) else data_node
        self._executor.feed(name, data, layout)

    # --- readers ---
    def _readers(self):
        self.build()
        return self._executor.readers()

    def reader_meta(self, name=None):
        """The metadata of the reader `name` (epoch_size, epoch_size_padded, number_of_shards,
        shard_id, pad_last_batch, stick_to_shard), or of every named reader by name."""
        readers = self._readers()
        if name is None:
            return {k: r.meta() for k, r in readers.items()}
        if name not in readers:
            raise ValueError(f"reader_meta: no reader named '{name}' (readers: {sorted(readers)})")
        return readers[name].meta()

    def epoch_size(self, name=None):
        """The samples an epoch of the reader `name` reads (padded to whole shards when it
        pads), or every named reader's by name."""
        readers = self._readers()
        if name is None:
            return {k: r.meta()["epoch_size_padded"] for k, r in readers.items()}
        if name not in readers:
            raise ValueError(f"epoch_size: no reader named '{name}' (readers: {sorted(readers)})")
        return readers[name].meta()["epoch_size_padded"]

    # --- checkpoints (the format: checkpoints.py) ---
    def checkpoint(self, filename=None, *, iterator_data=None):
        """The pipeline's state (JSON text) after the last returned batch, also written to
        `filename`. `iterator_data` (JSON-serializable) is kept with it for the iterator
        that drives the pipeline, as DALI's iterators keep their state in the checkpoint."""
        if not self.config.enable_checkpointing:
            raise RuntimeError("checkpoint() needs enable_checkpointing=True")
        self.build()
        text = checkpoints.encode(self._executor.state_before(self._next_index), iterator_data)
        if filename is not None:
            with open(filename, "w") as f:
                f.write(text)
        return text

    @property
    def restored_iterator_data(self):
        """The iterator state kept in the checkpoint this pipeline was restored from (None
        if it was not, or none was kept)."""
        return self._iterator_data

    def _restore(self, text):
        data = checkpoints.decode(text)
        self._executor.load_states(data.get("operators"))
        self._iterator_data = data.get("iterator_data")
        self._restored = True

    def check_checkpoint(self, text):
        """The checkpoint's data, if it is well-formed and names this pipeline's operators;
        a ValueError otherwise. Nothing changes."""
        data = checkpoints.decode(text)
        self.build()
        ops = data.get("operators")
        if not isinstance(ops, dict) or set(ops) != {s.key for s in self._executor.steps}:
            raise ValueError("the checkpoint does not match this pipeline (its operators differ)")
        return data

    def restore_checkpoint(self, text):
        """Put a built pipeline, which may have run, back to a checkpoint (an iterator's
        load_state_dict()): the iterations scheduled or in flight are dropped and the
        operators take the checkpoint's states. A checkpoint that does not fit leaves the
        pipeline where it was, its next iterations to be scheduled again."""
        data = self.check_checkpoint(text)
        if not self.config.enable_checkpointing:
            raise RuntimeError("restoring a checkpoint in place needs enable_checkpointing=True")
        now = self._executor.state_before(self._next_index)
        self._runner.clear()
        try:
            self._executor.load_states(data.get("operators"))
        except ValueError:
            self._executor.load_states(now)  # back to the next undelivered iteration
            raise
        finally:
            self._executor.forget_snapshots()
            self._next_index = self._executor.iteration
            self._first_run = True
            self._stopped = None
        self._iterator_data = data.get("iterator_data")
        self._restored = True

    # --- serialization (torchdali/serialize.py, docs/serialization.md) ---
    def serialize(self, define_graph=None, filename=None):
        """The graph and parameters as versioned JSON text (also written to `filename`).
        Graphs with Python callbacks cannot be serialized."""
        from ..serialize import serialize_pipeline
        if define_graph is not None and self._graph_defined:
            raise RuntimeError("serialize(): define_graph cannot be given when the outputs are already set")
        self._ensure_graph(define_graph)
        text = serialize_pipeline(self)
        if filename is not None:
            with open(filename, "w") as f:
                f.write(text)
        return text

    @classmethod
    def deserialize(cls, serialized_pipeline=None, filename=None, **kwargs):
        """A built pipeline from serialize()'s text or file; `kwargs` override the stored
        Pipeline arguments (batch_size, num_threads, device_id, seed, ...)."""
        from ..serialize import load
        if (serialized_pipeline is None) == (filename is None):
            raise ValueError("deserialize(): give serialized_pipeline or filename, not both")
        if filename is not None:
            with open(filename) as f:
                serialized_pipeline = f.read()
        params, build_graph = load(serialized_pipeline)
        pipe = cls(**{**params, **kwargs})
        pipe._define_from(build_graph)
        pipe.build()
        return pipe

    def deserialize_and_build(self, serialized_pipeline):
        """Take the graph (and, where this pipeline left them unset, batch_size,
        num_threads, device_id and seed) from serialize()'s text, then build."""
        from ..serialize import load
        params, build_graph = load(serialized_pipeline)
        self.config = self.config.filled_from(params)
        self._define_from(build_graph)
        self.build()

    def _define_from(self, build_graph):
        with self:
            outputs, sinks = build_graph()
        self.definition.sinks.extend(op for op in sinks if op not in self.definition.sinks)
        self.set_outputs(*outputs)

    # --- introspection ---
    def output_stream(self):
        """The CUDA stream the GPU stage runs on (None for CPU-only pipelines)."""
        self.build()
        return self._executor.stream

    def executor_statistics(self):
        """Per operator ("CPU_name", "GPU_name", "MIXED_name"), the largest output sizes seen:
        real_memory_size, max_real_memory_size, reserved_memory_size and
        max_reserved_memory_size, one entry per output, with enable_memory_stats=True (and
        exec_dynamic=False), as in DALI. The image decoders add `decoder_backend`: how many
        images each decoder (nvJPEG's hardware decoder or hybrid path, torchvision, the CPU)
        has decoded so far."""
        self.build()
        stats = self._executor.memory_stats
        out = stats.as_dict() if stats is not None else {}
        for key, extra in self._executor.operator_statistics().items():
            out[key] = {**out.get(key, {}), **extra}
        return out

    def save_graph_to_dot_file(self, filename, *, show_tensors=False, show_ids=None, use_colors=False):
        """Write the operator graph in Graphviz dot format."""
        from ..dot import graph_to_dot
        self._ensure_graph()
        with open(filename, "w") as f:
            f.write(graph_to_dot(self.definition.outputs, self.definition.sinks, show_tensors, use_colors))

    def _check_outputs(self, outs):
        if self.config.output_dtype is not None or self.config.output_ndim is not None:
            output_checks.check_outputs(outs, *self._output_declarations())

    def __del__(self):
        runner = getattr(self, "_runner", None)
        if runner is not None:
            runner.close()
        if getattr(self, "_executor", None) is not None:
            self._executor.shutdown()
        if getattr(self, "_py_pool", None) is not None:
            self._py_pool.close()


def flatten_outputs(outputs):
    flat = []
    for x in outputs:
        if isinstance(x, (list, tuple)) and x and all(isinstance(y, DataNode) for y in x):
            flat.extend(x)
        elif isinstance(x, DataNode):
            flat.append(x)
        else:
            flat.append(call_operator("_constant", [], {"value": x, "device": "cpu"}))
    return flat


_PIPELINE_ARGS = set(inspect.signature(Pipeline.__init__).parameters) - {"self"}


def definition_factory(func, pipeline_kwargs, make):
    """The factory that `@pipeline_def` makes of `func`: a call's keyword arguments are split
    into the function's own and Pipeline arguments (these override the decorator's), and the
    factory returns make(pipeline_arguments, args, own_kwargs)."""
    params = inspect.signature(func).parameters
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values()):
        raise TypeError(f"@pipeline_def: {func.__name__} takes **kwargs, which could silently take "
                        "Pipeline arguments; name its parameters instead")
    unknown = set(pipeline_kwargs) - _PIPELINE_ARGS
    if unknown:
        raise TypeError(f"@pipeline_def: unknown Pipeline arguments {sorted(unknown)}")

    @functools.wraps(func)
    def create(*args, **kwargs):
        own = {k: v for k, v in kwargs.items() if k in params}
        pipe_args = {k: v for k, v in kwargs.items() if k not in params}
        unknown_call = set(pipe_args) - _PIPELINE_ARGS
        if unknown_call:
            raise TypeError(f"{func.__name__}: unknown arguments {sorted(unknown_call)}")
        return make({**pipeline_kwargs, **pipe_args}, args, own)

    create._is_pipeline_def = True
    return create


def pipeline_def(fn=None, *, enable_conditionals=False, **pipeline_kwargs):
    """Turn a graph-definition function into a factory of Pipelines.

    Keyword arguments of the decorator are Pipeline arguments; those given when the
    factory is called override them. The function's own parameters are passed through."""
    def decorate(func):
        def make(pipe_args, args, own):
            pipe = Pipeline(**pipe_args)
            if enable_conditionals:
                outs = conditionals.trace(pipe, func, args, own)
            else:
                with pipe:
                    outs = func(*args, **own)
            pipe.set_outputs(*(outs if isinstance(outs, (list, tuple)) else [outs]))
            return pipe

        return definition_factory(func, pipeline_kwargs, make)

    return decorate(fn) if fn is not None else decorate


def do_not_convert(func):
    """Mark a function so that conditional-mode rewriting leaves it alone."""
    func._torchdali_do_not_convert = True
    return func
