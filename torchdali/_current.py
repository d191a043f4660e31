"""The stack of current pipelines (`with pipe:`, `Pipeline.push_current`)."""
import threading

_local = threading.local()


def stack():
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def pipeline():
    s = stack()
    return s[-1] if s else None
