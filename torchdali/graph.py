"""The symbolic graph: `DataNode` (an operator output) and `OpNode` (an operator call).

Calling an operator (through `fn` or `ops`) checks its arguments against the
registry, picks its device, enforces the cpu -> mixed -> gpu stage order and returns
DataNodes. Nothing runs until the Pipeline is built.
"""
import itertools

import numpy as np
import torch

from . import schema as _schema
from . import types as _types
from . import _current

_ids = itertools.count()


def new_node_id():
    """A fresh id for a node of the graph (operators, and debug mode's given data)."""
    return next(_ids)


class Definition:
    """What a pipeline collects while its graph is defined, and what the graph code asks of
    it: the outputs, the operators kept for their side effects (sinks), the per-sample
    conditions in effect (torchdali.conditionals) and, in debug mode, the function that
    defines the pipeline (called at every iteration) and the hook that runs each operator
    call at once."""

    def __init__(self):
        self.outputs = None  # list of DataNodes once defined
        self.sinks = []  # OpNodes
        self.conditions = None  # a conditionals.ConditionStack while a conditional definition runs
        self.function = None  # debug mode: the definition function, run eagerly
        self.eager = None  # debug mode: callable(name, inputs, kwargs) -> outputs


def _definition():
    pipe = _current.pipeline()
    return pipe.definition if pipe is not None else None


_MAX_SUBSCRIPTS = 32  # as operators.arithmetic's _tensor_subscript


class _NewAxis:
    """`dali.newaxis` (or `dali.newaxis("C")`, naming the new axis in the layout) in an index:
    inserts a dimension of extent 1."""

    def __init__(self, name=None):
        if name is not None and not isinstance(name, str):
            raise TypeError("newaxis: the axis name must be a single-character string")
        if name is not None and len(name) != 1:
            raise ValueError(f"newaxis: the axis name must be a single-character string, got {name!r}")
        self.name = name

    def __call__(self, name=None):
        return _NewAxis(name)

    def __repr__(self):
        return "newaxis" if self.name is None else f"newaxis({self.name!r})"


newaxis = _NewAxis()


