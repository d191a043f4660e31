"""Runs a built graph batch by batch.

The CPU stage of an iteration runs its operators in order (operators spread their
samples over the pipeline's `num_threads` threads); the GPU stage runs on the pipeline's
own CUDA stream. The mixed operators (the decoders) run on a stream of their own when GPU
operators follow them: a decode stage. With `exec_pipelined` and `exec_async`, a thread per
stage works ahead of the caller, up to `prefetch_queue_depth` iterations, so the CPU stage
of the next batches and the decoding of the next batch overlap the GPU stage of the current
one.

GPU data copied back to the host (`DataNode.cpu()`, the `_to_cpu` operator) makes the graph
run in phases: every operator gets the first phase of the sequence cpu, mixed, gpu, cpu,
mixed, gpu, ... (phase 0, 1, 2, 3, ...) that comes at or after the phases of its inputs and
argument inputs and runs on its device, so an operator that reads a copy runs a round
later than the GPU work the copy waits for (`phases`). Round 0 (phases 0-2) are the three
stages above; the later rounds run, phase by phase in topological order, in the GPU stage
after round 0's GPU operators: their CPU operators on the host (with the thread pool),
their mixed and GPU operators on the pipeline's stream. `_to_cpu` copies a batch in one
transfer on that stream and waits for it, so what reads the copy reads it whole. A graph
without such a copy has round 0 only: the plan and the stage threads are what they were.
"""
import atexit
import collections
import concurrent.futures
import dataclasses
import threading
import weakref

import numpy as np
import torch

from .graph import check_gpu_to_cpu, topological_order
from .stats import MemoryStats
from .errors import OperatorError
from .fusion import fuse_steps
from .kernels import request_cpu_threads
from .operators.base import Args, BatchSpec, OpSpec, RunContext
from .tensor_list import TensorList
from .workers import WorkerDied

_STAGE_RANK = {"cpu": 0, "mixed": 1, "gpu": 2}
_ROUND = len(_STAGE_RANK)  # phases per round: cpu, mixed, gpu


def phases(order):
    """{node id: phase} of OpNodes in topological order: the first phase, at or after those
    of the node's inputs, whose stage (phase % 3: cpu, mixed, gpu) is the node's device. Only
    a GPU operator with CPU outputs (`_to_cpu`, host-side shapes) leads to a phase past 2."""
    phase = {}
    for node in order:
        after = max((phase[x.source.id] for x in (*node.inputs, *node.arg_inputs.values())), default=0)
        rank = _STAGE_RANK[node.device]
        phase[node.id] = after + (rank - after) % _ROUND
    return phase


def execution_order(outputs, sinks=()):
    """The OpNodes to run (those reachable from `outputs` and `sinks`) and their phases: the
    nodes sorted by phase, sources first within one (they set the batch size), else in
    topological order."""
    order = topological_order(outputs, sinks)
    phase = phases(order)
    order.sort(key=lambda n: (phase[n.id], 0 if n.schema.impl.is_source and not n.inputs else 1))
    return order, phase


def split_stages(steps):
    """(cpu, mixed, gpu) stage steps of planned steps in execution order: round 0's by their
    stage, and every later round's steps, in order, after round 0's GPU steps."""
    first = [s for s in steps if s.phase < _ROUND]
    later = [s for s in steps if s.phase >= _ROUND]
    return tuple([s for s in first if s.stage == stage] for stage in ("cpu", "mixed")) + \
        ([s for s in first if s.stage == "gpu"] + later,)


class Step:
    """One planned operator instance of the graph: where its data comes from and the
    step function its plan returned."""

    def __init__(self, node, impl, run):
        self.node = node
        self.impl = impl
        self.run = run
        self.inputs = [(x.source.id, x.index) for x in node.inputs]
        self.arg_inputs = {k: (x.source.id, x.index) for k, x in node.arg_inputs.items()}
        self.stage = node.device  # where it runs: its device's stage, or a fused partner's (fusion.py)
        self.phase = _STAGE_RANK[node.device]  # see `phases`; set by the Executor
        self.passes_on = False  # returns its input, which a fused partner made (fusion.py)
        self.finishes_later = False  # may leave its outputs to the GPU stage to finish (Executor)


