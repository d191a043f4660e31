"""torchdali: NVIDIA DALI's pipeline programming model, native to PyTorch.

`import torchdali as dali` and write DALI code: `pipeline_def`, `Pipeline`, `fn`,
`ops`, `types`, `math`."""
from . import types
from . import fn
from . import ops
from . import math
from . import tfrecord  # noqa: F401  (dali.tfrecord)
from . import tensor_list as tensors
from .errors import OperatorError
from .graph import DataNode, newaxis
from .pipeline import Pipeline, pipeline_def, do_not_convert
from .pipeline import experimental as _experimental  # noqa: F401  (dali.pipeline.experimental)

__version__ = "0.1.0"

__all__ = ["types", "fn", "ops", "math", "tensors", "DataNode", "newaxis", "Pipeline", "pipeline_def",
           "do_not_convert", "OperatorError"]
