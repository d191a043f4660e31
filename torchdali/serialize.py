"""Pipeline serialization (`Pipeline.serialize` / `Pipeline.deserialize`): the graph and
the pipeline's parameters as versioned JSON, described in docs/serialization.md.

Operators are stored in creation order, so a deserialized pipeline gives its random
operators the same seeds as the original. Graphs that hold Python callbacks
(external_source with a `source`, python_function) cannot be stored."""
import json

import numpy as np
import torch

from . import schema as _schema
from . import types
from .graph import DataNode, call_operator, topological_order
from .pipeline.config import STORED

FORMAT = "torchdali-pipeline"
VERSION = 1

_ENUMS = {cls.__name__: cls for cls in (types.DALIDataType, types.DALIImageType, types.DALIInterpType)}
_ENUM_TYPES = tuple(_ENUMS.values())


def serialize_pipeline(pipe):
    """The JSON text of a pipeline whose graph is defined."""
    ops = sorted(topological_order(pipe.definition.outputs, pipe.definition.sinks), key=lambda n: n.id)
    index = {op.id: i for i, op in enumerate(ops)}

    def ref(node):
        return [index[node.source.id], node.index]

    params = {k: _encode(v, "Pipeline", k) for k, v in pipe.config.stored().items()}
    records = ",\n  ".join(json.dumps(_op_record(op, ref)) for op in ops)
    outputs = [ref(x) for x in pipe.definition.outputs]
    sinks = [index[op.id] for op in pipe.definition.sinks if op.id in index]
    # One operator per line: readable, and diffs of two pipelines line up.
    return (f'{{"format": "{FORMAT}", "version": {VERSION},\n "pipeline": {json.dumps(params)},\n'
            f' "operators": [\n  {records}\n ],\n "outputs": {json.dumps(outputs)},\n'
            f' "sinks": {json.dumps(sinks)}}}\n')


def _op_record(op, ref):
    what = f"{op.schema.name} '{op.name}'"
    if op.schema.name == "external_source" and op.args.get("source") is not None:
        raise TypeError(f"serialize: {what} has a Python `source`, which cannot be serialized; "
                        "feed it with feed_input() (no `source`) to serialize the pipeline")
    args = {}
    for key, value in op.args.items():
        if key in op.arg_inputs or key == "device":
            continue
        arg = op.schema.args.get(key)
        if key == "name" or arg is not None and _equal(value, arg.default):
            continue  # defaults are not stored; the name only if the user gave one
        args[key] = _encode(value, what, key)
    if op.args.get("name"):
        args["name"] = op.args["name"]
    return {"op": op.schema.name, "device": op.device, "args": args,
            "inputs": [ref(x) for x in op.inputs],
            "arg_inputs": {k: ref(x) for k, x in op.arg_inputs.items()},
            "num_outputs": len(op.outputs)}


def _equal(a, b):
    if a is _schema.REQUIRED or b is _schema.REQUIRED:
        return False
    if isinstance(a, (np.ndarray, torch.Tensor)) or isinstance(b, (np.ndarray, torch.Tensor)):
        return False
    try:
        return type(a) is type(b) and bool(a == b)
    except (TypeError, ValueError):
        return False


def _encode(value, what, key):
    """A JSON value; tuples, arrays and DALI enums are tagged so that they come back as such."""
    if isinstance(value, _ENUM_TYPES):
        return {"enum": type(value).__name__, "name": value.name}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return _encode(np.asarray(value), what, key) | {"scalar": True}
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise TypeError(f"serialize: {what}: argument '{key}' holds Python objects")
        return {"array": value.tolist(), "dtype": value.dtype.str, "shape": list(value.shape)}
    if isinstance(value, tuple):
        return {"tuple": [_encode(v, what, key) for v in value]}
    if isinstance(value, list):
        return [_encode(v, what, key) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: _encode(v, what, key) for k, v in value.items()}}
    if callable(value):
        raise TypeError(f"serialize: {what}: argument '{key}' is a Python callback ({value!r}), which "
                        "cannot be serialized")
    raise TypeError(f"serialize: {what}: argument '{key}' of type {type(value).__name__} cannot be serialized")


def _decode(value):
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "enum" in value:
        return _ENUMS[value["enum"]][value["name"]]
    if "array" in value:
        arr = np.array(value["array"], dtype=np.dtype(value["dtype"])).reshape(value["shape"])
        return arr[()] if value.get("scalar") else arr
    if "tuple" in value:
        return tuple(_decode(v) for v in value["tuple"])
    if "dict" in value:
        return {k: _decode(v) for k, v in value["dict"].items()}
    raise ValueError(f"unknown tagged value {sorted(value)}")


def load(text):
    """(pipeline parameters, graph builder) from serialized text; the builder, called
    with a current pipeline, adds the operators and returns (outputs, sinks)."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a serialized torchdali pipeline")
        if data.get("version") != VERSION:
            raise ValueError(f"format version {data.get('version')} is not supported (this torchdali "
                             f"reads version {VERSION})")
        params = {k: _decode(v) for k, v in data["pipeline"].items() if k in STORED}
        records, outputs, sinks = data["operators"], data["outputs"], data["sinks"]
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise ValueError(f"deserialize: {e}") from None
    return params, lambda: _build(records, outputs, sinks)


def _build(records, outputs, sinks):
    made = []  # per record: its output DataNode, or the list of them

    def node(r):
        out = made[r[0]]
        return out if isinstance(out, DataNode) else out[r[1]]

    for i, rec in enumerate(records):
        try:
            kwargs = {k: _decode(v) for k, v in rec["args"].items()}
            kwargs.update({k: node(r) for k, r in rec["arg_inputs"].items()})
            kwargs["device"] = rec["device"]
            made.append(call_operator(rec["op"], [node(r) for r in rec["inputs"]], kwargs))
        except (KeyError, IndexError, TypeError) as e:
            raise ValueError(f"deserialize: operator {i} ({rec.get('op')!r}) is malformed: {e}") from None
    try:
        return [node(r) for r in outputs], [node([i, 0]).source for i in sinks]
    except (KeyError, IndexError, TypeError) as e:
        raise ValueError(f"deserialize: outputs or sinks are malformed: {e}") from None