class Iteration:
    """Everything one iteration carries from stage to stage."""

    def __init__(self, index, ctx):
        self.index = index
        self.ctx = ctx
        self.data = {}
        self.decoded = None  # recorded on the decode stream after the mixed operators
        self.unfinished = []  # (step, its RunContext.finish_later callables), for the GPU stage
        self.event = None  # recorded on the pipeline's stream after the GPU operators
        self.outputs = None


def derive_seed(pipeline_seed, op_index):
    """The seed of the op_index-th operator of a pipeline seeded with pipeline_seed."""
    return int(np.random.SeedSequence([pipeline_seed, op_index]).generate_state(1)[0])


def plan_operator(impl, input_specs):
    """impl.plan(input_specs), checked: (output specs, step function)."""
    specs, run = impl.plan(list(input_specs))
    if len(specs) != impl.spec.num_outputs:
        raise impl.error(f"planned {len(specs)} outputs, expected {impl.spec.num_outputs}")
    return list(specs), run


def unknown_specs(nodes):
    """Specs of DataNodes whose batches are known only by their device."""
    return [BatchSpec(x.device) for x in nodes]


def make_operator(node, pipe, rank, num_threads):
    """The implementation of graph node `node` in `pipe`: its spec (constant arguments and,
    unless the node has one, a seed derived from its `rank` among the pipeline's operators;
    None keeps no seed) and the instance."""
    seed = node.args.get("seed", -1)
    if (seed is None or seed == -1) and rank is not None:
        seed = derive_seed(pipe.config.seed_value, rank)
    spec = OpSpec(
        schema=node.schema, name=node.name, device=node.device,
        args={k: v for k, v in node.args.items() if k not in node.arg_inputs},
        arg_input_names=tuple(node.arg_inputs), num_outputs=len(node.outputs), seed=seed,
        max_batch_size=pipe.max_batch_size, num_threads=num_threads,
        device_id=pipe.device_id, input_devices=tuple(x.device for x in node.inputs))
    return node.schema.impl(spec)


