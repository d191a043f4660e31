"""Experimental pipeline features: `pipeline_def(debug=True)` runs the definition eagerly."""
import functools

from . import Pipeline, definition_factory, pipeline_def as _pipeline_def
from .debug import DataNodeDebug

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
        def make(pipe_args, args, own):
            if pipe_args.get("enable_checkpointing") or pipe_args.get("checkpoint") is not None:
                raise ValueError("Pipeline: checkpoints are not available in debug mode")
            pipe = Pipeline(**pipe_args)
            pipe.definition.function = functools.partial(func, *args, **own)
            return pipe

        return definition_factory(func, pipeline_kwargs, make)

    return decorate(fn) if fn is not None else decorate
