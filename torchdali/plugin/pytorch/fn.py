"""`torchdali.plugin.pytorch.fn` (DALI's `nvidia.dali.plugin.pytorch.fn`): the operator
`torch_python_function`, the same as `torchdali.fn.torch_python_function`."""
from ...fn import torch_python_function

__all__ = ["torch_python_function"]
