"""Operator implementations; importing this package registers all of them."""
import importlib

for _module in ("plumbing", "arithmetic", "conversions", "random", "external_source", "readers", "decoders",
                "crop"):
    try:
        importlib.import_module(f"{__name__}.{_module}")
    except ModuleNotFoundError as _e:  # a family still being written
        if _e.name != f"{__name__}.{_module}":
            raise
