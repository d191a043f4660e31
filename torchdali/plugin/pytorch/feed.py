"""`feed_ndarray` and `to_torch_type`: copying a batch into a torch tensor the user owns."""
import torch

from ... import types
from ...executor import as_torch_stream
from ...tensor_list import Tensor, TensorList

to_torch_type = {t: types.to_torch_type(t) for t in types._TO_TORCH}


def feed_ndarray(dali_tensor, arr, cuda_stream=None):
    """Copy a TensorList (dense) or a Tensor into the torch tensor `arr` (same dtype and
    shape) and return `arr`. GPU copies run on `cuda_stream` (a torch stream, a raw
    cudaStream_t or a CuPy stream) without waiting; without one, on the current stream,
    and the call waits for the copy to finish."""
    if isinstance(dali_tensor, TensorList):
        src = dali_tensor.as_torch()
    elif isinstance(dali_tensor, Tensor):
        src = dali_tensor.as_torch()
    elif isinstance(dali_tensor, torch.Tensor):
        src = dali_tensor
    else:
        raise TypeError(f"feed_ndarray: expected a TensorList or Tensor, got {type(dali_tensor).__name__}")
    if src.dtype != arr.dtype:
        raise TypeError(f"feed_ndarray: the element type of the source doesn't match the target's: "
                        f"{src.dtype} vs {arr.dtype}")
    if src.shape != arr.shape:
        raise ValueError(f"feed_ndarray: shapes do not match: the source has {list(src.shape)}, "
                         f"the target {list(arr.shape)}")
    if not (src.is_cuda or arr.is_cuda):
        arr.copy_(src)
        return arr
    device = src.device if src.is_cuda else arr.device
    stream = as_torch_stream(cuda_stream, device) or torch.cuda.current_stream(device)
    with torch.cuda.stream(stream):
        arr.copy_(src, non_blocking=True)
    for t in (src, arr):
        if t.is_cuda:
            t.record_stream(stream)  # the memory stays allocated until the copy has run
    if cuda_stream is None:
        stream.synchronize()
    return arr