class Executor:
    """Plans the graph once at build time, then executes iterations."""

    def __init__(self, pipe, outputs, sinks):
        # No reference to `pipe` is kept: the runner threads hold the executor, and the
        # pipeline must stay collectable so that its __del__ stops them.
        self.max_batch_size = pipe.max_batch_size
        self.checkpointing = pipe.config.enable_checkpointing
        self.outputs = [(x.source.id, x.index) for x in outputs]
        order, phase = execution_order(outputs, sinks)
        for node in order:  # as in DALI: checked when the pipeline is built if not when defined
            if node.gives_host_data:
                check_gpu_to_cpu(pipe.config, node.inputs[0])
        # Seeds come from each operator's rank among the user's operators: graph plumbing
        # (.gpu(), constants, arithmetic) doesn't shift them, so moving a pipeline's
        # operators to the GPU keeps its random numbers.
        rank = {op_id: i for i, op_id in enumerate(sorted(n.id for n in order if not n.schema.internal))}
        internal = sorted(n.id for n in order if n.schema.internal)
        rank.update({op_id: len(rank) + i for i, op_id in enumerate(internal)})  # stable checkpoint keys
        self.steps = []
        specs = {}  # (node id, output index) -> BatchSpec
        for node in order:
            impl = make_operator(node, pipe, rank[node.id], pipe.num_threads)
            outs, run = plan_operator(impl, [specs[(x.source.id, x.index)] for x in node.inputs])
            specs.update(((node.id, i), o) for i, o in enumerate(outs))
            step = Step(node, impl, run)
            step.phase = phase[node.id]
            # Names that are the same for every instance of one definition (checkpoints).
            step.key = node.args.get("name") or f"{node.schema.name}#{rank[node.id]}"
            self.steps.append(step)
        names = collections.Counter(s.key for s in self.steps)
        repeated = sorted(k for k, n in names.items() if n > 1)
        if repeated:  # as DALI: names identify operators (feed_input, readers, checkpoints)
            raise RuntimeError(f"the pipeline is invalid because operator names are not unique: {repeated}")
        fuse_steps(self.steps, self.outputs)
        # The GPU stage's steps include the later rounds' (see `phases`).
        self.cpu_steps, self.mixed_steps, self.gpu_steps = split_stages(self.steps)
        self.uses_gpu = bool(self.mixed_steps or self.gpu_steps) or any(x.device == "gpu" for x in outputs)
        # Decoding on its own stream (and thread) pays when GPU operators follow it.
        self.decode_stage = bool(self.mixed_steps) and bool(self.gpu_steps)
        # A mixed operator whose outputs only the GPU stage reads may leave them to be
        # finished there (RunContext.finish_later): the decode thread goes on meanwhile.
        read_by_mixed = {k for s in self.mixed_steps if not s.passes_on for k in (*s.inputs, *s.arg_inputs.values())}
        for step in self.mixed_steps:
            outputs = [(step.node.id, i) for i in range(len(step.node.outputs))]
            step.finishes_later = (self.decode_stage and not step.node.in_branch
                                   and not read_by_mixed.intersection(outputs))
        self.num_threads = max(1, pipe.num_threads)
        self.pool = concurrent.futures.ThreadPoolExecutor(self.num_threads,
                                                          thread_name_prefix="torchdali")
        request_cpu_threads(self.num_threads)  # the C++ kernels' threads: at least as many
        self.stream = self.decode_stream = None
        self.cuda_device = None
        if self.uses_gpu:
            self.cuda_device = torch.device("cuda", pipe.device_id)
            self.stream = torch.cuda.Stream(self.cuda_device)
            if self.decode_stage:
                self.decode_stream = torch.cuda.Stream(self.cuda_device)
        self.iteration = 0
        self.state_lock = threading.Lock()
        self.snapshots = {}  # iteration index -> operator states before it ran (checkpoints)
        # As in DALI, the dynamic executor keeps no statistics.
        self.memory_stats = MemoryStats() if pipe.enable_memory_stats and not pipe.exec_dynamic else None

    # --- one iteration, stage by stage ---
    def run_cpu_stage(self):
        ctx = RunContext(iteration=self.iteration, batch_size=self.max_batch_size, thread_pool=self.pool,
                         num_threads=self.num_threads, cuda_device=self.cuda_device)
        it = Iteration(self.iteration, ctx)
        self._snapshot(it.index, self.cpu_steps)
        self.iteration += 1
        self._run_steps(self.cpu_steps, it)
        return it

    def run_decode_stage(self, it):
        """The mixed operators on the decode stream (with `decode_stage`); the GPU stage
        waits for them on the device, not on the host."""
        self._snapshot(it.index, self.mixed_steps)
        with torch.cuda.device(self.cuda_device), torch.cuda.stream(self.decode_stream):
            for step in self.mixed_steps:
                it.ctx.unfinished = [] if step.finishes_later else None
                self.run_step(step, it)
                self._record_memory(step, it)
                if it.ctx.unfinished:
                    it.unfinished.append((step, it.ctx.unfinished))
            it.ctx.unfinished = None
            it.decoded = torch.cuda.Event()
            it.decoded.record(self.decode_stream)
        return it

    def run_gpu_stage(self, it):
        """The GPU operators (and the mixed ones, without a decode stage) on the pipeline's
        stream; then the iteration's outputs."""
        steps = self.gpu_steps if self.decode_stage else self.mixed_steps + self.gpu_steps
        self._snapshot(it.index, steps)
        if self.stream is not None:
            with torch.cuda.device(self.cuda_device), torch.cuda.stream(self.stream):
                if it.decoded is not None:
                    self.stream.wait_event(it.decoded)
                    self._finish_mixed(it)
                    # The decoded batches are freed when this stage ends, maybe before the
                    # stream has read them: their memory waits for this stream's work.
                    record_on(self.stream, [b for b in it.data.values() if b.device == "gpu"])
                self._run_steps(steps, it)
                it.event = torch.cuda.Event()
                it.event.record(self.stream)
        it.outputs = [it.data[key] for key in self.outputs]
        it.data = None
        return it

    def run_device_stages(self, it):
        """The decode stage (if any) and the GPU stage, one after the other."""
        if self.decode_stage:
            self.run_decode_stage(it)
        return self.run_gpu_stage(it)

    def _finish_mixed(self, it):
        """What the decode stage's operators left to finish (RunContext.finish_later), done
        on this stage's stream; then the samples they skipped leave the iteration."""
        for step, unfinished in it.unfinished:
            with operator_errors(step, it.index):
                for finish in unfinished:
                    finish(it.ctx)
        it.unfinished = []
        if it.ctx.dropped:
            self._drop(it, sorted(set(it.ctx.dropped)))

    def _run_steps(self, steps, it):
        for step in steps:
            self.run_step(step, it)
            self._record_memory(step, it)

    @staticmethod
    def run_step(step, it):
        ctx = it.ctx
        inputs = [it.data[k] for k in step.inputs]
        arg_batches = {name: it.data[k] for name, k in step.arg_inputs.items()}
        n = Executor._step_batch_size(step, inputs, arg_batches, ctx)
        if n != ctx.batch_size:  # a per-sample conditional's branch: its part of the batch
            ctx = dataclasses.replace(ctx, batch_size=n)
        with operator_errors(step, it.index):
            if n == 0 and (inputs or arg_batches):  # an empty branch: nothing to run
                outs = [TensorList.make([], device=x.device) for x in step.node.outputs]
            else:
                outs = step.run(inputs, Args(step.impl, arg_batches), ctx)
        if len(outs) != len(step.node.outputs):
            raise step.impl.error(f"produced {len(outs)} outputs, expected {len(step.node.outputs)}")
        if ctx.dropped:
            if step.node.in_branch:
                raise step.impl.error("samples can't be skipped inside a per-sample `if` branch")
            Executor._drop(it, sorted(set(ctx.dropped)))
        src_info = inputs[0].source_info if inputs else None
        for i, out in enumerate(outs):
            if not isinstance(out, TensorList):
                out = TensorList.make(out, device="gpu" if step.node.outputs[i].device == "gpu" else "cpu")
            if out.source_info is None and src_info is not None and len(src_info) == len(out):
                out.source_info = src_info
            it.data[(step.node.id, i)] = out
        if step.impl.is_source and not step.inputs and outs:
            it.ctx.batch_size = len(it.data[(step.node.id, 0)])

    @staticmethod
    def _step_batch_size(step, inputs, arg_batches, ctx):
        """The samples a step runs on: the iteration's batch, or for an operator inside a
        per-sample conditional's branch (torchdali.conditionals), that branch's samples."""
        batches = list(arg_batches.values())
        if not getattr(step.impl, "own_batch_sizes", False):
            batches += inputs
        sizes = {len(b) for b in batches}
        if not sizes:
            return ctx.batch_size
        if len(sizes) > 1 or (not step.node.in_branch and sizes != {ctx.batch_size}):
            raise step.impl.error(f"inputs have {sorted(sizes)} samples but the batch has {ctx.batch_size}")
        return sizes.pop()

    def _record_memory(self, step, it):
        if self.memory_stats is not None:
            self.memory_stats.record(step.node, [it.data[(step.node.id, i)] for i in range(len(step.node.outputs))])

    @staticmethod
    def _drop(it, indices):
        """Remove samples from every batch computed so far in this iteration."""
        keep_from = it.ctx.batch_size
        drop = set(indices)
        for key, batch in list(it.data.items()):
            if len(batch) != keep_from:
                continue
            keep = [i for i in range(len(batch)) if i not in drop]
            samples = batch.as_torch_list()
            info = batch.source_info
            it.data[key] = TensorList.make([samples[i] for i in keep], batch.layout(),
                                           device=batch.device,
                                           source_info=[info[i] for i in keep] if info else None)
        it.ctx.batch_size = keep_from - len(drop)
        it.ctx.dropped.clear()

    # --- state ---
    def _snapshot(self, index, steps):
        """Record the states of `steps` before they run iteration `index`."""
        if self.checkpointing:
            with self.state_lock:
                self.snapshots.setdefault(index, {}).update(self.states(steps))

    def state_before(self, index):
        """All operator states as they were before iteration `index` (the next one to be
        returned): recorded if a stage of it has started, else the current ones."""
        with self.state_lock:
            for old in [k for k in self.snapshots if k < index]:
                del self.snapshots[old]
            state = dict(self.snapshots.get(index, {}))
            for step in self.steps:
                if step.key not in state:
                    state[step.key] = step.impl.state_dict()
            return state

    def forget_snapshots(self):
        """Drop the recorded states (the pipeline was put back to a checkpoint)."""
        with self.state_lock:
            self.snapshots.clear()

    def states(self, steps=None):
        return {s.key: s.impl.state_dict() for s in (steps if steps is not None else self.steps)}

    def load_states(self, states):
        """Restore every operator, or none: a state an operator rejects puts back the
        states loaded before it."""
        by_name = {s.key: s for s in self.steps}
        if not isinstance(states, dict) or not all(isinstance(v, dict) for v in states.values()):
            raise ValueError("checkpoint: the operator states are malformed")
        missing = set(by_name) ^ set(states)
        if missing:
            raise ValueError(f"the checkpoint does not match this pipeline (operators differ: "
                             f"{sorted(missing)[:5]})")
        before = self.states()
        for name, state in states.items():
            try:
                by_name[name].impl.load_state_dict(state)
            except Exception as e:
                for key, old in before.items():
                    by_name[key].impl.load_state_dict(old)
                raise ValueError(f"the checkpoint does not match this pipeline: operator '{name}' "
                                 f"rejects its state ({type(e).__name__}: {e})") from None

    def reset(self):
        for s in self.steps:
            s.impl.reset()

    def find(self, name):
        for s in self.steps:
            if s.node.name == name:
                return s
        return None

    def feed(self, name, data, layout=None):
        """The next batch of the external_source named `name` (Pipeline.feed_input)."""
        step = self.find(name)
        if step is None or not hasattr(step.impl, "feed"):
            raise ValueError(f"feed_input: no external_source named '{name}' in this pipeline")
        step.impl.feed(data, layout)

    def operator_statistics(self):
        """The operators' own statistics, under DALI's "<DEVICE>_<name>" keys."""
        return {f"{s.node.device.upper()}_{s.node.name}": stats for s in self.steps
                for stats in [s.impl.statistics()] if stats}

    def readers(self):
        """The operators with reader metadata, by name."""
        return {s.node.name: s.impl for s in self.steps if s.impl.meta() is not None}

    def shutdown(self):
        self.pool.shutdown(wait=False)