class DataNode:
    """A batch flowing between operators: the output `index` of `source`."""

    def __init__(self, name, device="cpu", source=None, index=0):
        self.name = name
        self.device = device
        self.source = source
        self.index = index

    def __repr__(self):
        return f"DataNode(name={self.name!r}, device={self.device!r})"

    # --- device transfer and metadata ---
    def gpu(self):
        """This batch copied to the GPU (a no-op for GPU data)."""
        if self.device == "gpu":
            return self
        return call_operator("_to_gpu", [self], {"device": "mixed"})

    def cpu(self):
        """This batch on the CPU: itself for CPU data. GPU data is copied to the host (one
        transfer per batch), so that CPU operators can take it, as in DALI 2.4: this needs the
        dynamic executor (`exec_dynamic`, the default where `exec_async` and `exec_pipelined`
        are on and the prefetch queues are not separated); other pipelines refuse it, here
        when a pipeline is current, else when the pipeline is built. The operators that depend
        on the copy run after the GPU work it waits for (see torchdali.executor)."""
        if self.device == "cpu":
            return self
        pipe = _current.pipeline()
        if pipe is not None:
            check_gpu_to_cpu(pipe.config, self)
        return call_operator("_to_cpu", [self], {"device": "gpu"})

    def _on(self, device):
        """This batch moved to `device` ("cpu" or "gpu")."""
        return self.cpu() if device == "cpu" else self.gpu()

    def shape(self, *, dtype=None, device="cpu", arg_dtype=None):
        """The per-sample shape of this batch, as a new DataNode (int64 unless `dtype`) on
        `device`; on the CPU, the shapes of GPU data (read on the host, no copy) need what
        .cpu() needs."""
        dtype = dtype if dtype is not None else arg_dtype
        kwargs = {"device": device} if self.device == "cpu" else {"device": "gpu", "on_host": device == "cpu"}
        if kwargs.get("on_host") and _current.pipeline() is not None:
            check_gpu_to_cpu(_current.pipeline().config, self)
        out = call_operator("_shapes", [self], dict(kwargs, **({"dtype": dtype} if dtype is not None else {})))
        return out._on(device)

    def source_info(self, *, device="cpu"):
        """The file name or position each sample came from (uint8 1D per sample)."""
        return self.property("source_info", device=device)

    def property(self, key, *, device="cpu"):
        """Metadata of each sample: "source_info" or "layout", as 1D uint8 tensors on `device`;
        on the CPU, those of GPU data need what .cpu() needs."""
        out = call_operator("get_property", [self], {"key": key, "device": "cpu" if self.device == "cpu" else "gpu"})
        return out._on(device)

    meta = property

    # --- indexing ---
    def __getitem__(self, index):
        """Per-sample indexing as DALI's: ints (or per-sample DataNode indices) drop a dimension,
        slices (DataNode bounds allowed) and None keep it, `dali.newaxis` inserts one; and, where
        DALI 2.4 refuses it, one `...` standing for the dimensions the others leave out."""
        items, arg_inputs, names = [], {}, []

        def value(v, kind, position):
            if v is None or isinstance(v, (int, np.integer)):
                return None if v is None else int(v)
            if isinstance(v, DataNode):
                arg_inputs[f"{kind}_{position}"] = v
                return f"{kind}_{position}"
            raise TypeError(f"{self.name}: index {v!r} of type {type(v).__name__} is not an int or a slice "
                            "(nor None, dali.newaxis, ... or a DataNode)")

        for item in index if isinstance(index, tuple) else (index,):
            if isinstance(item, _NewAxis):
                items.append(("newaxis",))
                names.append(item.name)
            elif item is Ellipsis:
                if ("ellipsis",) in items:
                    raise IndexError(f"{self.name}: an index can only have a single ellipsis (...)")
                items.append(("ellipsis",))
            elif item is None or isinstance(item, slice):
                item = item or slice(None)
                position = len(items)
                items.append(("slice",) + tuple(value(v, k, position) for v, k in
                                                ((item.start, "lo"), (item.stop, "hi"), (item.step, "step"))))
            else:
                items.append(("index", value(item, "at", len(items))))
        if len(items) > _MAX_SUBSCRIPTS:
            raise IndexError(f"{self.name}: at most {_MAX_SUBSCRIPTS} subscripts are supported, got {len(items)}")
        if any(n is not None for n in names) and any(n is None for n in names):
            raise ValueError(f"{self.name}: new axis name must be specified for all axes or none")
        kwargs = {"spec": items, "new_axis_names": "".join(names) if names and names[0] is not None else None}
        return call_operator("_tensor_subscript", [self], dict(kwargs, **arg_inputs))

    # --- arithmetic ---
    def _binary(self, op, other, reflected=False):
        return arithmetic(op, *((other, self) if reflected else (self, other)))

    def __add__(self, o): return self._binary("add", o)
    def __radd__(self, o): return self._binary("add", o, True)
    def __sub__(self, o): return self._binary("sub", o)
    def __rsub__(self, o): return self._binary("sub", o, True)
    def __mul__(self, o): return self._binary("mul", o)
    def __rmul__(self, o): return self._binary("mul", o, True)
    def __truediv__(self, o): return self._binary("fdiv", o)
    def __rtruediv__(self, o): return self._binary("fdiv", o, True)
    def __floordiv__(self, o): return self._binary("div", o)
    def __rfloordiv__(self, o): return self._binary("div", o, True)
    def __mod__(self, o): return self._binary("mod", o)
    def __rmod__(self, o): return self._binary("mod", o, True)
    def __pow__(self, o): return self._binary("pow", o)
    def __rpow__(self, o): return self._binary("pow", o, True)
    def __eq__(self, o): return self._binary("eq", o)
    def __ne__(self, o): return self._binary("neq", o)
    def __lt__(self, o): return self._binary("lt", o)
    def __le__(self, o): return self._binary("leq", o)
    def __gt__(self, o): return self._binary("gt", o)
    def __ge__(self, o): return self._binary("geq", o)
    def __and__(self, o): return self._binary("bitand", o)
    def __rand__(self, o): return self._binary("bitand", o, True)
    def __or__(self, o): return self._binary("bitor", o)
    def __ror__(self, o): return self._binary("bitor", o, True)
    def __xor__(self, o): return self._binary("bitxor", o)
    def __rxor__(self, o): return self._binary("bitxor", o, True)
    def __lshift__(self, o): return self._binary("lshift", o)
    def __rlshift__(self, o): return self._binary("lshift", o, True)
    def __rshift__(self, o): return self._binary("rshift", o)
    def __rrshift__(self, o): return self._binary("rshift", o, True)
    def __neg__(self): return arithmetic("minus", self)
    def __pos__(self): return self
    def __abs__(self): return arithmetic("abs", self)
    def __invert__(self): return arithmetic("bitnot", self)

    __hash__ = object.__hash__

    def __bool__(self):
        definition = _definition()
        if definition is not None and definition.conditions is not None:
            raise TypeError(
                f"{self.name}: a DataNode has no truth value outside a per-sample `if`, `if` expression, "
                "`and`, `or` or `not` of the pipeline definition (e.g. in `while`, `bool()`, a lambda or a "
                "function marked @do_not_convert)")
        raise TypeError(
            f"{self.name}: a DataNode has no truth value while the graph is defined. To branch "
            "per sample with `if`, decorate the pipeline with @pipeline_def(enable_conditionals=True).")


