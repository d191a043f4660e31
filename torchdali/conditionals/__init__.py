"""Per-sample conditionals: `@pipeline_def(enable_conditionals=True)` (see docs/conditionals.md).

`trace` runs a pipeline definition rewritten by `transform` (an AST rewrite of `if`,
`and`, `or`, `not` and `if` expressions) with a `ConditionStack` (`scope`) that splits
the batch into branches and merges them; `runtime` is what the rewritten code calls."""
from .scope import ConditionStack
from .transform import ConversionError, convert


def trace(pipe, func, args, kwargs):
    """Run the definition `func` converted, inside `pipe`, with per-sample conditionals."""
    try:
        converted = convert(func)
    except ConversionError as e:
        raise ValueError(f"enable_conditionals: {e}") from None
    pipe.definition.conditions = ConditionStack()
    try:
        with pipe:
            outs = converted(*args, **kwargs)
        flat = []
        for out in (outs if isinstance(outs, (list, tuple)) else [outs]):
            flat.extend(out if isinstance(out, (list, tuple)) else [out])
        pipe.definition.conditions.check_outputs(flat)
        return outs
    finally:
        pipe.definition.conditions = None
