"""`torchdali.plugin.pytorch`: DALI's PyTorch plugin (`nvidia.dali.plugin.pytorch`) for
torchdali pipelines: iterators that hand the pipelines' batches to a training loop as
torch tensors, without copying them, and a `torch.utils.data.IterableDataset` over a
pipeline (one epoch per `iter()`, resumable mid-epoch). `fn.torch_python_function` and
`TorchPythonFunction` are the operators of `torchdali.fn` / `torchdali.ops`."""
from ...ops import TorchPythonFunction
from . import fn
from .dataset import DALIIterableDataset
from .feed import feed_ndarray, to_torch_type
from .iterator import DALIClassificationIterator, DALIGenericIterator
from .policy import LastBatchPolicy
from .ragged import DALIRaggedIterator

__all__ = ["DALIGenericIterator", "DALIClassificationIterator", "DALIRaggedIterator", "DALIIterableDataset",
           "LastBatchPolicy", "feed_ndarray", "to_torch_type", "TorchPythonFunction", "fn"]
