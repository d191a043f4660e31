"""`external_source`: data from Python (a callable, an iterable, a generator function,
or batches given with `Pipeline.feed_input`)."""
import collections
import inspect

import torch

from .. import types
from ..schema import ANY, BOOL, INT, Arg, register
from ..tensor_list import TensorList, to_torch_samples
from ..workers import SourceSpec
from ..workers.source import batch_where, sample_where, source_failure
from .base import BatchSpec, Operator

_CYCLE = (False, True, "quiet", "raise")


def _num_outputs(args, num_inputs):
    return args.get("num_outputs") or 1


def _accepts_argument(fn):
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params)


def _per_output(value, n, name):
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"external_source: {name} has {len(value)} entries for {n} outputs")
        return list(value)
    return [value] * n


def resolve_batch(args):
    return args["batch"] if args["batch"] is not None else not args["parallel"]


def _is_callable_source(src):
    return callable(src) and not inspect.isgeneratorfunction(src)


def check_parallel(args):
    """DALI's rules for parallel sources: a source is given; no_copy is not False; a
    callable takes exactly the SampleInfo/BatchInfo/iteration argument; iterables only in
    batch mode. A non-parallel source takes no prefetch_queue_depth."""
    if not args["parallel"]:
        if args["prefetch_queue_depth"] is not None:
            raise ValueError("external_source: prefetch_queue_depth applies to parallel sources only "
                             "(parallel=True); a non-parallel source runs when its batch is due")
        return
    if args["no_copy"] is False:
        raise ValueError("external_source: no_copy=False cannot be used with parallel=True (the "
                         "samples come from the workers' shared memory without a copy)")
    src = args["source"]
    if src is None:
        raise ValueError("external_source: parallel=True needs a `source` (feed_input() data is not "
                         "produced by workers)")
    if _is_callable_source(src):
        if not _accepts_argument(src):
            raise TypeError("external_source: a parallel callable source must accept one argument: a "
                            "SampleInfo (batch=False), or a BatchInfo or the iteration (batch=True)")
    elif not resolve_batch(args):
        raise TypeError("external_source: a parallel source that is an iterable or a generator function "
                        "must run with batch=True and give whole batches")


def worker_spec(args):
    """What a worker process needs to run this source."""
    check_parallel(args)
    src = args["source"]
    return SourceSpec(src, resolve_batch(args), args["batch_info"], args["num_outputs"], args["cycle"],
                      iterable=not _is_callable_source(src))


@register("external_source", devices=("cpu", "gpu"), outputs=_num_outputs, aliases=("ExternalSource",),
          positional_args=("source", "num_outputs"),
          args=[Arg("source", ANY, None, "Callable, iterable or generator function giving the data; "
                    "without it, data comes from Pipeline.feed_input()."),
                Arg("num_outputs", INT, None, "Number of outputs; the source returns that many items."),
                Arg("batch", BOOL, None, "The source gives whole batches (True) or single samples (False); "
                    "default: True, or False when parallel=True."),
                Arg("batch_info", BOOL, False, "A batch callable gets a BatchInfo instead of the iteration."),
                Arg("cycle", ANY, False, "Restart an exhausted iterable: True/'quiet' silently, 'raise' "
                    "after raising StopIteration.", choices=_CYCLE),
                Arg("dtype", ANY, None, "Expected data type(s); data of another type is an error."),
                Arg("ndim", ANY, None, "Expected number(s) of dimensions of a sample."),
                Arg("layout", ANY, None, "Layout(s) of the data, e.g. 'HWC'."),
                Arg("parallel", BOOL, False, "Run the source in the pipeline's py_num_workers worker "
                    "processes (py_num_workers=0: in-process)."),
                Arg("no_copy", BOOL, None, "True: a list of arrays is used as given (a view per sample). "
                    "Otherwise a list of NumPy arrays of one shape and dtype is copied into one dense batch "
                    "(in C++, without the GIL), as DALI copies; a dense array or tensor is never copied. "
                    "False is an error with parallel=True, as in DALI."),
                Arg("prefetch_queue_depth", INT, None, "Batches computed ahead by a parallel source "
                    "(default 1); not allowed without parallel=True, as in DALI.",
                    check=lambda v: None if v >= 1 else "must be at least 1"),
                Arg("repeat_last", BOOL, False, "Without fed data, repeat the last batch."),
                Arg("blocking", BOOL, False, "Wait for fed data (parallel sources)."),
                Arg("use_copy_kernel", BOOL, False, "Accepted for compatibility."),
                Arg("cuda_stream", ANY, None, "Accepted for compatibility.")])