class operator_errors:
    """A context in which an error raised by `step`'s operator in `iteration` becomes an
    OperatorError naming both (StopIteration passes: a reader's end of data)."""

    def __init__(self, step, iteration):
        self.step, self.iteration = step, iteration

    def __enter__(self):
        return self

    def __exit__(self, kind, e, traceback):
        if e is None or isinstance(e, StopIteration) or not isinstance(e, Exception):
            return False
        if isinstance(e, OperatorError):
            if e.iteration is None:
                e.iteration = self.iteration
            return False
        node = self.step.node
        err = OperatorError.of_kind(RuntimeError)(
            f"{node.schema.name} ('{node.name}'), iteration {self.iteration}: {type(e).__name__}: {e}")
        err.operator, err.instance, err.iteration = node.schema.name, node.name, self.iteration
        raise err from e


def hand_over(it, cuda_stream=None):
    """Give a finished iteration's GPU outputs to the consumer: `cuda_stream` (a torch or
    CuPy stream, or a raw handle) waits for the pipeline's stream, or without one the host
    does; the outputs' memory is recorded on that stream, so the caching allocator keeps it
    while the consumer works."""
    if it.event is None:
        return
    device = it.ctx.cuda_device
    stream = as_torch_stream(cuda_stream, device)
    if stream is None:
        it.event.synchronize()
        stream = torch.cuda.current_stream(device)
    else:
        stream.wait_event(it.event)
    record_on(stream, [out for out in it.outputs if out.device == "gpu"])