class OpNode:
    """One call of an operator: its schema, device, constant arguments and connections."""

    def __init__(self, schema, device, args, inputs, arg_inputs, num_outputs, name=None):
        self.id = new_node_id()
        self.schema = schema
        self.device = device
        self.args = args  # converted constants (arg inputs present as None)
        self.inputs = inputs  # list[DataNode]
        self.arg_inputs = arg_inputs  # dict[str, DataNode]
        self.in_branch = False  # runs on a per-sample conditional's part of the batch
        self.name = name or f"__{schema.fn_name}_{self.id}"
        out_device = "cpu" if device == "cpu" or self.gives_host_data else "gpu"
        self.outputs = [DataNode(f"{self.name}[{i}]", out_device, self, i) for i in range(num_outputs)]

    @property
    def stage(self):
        return self.device

    @property
    def gives_host_data(self):
        """Runs with the GPU operators but gives CPU data: `_to_cpu` (DataNode.cpu()) and the
        shapes of GPU data read on the host (DataNode.shape())."""
        return self.schema.name == "_to_cpu" or (self.schema.name == "_shapes" and bool(self.args.get("on_host")))

    def __repr__(self):
        return f"OpNode({self.schema.name}, device={self.device!r}, name={self.name!r})"


def _describe(node):
    """Who produced a DataNode, for error messages."""
    op = node.source
    if op.schema.name in ("_to_gpu", "_to_cpu"):
        return f".{op.schema.name[4:]}() of {_describe(op.inputs[0])}"
    return f"output {node.index} of {op.schema.name} '{op.name}'"


def _as_input(value, schema, position):
    """A positional input as a DataNode: constants become `_constant` nodes."""
    if isinstance(value, DataNode):
        return value
    if isinstance(value, (list, tuple)) and not value:
        raise TypeError(f"{schema.name}: input {position} is an empty list")
    if isinstance(value, (int, float, bool, np.ndarray, np.generic, torch.Tensor, list, tuple)):
        return call_operator("_constant", [], {"value": value, "device": "cpu"})
    raise TypeError(f"{schema.name}: input {position} of type {type(value).__name__} is not a DataNode")


