"""`torchdali.plugin.pytorch`: DALI's PyTorch plugin (`nvidia.dali.plugin.pytorch`) for
torchdali pipelines: iterators that hand the pipelines' batches to a training loop as
torch tensors, without copying them."""
from .feed import feed_ndarray, to_torch_type
from .iterator import DALIClassificationIterator, DALIGenericIterator
from .policy import LastBatchPolicy
from .ragged import DALIRaggedIterator

__all__ = ["DALIGenericIterator", "DALIClassificationIterator", "DALIRaggedIterator", "LastBatchPolicy",
           "feed_ndarray", "to_torch_type"]