def record_on(stream, batches):
    """Mark the memory of these GPU batches as used by `stream` (torch's caching allocator
    then reuses it only after the stream's work queued so far): once per buffer, however
    many samples are views of it."""
    for batch in batches:
        for t in batch.buffers():
            t.record_stream(stream)


def as_torch_stream(cuda_stream, device):
    """A user's CUDA stream (torch, CuPy or a raw handle) as a torch stream; None stays None."""
    if cuda_stream is None:
        return None
    if isinstance(cuda_stream, torch.cuda.Stream):
        return cuda_stream
    if hasattr(cuda_stream, "ptr"):  # CuPy
        cuda_stream = cuda_stream.ptr
    return torch.cuda.ExternalStream(int(cuda_stream), device=device)


class Failure:
    """An iteration that raised: what a runner delivers in its place."""

    def __init__(self, exc):
        self.exc = exc


class Halt:
    """Why a runner stopped. Not the exception itself: its traceback holds the pipeline's
    frames, and keeping it would make a cycle that delays closing the pipeline's workers."""

    def __init__(self, exc):
        self.stop = isinstance(exc, StopIteration)
        self.text = f"{type(exc).__name__}: {exc}"
        self.fatal = isinstance(exc, WorkerDied) or isinstance(exc.__cause__, WorkerDied)

    def error(self):
        """What a run after the failure raises until reset()."""
        if self.stop:
            return StopIteration()
        if self.fatal:
            return RuntimeError(f"the pipeline cannot continue after an earlier error ({self.text}); "
                                "create a new pipeline")
        return RuntimeError(f"the pipeline stopped at an earlier error ({self.text}); call reset() to continue")