def call_operator(name, inputs, kwargs):
    """Add a call of operator `name` to the graph; returns its output DataNode(s)."""
    definition = _definition()
    if definition is not None and definition.eager is not None:  # debug mode runs each call now
        return definition.eager(name, inputs, kwargs)
    schema = _schema.get(name)
    inputs, kwargs = _normalize_call(schema, inputs, kwargs)
    if any(_is_node_list(x) for x in inputs):  # applied to lists of DataNodes: once per element
        return _per_element(name, schema, inputs, kwargs)
    inputs, arg_inputs = _as_data(schema, inputs, kwargs)
    conditions = definition.conditions if definition is not None else None  # see torchdali.conditionals
    if conditions is not None:
        inputs, arg_inputs = conditions.route_inputs(inputs, arg_inputs)
    device = _resolve_device(schema, kwargs.get("device"), inputs)
    args = _check_call(schema, device, inputs, arg_inputs, kwargs)
    node = OpNode(schema, device, args, inputs, arg_inputs, schema.outputs_for(args, len(inputs)), args.get("name"))
    if conditions is not None:
        conditions.placed(node)
    if schema.side_effects or args.get("preserve"):
        if definition is None:
            raise RuntimeError(f"{schema.name}: an operator with side effects (or preserve=True) "
                               "needs a current pipeline: call it inside `with pipe:` or a @pipeline_def")
        definition.sinks.append(node)
    outs = node.outputs
    return outs[0] if len(outs) == 1 else outs


def _normalize_call(schema, inputs, kwargs):
    """(inputs, kwargs) with the arguments given positionally after the inputs moved to kwargs."""
    inputs, kwargs = list(inputs), dict(kwargs)
    extra = inputs[schema.max_inputs:]
    if extra and len(extra) <= len(schema.positional_args):
        inputs = inputs[:schema.max_inputs]
        for arg, value in zip(schema.positional_args, extra):
            if arg in kwargs:
                raise TypeError(f"{schema.name}: '{arg}' given both positionally and by name")
            kwargs[arg] = value
    return inputs, kwargs


def _is_node_list(x):
    return isinstance(x, list) and bool(x) and isinstance(x[0], DataNode)


def _per_element(name, schema, inputs, kwargs):
    """The call repeated for each element of its input lists (all of one length)."""
    lengths = {len(x) for x in inputs if _is_node_list(x)}
    if len(lengths) > 1:
        raise ValueError(f"{schema.name}: input lists have different lengths {sorted(lengths)}")
    per = [call_operator(name, [x[i] if isinstance(x, list) else x for x in inputs], kwargs)
           for i in range(lengths.pop())]
    if per and isinstance(per[0], (list, tuple)):
        return [list(group) for group in zip(*per)]
    return per


def _as_data(schema, inputs, kwargs):
    """The inputs as DataNodes (constants become `_constant` nodes) and the argument inputs."""
    if not schema.min_inputs <= len(inputs) <= schema.max_inputs:
        raise TypeError(f"{schema.name}: expected {schema.min_inputs} to {schema.max_inputs} inputs, "
                        f"got {len(inputs)}")
    inputs = [_as_input(x, schema, i) for i, x in enumerate(inputs)]
    return inputs, {k: v for k, v in kwargs.items() if isinstance(v, DataNode)}


def _resolve_device(schema, device, inputs):
    """The device asked for, or the one the inputs imply (gpu after GPU data, else the
    operator's first device)."""
    if device is None:
        device = "gpu" if any(isinstance(x, DataNode) and x.device == "gpu" for x in inputs) else "cpu"
        if device not in schema.devices:
            device = schema.devices[0]
    if device not in ("cpu", "gpu", "mixed"):
        raise ValueError(f"{schema.name}: device '{device}' is not 'cpu', 'gpu' or 'mixed'")
    if device not in schema.devices:
        raise ValueError(f"{schema.name}: device '{device}' is not supported (supported: "
                         f"{', '.join(schema.devices)})")
    return device


