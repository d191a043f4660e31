"""Debug mode (`pipeline.experimental.pipeline_def(debug=True)`): the definition function
runs again at every `run()`, each operator call executes at once and returns a
`DataNodeDebug` whose `.get()` is the batch. Operators keep their state (readers'
positions, random generators) from one iteration to the next, matched by call order.

Unlike DALI's debug mode it needs no CUDA driver for CPU-only pipelines."""
import collections
import math
import types as _pytypes
import warnings

import numpy as np
import torch

from .. import graph as _graph
from ..executor import Executor, _Iteration, _Step, make_operator, plan_operator, unknown_specs
from ..graph import DataNode, call_operator
from ..operators.base import RunContext
from ..tensor_list import TensorList, to_torch_samples
from . import Pipeline, _flatten_outputs


class DataNodeDebug(DataNode):
    """An operator output in debug mode: a DataNode that also holds its batch."""

    def __init__(self, name, device, source, index, iteration):
        super().__init__(name, device, source, index)
        self._iteration = iteration

    def get(self):
        """The batch (TensorListCPU or TensorListGPU) of the current iteration."""
        return self._iteration.data[(self.source.id, self.index)]

    def shape(self):
        """The samples' shapes (as DALI's DataNodeDebug: a list, not a DataNode)."""
        return self.get().shape()

    def __repr__(self):
        return f"DataNodeDebug(name={self.name!r}, data={self.get()!r})"


class _Given:
    """The producer of a batch passed to an operator as data (NumPy, torch, TensorList)."""

    schema = _pytypes.SimpleNamespace(name="data", internal=True)

    def __init__(self):
        self.id = next(_graph._ids)
        self.name = f"__data_{self.id}"


def _is_batch(value):
    """Values that debug mode takes as a batch: TensorLists, arrays and lists of arrays
    (a list of plain numbers stays a constant, as in DALI)."""
    if isinstance(value, (TensorList, np.ndarray, torch.Tensor)):
        return True
    return isinstance(value, list) and bool(value) and all(
        isinstance(x, (np.ndarray, torch.Tensor)) for x in value)