class SyncRunner:
    """Runs scheduled iterations in the calling thread."""

    runs_ahead = True  # schedule() computes the iteration: prefetched ones consume fed data early

    def __init__(self, executor):
        self.ex = executor
        self.ready = collections.deque()
        self.halt = None

    def schedule(self):
        if self.halt is not None:
            self.ready.append(Failure(self.halt.error()))
            return
        try:
            it = self.ex.run_device_stages(self.ex.run_cpu_stage())
        except BaseException as e:  # StopIteration too: delivered in order by next()
            self.halt = Halt(e)
            self.ready.append(Failure(e))
            return
        self.ready.append(it)

    def next(self):
        if not self.ready:
            raise RuntimeError("outputs() called with no iteration scheduled; call schedule_run() first")
        return self.ready.popleft()

    def undelivered(self):
        return len(self.ready)

    def clear(self):
        self.ready.clear()
        self.halt = None

    def close(self):
        self.clear()


_LIVE_RUNNERS = weakref.WeakSet()


@atexit.register
def _close_runners():
    """Stop the stage threads before the interpreter (and CUDA) shut down under them."""
    for runner in list(_LIVE_RUNNERS):
        runner.close()


class AsyncRunner:
    """A CPU-stage thread, a decode-stage thread (when the executor has a decode stage) and
    a GPU-stage thread working ahead of the caller.

    `schedule()` asks for one more iteration. The CPU thread starts iterations while fewer
    than requested have started and fewer than `cpu_size` wait for (or are in) its stage;
    the decode thread decodes the next one while at most one decoded iteration waits, so
    it works on iteration k+1 while the GPU thread works on k; the GPU thread finishes them
    in order while fewer than `gpu_size` finished ones wait for the caller. A pipeline
    without GPU work finishes its iterations in the CPU thread. Each party waits on its own
    condition (one lock), so a change wakes only who can act on it: every needless wake-up
    costs the GIL a hand-over."""

    runs_ahead = True

    def __init__(self, executor, cpu_size=2, gpu_size=2):
        self.ex = executor
        self.cpu_size, self.gpu_size = cpu_size, gpu_size
        self.lock = threading.Lock()
        self.cpu_turn = threading.Condition(self.lock)  # the CPU thread may start an iteration
        self.decode_turn = threading.Condition(self.lock)  # the decode thread may decode one
        self.gpu_turn = threading.Condition(self.lock)  # the GPU thread may finish one
        self.caller_turn = threading.Condition(self.lock)  # an iteration finished
        self.requested = self.started = self.taken = self.finished = self.delivered = 0
        self.halt = None  # the StopIteration or error that stopped the CPU thread
        self.closing = self.draining = False
        self.cpu_done = collections.deque()
        self.decoded = collections.deque()
        self.ready = collections.deque()
        self.cpu_thread = threading.Thread(target=self._cpu_loop, daemon=True, name="torchdali-cpu")
        self.cpu_thread.start()
        self.decode_thread = self.gpu_thread = None
        if executor.decode_stage:
            self.decode_thread = threading.Thread(target=self._decode_loop, daemon=True, name="torchdali-decode")
            self.decode_thread.start()
        if executor.uses_gpu:
            self.gpu_thread = threading.Thread(target=self._gpu_loop, daemon=True, name="torchdali-gpu")
            self.gpu_thread.start()
        _LIVE_RUNNERS.add(self)

    def schedule(self):
        with self.lock:
            self.requested += 1
            self.cpu_turn.notify()

    def _wait(self, turn, may):
        """Under the lock: wait on `turn` until may() holds; False when the runner closes."""
        while not self.closing and not may():
            turn.wait()
        return not self.closing

    def _may_start(self):
        return self.halt is None and self.started < self.requested and self.started - self.taken < self.cpu_size

    def _cpu_loop(self):
        while True:
            with self.lock:
                if not self._wait(self.cpu_turn, self._may_start):
                    return
                self.started += 1
            try:
                item = self.ex.run_cpu_stage()
                if self.gpu_thread is None:
                    item = self.ex.run_gpu_stage(item)
            except BaseException as e:
                item = Failure(e)
                with self.lock:
                    self.halt = Halt(e)
            with self.lock:
                if self.gpu_thread is None:
                    self.taken += 1
                    self._finish(item)
                else:
                    self.cpu_done.append(item)
                    (self.decode_turn if self.decode_thread is not None else self.gpu_turn).notify()
            item = None  # a waiting thread must not keep a failure (and its traceback) alive

    def _finish(self, item):
        self.finished += 1
        self.ready.append(item)
        self.caller_turn.notify_all()

    def _take_from_cpu(self):
        """The oldest CPU-stage result (the lock held); the CPU thread may start another."""
        self.taken += 1
        self.cpu_turn.notify()
        return self.cpu_done.popleft()

    def _decode_may_start(self):
        return self.cpu_done and (self.draining or not self.decoded)

    def _decode_loop(self):
        torch.cuda.set_device(self.ex.cuda_device)
        while True:
            with self.lock:
                if not self._wait(self.decode_turn, self._decode_may_start):
                    return
                item = self._take_from_cpu()
            item = self._run(self.ex.run_decode_stage, item)
            with self.lock:
                self.decoded.append(item)
                self.gpu_turn.notify()
            item = None

    def _gpu_may_finish(self):
        waiting = self.decoded if self.decode_thread is not None else self.cpu_done
        return waiting and (self.draining or self.finished - self.delivered < self.gpu_size)

    def _gpu_loop(self):
        torch.cuda.set_device(self.ex.cuda_device)
        while True:
            with self.lock:
                if not self._wait(self.gpu_turn, self._gpu_may_finish):
                    return
                if self.decode_thread is not None:
                    item = self.decoded.popleft()
                    self.decode_turn.notify()
                else:
                    item = self._take_from_cpu()
            item = self._run(self.ex.run_gpu_stage, item)
            with self.lock:
                self._finish(item)
            item = None

    def _run(self, stage, item):
        """stage(item), or the Failure it raises (which halts the runner); a Failure passes."""
        if isinstance(item, Failure):
            return item
        try:
            return stage(item)
        except BaseException as e:
            with self.lock:
                self.halt = Halt(e)
            return Failure(e)

    def next(self):
        with self.lock:
            while not self.ready:
                if self.delivered >= self.requested:
                    raise RuntimeError("outputs() called with no iteration scheduled; call schedule_run() first")
                if self.halt is not None and self.finished == self.started:
                    self.delivered += 1
                    return Failure(self.halt.error())
                self.caller_turn.wait()
            self.delivered += 1
            self.gpu_turn.notify()  # the GPU thread may finish one more
            return self.ready.popleft()

    def undelivered(self):
        """Scheduled iterations not yet returned by next(), in flight or ready."""
        with self.lock:
            return self.requested - self.delivered

    def clear(self):
        """Drop everything scheduled or in flight and resume (reset())."""
        with self.lock:
            self.requested = self.started  # start nothing new
            self.draining = True  # finish what started, however many wait
            self.decode_turn.notify()
            self.gpu_turn.notify()
            while self.finished < self.started:
                self.caller_turn.wait()
            self.draining = False
            self.ready.clear()
            self.requested = self.started = self.taken = self.finished = self.delivered = 0
            self.halt = None

    def close(self):
        with self.lock:
            self.closing = True
            for turn in (self.cpu_turn, self.decode_turn, self.gpu_turn, self.caller_turn):
                turn.notify_all()
        for thread in (self.cpu_thread, self.decode_thread, self.gpu_thread):
            if thread is not None:
                thread.join(timeout=5)