def _check_call(schema, device, inputs, arg_inputs, kwargs):
    """The stage rules (no GPU data into CPU or mixed operators, argument inputs on the
    CPU, GPU operators only in pipelines with a GPU) and the checked constant arguments.
    As in DALI, GPU data reaches a CPU operator only through an explicit .cpu()."""
    for i, x in enumerate(inputs):
        if isinstance(x, DataNode) and x.device == "gpu" and device in ("cpu", "mixed"):
            raise ValueError(
                f"{schema.name}: the {device.upper()} operator cannot take GPU data as input {i} "
                f"({_describe(x)}); copy it to the CPU with .cpu() first")
    for key, node in arg_inputs.items():
        if node.device != "cpu":
            raise ValueError(f"{schema.name}: argument input '{key}' ('{node.name}') is GPU data; "
                             "argument inputs must be CPU data (copy it with .cpu())")
    args = schema.check_args({k: v for k, v in kwargs.items() if k not in arg_inputs}, arg_inputs)
    args["device"] = device
    pipe = _current.pipeline()
    if device in ("mixed", "gpu") and pipe is not None and pipe.config.device_id is None:
        raise ValueError(f"{schema.name}: device '{device}' needs a GPU, but the pipeline was "
                         "created with device_id=None (CPU only)")
    return args


def check_gpu_to_cpu(config, data):
    """DALI's rule for moving GPU DataNode `data` to the CPU (`DataNode.cpu()`, and shape()
    or property() of GPU data on the CPU): only the dynamic executor allows it. `config`: the
    pipeline's PipelineConfig."""
    if config.exec_dynamic:
        return
    if config.exec_separated:
        reason = "separated CPU/GPU prefetch queues (prefetch_queue_depth as a dict) rule out"
    elif not (config.exec_async and config.exec_pipelined):
        reason = "is off by default without exec_async and exec_pipelined (pass exec_dynamic=True)"
    else:
        reason = "this pipeline turned off (exec_dynamic=False)"
    raise RuntimeError(f"{data.name}: this pipeline doesn't support transition from GPU to CPU ({_describe(data)} "
                       f"is GPU data): GPU->CPU transitions need the dynamic executor (exec_dynamic), which {reason}")


def topological_order(outputs, sinks=()):
    """OpNodes reachable from `outputs` and `sinks`, each after its inputs; the rest is pruned."""
    order, seen = [], set()

    def visit(op):
        if op.id in seen:
            return
        seen.add(op.id)
        for x in list(op.inputs) + list(op.arg_inputs.values()):
            visit(x.source)
        order.append(op)

    for node in outputs:
        visit(node.source)
    for op in sinks:
        visit(op)
    return order


def arithmetic(op, *operands):
    """An elementwise operation over DataNodes and scalars (Python, NumPy or
    `types.ScalarConstant`; at least one DataNode)."""
    nodes = [x for x in operands if isinstance(x, DataNode)]
    if not nodes:
        raise TypeError(f"math.{op}: at least one operand must be a DataNode")
    scalars = tuple((i, _scalar_operand(op, x)) for i, x in enumerate(operands) if not isinstance(x, DataNode))
    if any(x.device == "gpu" for x in nodes):  # as DALI: CPU operands of GPU data go to the GPU
        nodes = [x.gpu() for x in nodes]
    return call_operator("_arithmetic", nodes, {"op": op, "scalars": scalars})


def _scalar_operand(op, x):
    """A constant operand as a Python bool or float or a NumPy scalar of its type; Python
    ints are int32 (an error out of its range), as in DALI."""
    if isinstance(x, _types.ScalarConstant):
        if x.dtype == _types.FLOAT16:
            raise TypeError(f"math.{op}: float16 constants are not supported in arithmetic (as in DALI)")
        return x.as_numpy()
    if isinstance(x, int) and not isinstance(x, bool):
        info = np.iinfo(np.int32)
        if not info.min <= x <= info.max:
            raise OverflowError(f"math.{op}: integer constant {x} out of range for int32 "
                                "(use types.Constant(value, dtype=types.INT64))")
        return x
    if isinstance(x, (float, bool, np.generic)):
        return x
    raise TypeError(f"math.{op}: operand {x!r} is neither a DataNode nor a scalar")
