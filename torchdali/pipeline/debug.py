"""Debug mode (`pipeline.experimental.pipeline_def(debug=True)`): the definition function
runs again at every `run()`, each operator call executes at once and returns a
`DataNodeDebug` whose `.get()` is the batch. Operators keep their state (readers'
positions, random generators) from one iteration to the next, matched by call order.

Unlike DALI's debug mode it needs no CUDA driver for CPU-only pipelines."""
import collections
import math
import types as _pytypes

import numpy as np
import torch

from ..executor import Executor, Failure, Iteration, Step, make_operator, plan_operator, unknown_specs
from ..graph import DataNode, call_operator, new_node_id
from ..operators.base import RunContext
from ..tensor_list import TensorList, to_torch_samples
from . import Pipeline, flatten_outputs


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
        self.id = new_node_id()
        self.name = f"__data_{self.id}"


def _is_batch(value):
    """Values that debug mode takes as a batch: TensorLists, arrays and lists of arrays
    (a list of plain numbers stays a constant, as in DALI)."""
    if isinstance(value, (TensorList, np.ndarray, torch.Tensor)):
        return True
    return isinstance(value, list) and bool(value) and all(
        isinstance(x, (np.ndarray, torch.Tensor)) for x in value)


class DebugRunner:
    """Debug mode's runner: each scheduled iteration calls the definition function again,
    and each operator call in it runs at once. The operators are made at the first
    iteration and reused by call order, so they keep their state. It answers the pipeline
    as the executor and its runners do: schedule / next / undelivered / clear / close, and
    feed / readers / reset / iteration."""

    def __init__(self, pipe, function):
        self.pipe = pipe
        self.function = function
        self.impls = []  # one per operator call, in call order: [schema name, device, args, impl, step]
        self.pending_feeds = collections.defaultdict(list)  # external_source name -> batches
        self.scheduled = 0
        self.iteration = 0
        self.it = None
        self.call_index = 0
        self.rank = 0
        self.ran = set()

    runs_ahead = False

    # --- the runner's part: the definition runs when its outputs are asked for ---
    def schedule(self):
        self.scheduled += 1

    def next(self):
        if not self.scheduled:
            raise RuntimeError("outputs() called with no iteration scheduled; call schedule_run() first")
        self.scheduled -= 1
        try:
            return self._run_definition()
        except BaseException as e:  # StopIteration too: the pipeline raises it
            return Failure(e)

    def undelivered(self):
        return self.scheduled

    def clear(self):
        self.scheduled = 0

    close = clear

    # --- the executor's part ---
    def shutdown(self):
        """Nothing to stop: debug mode runs in the caller's thread."""

    def reset(self):
        """A new epoch: every operator is reset."""
        for entry in self.impls:
            entry[3].reset()

    def feed(self, name, data, layout=None):
        """Data for an external_source; kept until the source's first call if it has not run yet."""
        for entry in self.impls:
            if entry[0] == "external_source" and entry[3].spec.name == name:
                entry[3].feed(data, layout)
                return
        self.pending_feeds[name].append((data, layout))

    def readers(self):
        return {e[3].spec.name: e[3] for e in self.impls if e[3].meta() is not None}

    # --- one iteration ---
    def _run_definition(self):
        pipe = self.pipe
        device = torch.device("cuda", pipe.device_id) if pipe.device_id is not None \
            and torch.cuda.is_available() else None
        ctx = RunContext(iteration=self.iteration, batch_size=pipe.max_batch_size, thread_pool=None,
                         num_threads=1, cuda_device=device)
        self.it = it = Iteration(self.iteration, ctx)
        self.call_index = self.rank = 0
        self.ran = set()
        pipe.definition.sinks = []
        pipe.definition.eager = self._call_eagerly
        Pipeline.push_current(pipe)
        try:
            outs = self.function()
            outs = outs if isinstance(outs, (list, tuple)) else [outs] if outs is not None else []
            result = [self._output(x, i) for i, x in enumerate(flatten_outputs(outs))]
        finally:
            Pipeline.pop_current()
            pipe.definition.eager = None
        if self.impls and self.call_index != len(self.impls):
            raise RuntimeError(f"debug mode: this iteration called {self.call_index} operators, the first "
                               f"called {len(self.impls)}; the operators must be the same every iteration")
        self.iteration += 1
        pipe.definition.outputs = result  # what num_outputs and the output checks count
        it.outputs, it.data = result, None
        return it

    @staticmethod
    def _output(value, i):
        # Constants became `_constant` calls (run at once) in flatten_outputs.
        if not isinstance(value, DataNodeDebug):
            raise TypeError(f"output {i} is a DataNode of another pipeline")
        return value.get()

    # --- one operator call ---
    def _call_eagerly(self, name, inputs, kwargs):
        """Run operator `name` now on the given DataNodeDebugs or data."""
        definition = self.pipe.definition
        inputs = [self._given(x) if _is_batch(x) else x for x in inputs]
        kwargs = {k: self._given(v) if isinstance(v, (TensorList, list)) and _is_batch(v) else v
                  for k, v in kwargs.items()}
        definition.eager = None  # build the node with the ordinary graph code
        try:
            outs = call_operator(name, inputs, kwargs)
        finally:
            definition.eager = self._call_eagerly
        for node in definition.sinks:  # operators with side effects run even without outputs
            self._run_node(node)
        return self._evaluate(outs)

    def _given(self, value):
        samples = to_torch_samples(value, "debug mode", "input")
        batch = TensorList.make(samples, value.layout() if isinstance(value, TensorList) else "")
        it = self.it
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
        return DataNodeDebug(outs.name, outs.device, outs.source, outs.index, self.it)

    def _run_node(self, node):
        it = self.it
        if node.id in self.ran:
            return
        self.ran.add(node.id)
        for x in list(node.inputs) + list(node.arg_inputs.values()):
            if not isinstance(x, DataNodeDebug):
                self._run_node(x.source)
        step = Step(node, *self._impl_for(node))
        if node.device == "cpu" or it.ctx.cuda_device is None:
            Executor.run_step(step, it)
        else:
            with torch.cuda.device(it.ctx.cuda_device):
                Executor.run_step(step, it)

    def _impl_for(self, node):
        """The operator instance of this call and its planned step: made at the first
        iteration, then reused."""
        index = self.call_index
        self.call_index += 1
        rank = None
        if not node.schema.internal:
            rank, self.rank = self.rank, self.rank + 1
        args = {k: v for k, v in node.args.items() if k not in node.arg_inputs}
        if index < len(self.impls):
            schema_name, device, first_args, impl, run = self.impls[index]
            if (schema_name, device) != (node.schema.name, node.device):
                raise RuntimeError(f"debug mode: call {index} is {node.schema.name} ({node.device}), but it "
                                   f"was {schema_name} ({device}) in the first iteration; the operators "
                                   "must be called in the same order every iteration")
            if schema_name != "external_source":  # a source is made once, as in DALI
                _check_unchanged(node.schema.name, first_args, args)
            return impl, run
        # Seeds as the built pipeline's (the rank among the user's operators), so a
        # debug run gives the numbers of the same pipeline built normally.
        impl = make_operator(node, self.pipe, rank, 1)
        _, run = plan_operator(impl, unknown_specs(node.inputs))
        self.impls.append([node.schema.name, node.device, args, impl, run])
        if node.schema.name == "external_source":
            for data, layout in self.pending_feeds.pop(impl.spec.name, []):
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