class ExternalSource(Operator):
    """Data produced by Python code, one batch per iteration."""

    is_source = True

    def __init__(self, spec):
        super().__init__(spec)
        a = spec.args
        self.source = a["source"]
        check_parallel(a)
        self.worker = None  # a ParallelSource once the pipeline's worker pool is attached
        n = spec.num_outputs
        self.n = n
        self.multi = a["num_outputs"] is not None
        self.dtypes = [types.to_torch_type(d) if d is not None else None
                       for d in _per_output(a["dtype"], n, "dtype")]
        self.ndims = _per_output(a["ndim"], n, "ndim")
        self.layouts = [l or "" for l in _per_output(a["layout"], n, "layout")]
        for nd, lay in zip(self.ndims, self.layouts):
            if nd is not None and lay and len(lay) != nd:
                raise ValueError(f"external_source: layout '{lay}' does not have ndim={nd} dimensions")
        self.batch = resolve_batch(a)
        self.cycle = a["cycle"]
        if self.cycle and (callable(self.source) and not inspect.isgeneratorfunction(self.source)):
            raise ValueError("external_source: `cycle` applies to iterables and generator functions, "
                             "not to callables")
        if self.source is not None and not callable(self.source) and not hasattr(self.source, "__iter__"):
            raise TypeError(f"external_source: source of type {type(self.source).__name__} is neither "
                            "callable nor iterable")
        # Decided once: inspecting the source each batch cost ~40 us.
        self.takes_info = callable(self.source) and _accepts_argument(self.source)
        self.callable_source = callable(self.source) and not inspect.isgeneratorfunction(self.source)
        self.fed = collections.deque()
        self.last = None
        self.iteration = 0
        self.epoch = 0
        self.iterator = None
        self.exhausted = False

    # --- data sources ---
    def _iter(self):
        if self.iterator is None:
            src = self.source
            self.iterator = iter(src() if inspect.isgeneratorfunction(src) else src)
        return self.iterator

    def _next_from_iterable(self):
        try:
            return next(self._iter())
        except StopIteration:
            self.iterator = None
            if self.cycle in (True, "quiet"):
                return next(self._iter())
            raise

    def _call(self, info):
        if self.takes_info:
            return self.source(info)
        return self.source()

    def _produce(self, batch_size):
        src = self.source
        if src is None:
            if not self.fed:
                if self.spec.args["repeat_last"] and self.last is not None:
                    return self.last
                raise self.error(f"no data was fed for iteration "
                                   f"{self.iteration}; call pipe.feed_input('{self.spec.name}', batch) "
                                   "before run() (prefetch_queue_depth batches ahead)", RuntimeError)
            return self.fed.popleft()
        if self.batch:
            try:
                if not self.callable_source:
                    return self._next_from_iterable()
                if self.spec.args["batch_info"]:
                    return self._call(types.BatchInfo(self.iteration, self.epoch))
                return self._call(self.iteration)
            except StopIteration:
                raise
            except Exception as e:
                where = batch_where(self.iteration, self.epoch)
                raise self.error(source_failure(e, where)) from e
        samples = []
        for i in range(batch_size):
            info = types.SampleInfo(self.iteration * batch_size + i, i, self.iteration, self.epoch)
            try:
                samples.append(self._call(info) if self.callable_source else self._next_from_iterable())
            except StopIteration:
                raise
            except Exception as e:
                raise self.error(source_failure(e, sample_where(info)), sample=i) from e
        if self.multi:
            return [[s[k] for s in samples] for k in range(self.n)]
        return samples

    def feed(self, data, layout=None):
        outputs = data if self.multi else [data]
        self.fed.append(self._convert(outputs, layout, source_is_batch=True))

    # --- conversion and checks ---
    def _convert(self, outputs, layout=None, source_is_batch=True):
        if isinstance(outputs, tuple) and isinstance(outputs[0], _Converted):
            return outputs
        converted = []
        for k, data in enumerate(outputs):
            samples = to_torch_samples(data, "external_source", f"output {k}", gather=not self.spec.args["no_copy"])
            if isinstance(samples, torch.Tensor) and samples.dim() == 0:
                raise self.error(f"output {k}: a batch must be a list of samples or an array with the samples "
                                 f"along its first dimension, got a scalar ({data!r})", TypeError)
            n = samples.shape[0] if isinstance(samples, torch.Tensor) else len(samples)
            if n > self.spec.max_batch_size:
                raise self.error(f"the batch has {n} samples, more "
                                 f"than the pipeline's batch_size {self.spec.max_batch_size}", ValueError)
            lay = layout if layout is not None else self.layouts[k]
            converted.append(_Converted(samples, lay))
        return tuple(converted)

    def run(self, inputs, args, ctx):
        if self.worker is not None:
            outputs = self.worker.receive(self.iteration, self.epoch)
            data = tuple(_Converted(o, layout) for o, layout in zip(outputs, self.layouts))
        else:
            data = self._produce(self.spec.max_batch_size)
        if not (isinstance(data, tuple) and data and isinstance(data[0], _Converted)):
            if self.multi:
                if not isinstance(data, (list, tuple)) or len(data) != self.n:
                    raise self.error(f"the source must return "
                                       f"{self.n} outputs (num_outputs), got {type(data).__name__}", RuntimeError)
                outputs = list(data)
            else:
                outputs = [data]
            data = self._convert(outputs)
        self.last = data
        self.iteration += 1
        result = []
        for k, conv in enumerate(data):
            samples = conv.samples
            kinds = _kinds(samples)
            self._check(k, samples, kinds, conv.layout)
            if len({(dtype, ndim) for dtype, ndim, _ in kinds}) > 1:
                self._mixed(k, samples)
            if self.spec.device == "gpu":
                samples = samples.to(ctx.cuda_device, non_blocking=True) if isinstance(samples, torch.Tensor) \
                    else [s.to(ctx.cuda_device, non_blocking=True) for s in samples]
            elif self.worker is None and any(cuda for _, _, cuda in kinds):
                raise self.error("GPU data given to a CPU external_source; use device='gpu'", TypeError)
            result.append(TensorList.make(samples, conv.layout, device=self.spec.device))
        if len({len(r) for r in result}) > 1:
            raise self.error(f"outputs have different batch sizes "
                               f"{[len(r) for r in result]}", RuntimeError)
        return result

    def _check(self, k, samples, kinds, layout):
        """The declared dtype, ndim and layout of output k against its samples, whose
        distinct (dtype, ndim, on the GPU) are `kinds` (a dense batch is checked once)."""
        dtype, ndim = self.dtypes[k], self.ndims[k]
        if dtype is None and ndim is None and not layout:
            return
        if all(self._fits(sample_dtype, sample_ndim, dtype, ndim, layout) for sample_dtype, sample_ndim, _ in kinds):
            return
        if isinstance(samples, torch.Tensor):
            metas = [(samples.dtype, samples.dim() - 1)]
        else:
            metas = [(s.dtype, s.dim()) for s in samples]  # find the first sample that differs
        for i, (sample_dtype, sample_ndim) in enumerate(metas):
            if dtype is not None and sample_dtype != dtype:
                raise self.error(f"output {k} sample {i} has type "
                                f"{types.to_dali_type(sample_dtype)}, but dtype={types.to_dali_type(dtype)} "
                                "was declared", TypeError)
            if ndim is not None and sample_ndim != ndim:
                raise self.error(f"output {k} sample {i} has "
                                 f"{sample_ndim} dimensions, but ndim={ndim} was declared", ValueError)
            if layout and len(layout) != sample_ndim:
                raise self.error(f"layout '{layout}' does not "
                                 f"match sample {i} with {sample_ndim} dimensions", ValueError)

    def _mixed(self, k, samples):
        """The error for a batch whose samples differ in type or number of dims (as in
        DALI: a batch has one of each), naming the first sample unlike sample 0."""
        first = samples[0]
        for i, s in enumerate(samples):
            if s.dtype != first.dtype:
                raise self.error(f"output {k} sample {i} has type {types.to_dali_type(s.dtype)}, sample 0 "
                                 f"{types.to_dali_type(first.dtype)}: the samples of a batch must have one type",
                                 TypeError)
            if s.dim() != first.dim():
                raise self.error(f"output {k} sample {i} has {s.dim()} dimensions, sample 0 {first.dim()}: the "
                                 "samples of a batch must have one number of dimensions", ValueError)

    @staticmethod
    def _fits(sample_dtype, sample_ndim, dtype, ndim, layout):
        return (dtype is None or sample_dtype == dtype) and (ndim is None or sample_ndim == ndim) and \
            (not layout or len(layout) == sample_ndim)

    def plan(self, inputs):
        """Outputs as declared (dtype, ndim, layout); what is not declared comes with the data."""
        device = "cpu" if self.spec.device == "cpu" else "gpu"
        return [BatchSpec(device, dtype, ndim if ndim is not None else (len(layout) if layout else None),
                          layout or None)
                for dtype, ndim, layout in zip(self.dtypes, self.ndims, self.layouts)], self.run

    def reset(self):
        if self.worker is not None:
            self.worker.discard()
        self.iterator = None
        self.iteration = 0
        self.epoch += 1
        self.fed.clear()

    def state_dict(self):
        return {"iteration": self.iteration, "epoch": self.epoch}

    def load_state_dict(self, state):
        if self.worker is not None:
            self.worker.discard()
        self.iteration = state["iteration"]
        self.epoch = state["epoch"]


def _kinds(samples):
    """The distinct (dtype, ndim, on the GPU) of a batch's samples."""
    if isinstance(samples, torch.Tensor):
        return {(samples.dtype, samples.dim() - 1, samples.is_cuda)} if len(samples) else set()
    return {(s.dtype, s.dim(), s.is_cuda) for s in samples}


class _Converted:
    """A batch already converted to torch (fed data), with its layout."""

    def __init__(self, samples, layout):
        self.samples = samples
        self.layout = layout


