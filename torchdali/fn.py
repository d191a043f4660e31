"""DALI's functional API: `fn.readers.file(...)`, `fn.decoders.image(...)`, ...

Generated from the operator registry (see `torchdali.schema`)."""
import sys

from . import operators as _operators  # noqa: F401  (registers the operators)
from ._api import populate as _populate

_populate(sys.modules[__name__], __import__(__name__.rsplit(".", 1)[0] + ".ops", fromlist=["_"]))