class DebugPipeline(Pipeline):
    """A Pipeline whose definition runs eagerly at every iteration."""

    def __init__(self, definition, **kwargs):
        super().__init__(**kwargs)
        if self.config.enable_checkpointing or self._checkpoint_to_restore is not None:
            raise ValueError("Pipeline: checkpoints are not available in debug mode")
        self._function = definition
        self._impls = []  # one per operator call, in call order: [schema name, device, args, impl, step]
        self._pending_feeds = collections.defaultdict(list)  # external_source name -> batches
        self._ready = collections.deque()
        self._iteration = 0
        self._it = None
        self._call_index = 0
        self._rank = 0

    # --- running ---
    def build(self, define_graph=None):
        self.config.check_runnable()
        self._built = True

    def schedule_run(self):
        self.build()
        self._ready.append(self._run_definition())

    def outputs(self, cuda_stream=None):
        if not self._ready:
            raise RuntimeError("outputs() called with no iteration scheduled; call schedule_run() first")
        return self._ready.popleft()

    share_outputs = outputs

    def run(self, cuda_stream=None, /, **pipeline_inputs):
        """Run the definition once more and return its outputs."""
        for name, data in pipeline_inputs.items():
            self.feed_input(name, data)
        self.schedule_run()
        return self.outputs()

    def reset(self):
        """Start a new epoch (after StopIteration): every operator is reset."""
        self._ready.clear()
        for entry in self._impls:
            entry[3].reset()

    def _run_definition(self):
        device = torch.device("cuda", self.device_id) if self.device_id is not None \
            and torch.cuda.is_available() else None
        ctx = RunContext(iteration=self._iteration, batch_size=self.max_batch_size, thread_pool=None,
                         num_threads=1, cuda_device=device)
        self._it = _Iteration(self._iteration, ctx)
        self._call_index = self._rank = 0
        self._ran = set()
        self.definition.sinks = []
        self.definition.eager = self._call_eagerly
        Pipeline.push_current(self)
        try:
            outs = self._function()
            outs = outs if isinstance(outs, (list, tuple)) else [outs] if outs is not None else []
            result = tuple(self._output(x, i) for i, x in enumerate(_flatten_outputs(outs)))
        finally:
            Pipeline.pop_current()
            self.definition.eager = None
        if self._impls and self._call_index != len(self._impls):
            raise RuntimeError(f"debug mode: this iteration called {self._call_index} operators, the first "
                               f"called {len(self._impls)}; the operators must be the same every iteration")
        self._iteration += 1
        for message in ctx.messages:
            warnings.warn(message, stacklevel=4)
        self.definition.outputs = list(result)  # what num_outputs and the output checks count
        self._graph_defined = True
        self._check_outputs(result)
        return result

    @staticmethod
    def _output(value, i):
        # Constants became `_constant` calls (run at once) in _flatten_outputs.
        if not isinstance(value, DataNodeDebug):
            raise TypeError(f"output {i} is a DataNode of another pipeline")
        return value.get()

    def feed_input(self, data_node, data, layout=None, cuda_stream=None, use_copy_kernel=False):
        """Data for an external_source; kept until the source's first call if it has not run yet."""
        name = data_node.source.name if isinstance(data_node, DataNode) else data_node
        for entry in self._impls:
            if entry[0] == "external_source" and entry[3].spec.name == name:
                entry[3].feed(data, layout)
                return
        self._pending_feeds[name].append((data, layout))

    def _readers(self):
        return {e[3].spec.name: e[3] for e in self._impls if e[3].meta() is not None}

    def checkpoint(self, filename=None, *, iterator_data=None):
        raise RuntimeError("checkpoint(): checkpoints are not available in debug mode")

    # --- one operator call ---
    def _call_eagerly(self, name, inputs, kwargs):
        """Run operator `name` now on the given DataNodeDebugs or data."""
        inputs = [self._given(x) if _is_batch(x) else x for x in inputs]
        kwargs = {k: self._given(v) if isinstance(v, (TensorList, list)) and _is_batch(v) else v
                  for k, v in kwargs.items()}
        self.definition.eager = None  # build the node with the ordinary graph code
        try:
            outs = call_operator(name, inputs, kwargs)
        finally:
            self.definition.eager = self._call_eagerly
        for node in self.definition.sinks:  # operators with side effects run even without outputs
            self._run_node(node)
        return self._evaluate(outs)

    def _given(self, value):
        samples = to_torch_samples(value, "debug mode", "input")
        batch = TensorList.make(samples, value.layout() if isinstance(value, TensorList) else "")
        it = self._it
        if not it.data:
            it.ctx.batch_size = len(batch)
        node = DataNodeDebug(f"__data_{len(it.data)}", batch.device, _Given(), 0, it)
        it.data[(node.source.id, 0)] = batch
        return node

    def _evaluate(self, outs):
        if isinstance(outs, (list, tuple)):
            return type(outs)(self._evaluate(x) for x in outs)
        if isinstance(outs, DataNodeDebug):
            return outs
        self._run_node(outs.source)
        return DataNodeDebug(outs.name, outs.device, outs.source, outs.index, self._it)

    def _run_node(self, node):
        it = self._it
        if node.id in self._ran:
            return
        self._ran.add(node.id)
        for x in list(node.inputs) + list(node.arg_inputs.values()):
            if not isinstance(x, DataNodeDebug):
                self._run_node(x.source)
        step = _Step(node, *self._impl_for(node))
        if node.device == "cpu" or it.ctx.cuda_device is None:
            Executor._run_step(step, it)
        else:
            with torch.cuda.device(it.ctx.cuda_device):
                Executor._run_step(step, it)

    def _impl_for(self, node):
        """The operator instance of this call and its planned step: made at the first
        iteration, then reused."""
        index = self._call_index
        self._call_index += 1
        rank = None
        if not node.schema.internal:
            rank, self._rank = self._rank, self._rank + 1
        args = {k: v for k, v in node.args.items() if k not in node.arg_inputs}
        if index < len(self._impls):
            schema_name, device, first_args, impl, run = self._impls[index]
            if (schema_name, device) != (node.schema.name, node.device):
                raise RuntimeError(f"debug mode: call {index} is {node.schema.name} ({node.device}), but it "
                                   f"was {schema_name} ({device}) in the first iteration; the operators "
                                   "must be called in the same order every iteration")
            if schema_name != "external_source":  # a source is made once, as in DALI
                _check_unchanged(node.schema.name, first_args, args)
            return impl, run
        # Seeds as the built pipeline's (the rank among the user's operators), so a
        # debug run gives the numbers of the same pipeline built normally.
        impl = make_operator(node, self, rank, 1)
        _, run = plan_operator(impl, unknown_specs(node.inputs))
        self._impls.append([node.schema.name, node.device, args, impl, run])
        if node.schema.name == "external_source":
            for data, layout in self._pending_feeds.pop(impl.spec.name, []):
                impl.feed(data, layout)
        return impl, run


def _check_unchanged(op, first, now):
    """Constant arguments must stay as they were at the first iteration (as in DALI)."""
    for key, value in now.items():
        old = first.get(key)
        if callable(value) or callable(old) or key == "name":
            continue
        if not _same(old, value):
            raise RuntimeError(f"debug mode: argument '{key}' of {op} changed from {old!r} to {value!r} "
                               "since the first iteration; pass per-sample values as a batch instead")


def _same(a, b):
    if isinstance(a, (np.ndarray, torch.Tensor)) or isinstance(b, (np.ndarray, torch.Tensor)):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return a is b
