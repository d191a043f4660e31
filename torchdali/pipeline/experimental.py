"""Experimental pipeline features: `pipeline_def(debug=True)` runs the definition eagerly."""
import functools
import inspect

from . import _PIPELINE_ARGS, pipeline_def as _pipeline_def
from .debug import DataNodeDebug, DebugPipeline

__all__ = ["pipeline_def", "DataNodeDebug"]


def pipeline_def(fn=None, *, enable_conditionals=False, debug=False, **pipeline_kwargs):
    """`@pipeline_def` with experimental features. `debug=True`: every `run()` executes the
    definition function again, operator by operator; outputs of operators are
    `DataNodeDebug` (`.get()` gives the batch) and arrays or lists of arrays may be given
    to operators directly. Slow: for inspecting a pipeline, not for training."""
    if not debug:
        return _pipeline_def(fn, enable_conditionals=enable_conditionals, **pipeline_kwargs)

    def decorate(func):
        if enable_conditionals:
            raise ValueError(f"@pipeline_def: {func.__name__}: debug=True does not support "
                             "enable_conditionals=True")
        params = inspect.signature(func).parameters
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
            definition = functools.partial(func, *args, **own)
            return DebugPipeline(definition, **{**pipeline_kwargs, **pipe_args})

        create._is_pipeline_def = True
        return create

    return decorate(fn) if fn is not None else decorate
