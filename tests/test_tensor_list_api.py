"""TensorList / Tensor methods DALI users call (ndim, data_ptr, copy_to_external,
reinterpret, set_layout, broadcast, from_dlpack_list, reset, device_id, stream), compared
with DALI's TensorListCPU where it is installed."""
import ctypes

import numpy as np
import pytest
import torch

from torchdali import types
from torchdali.tensor_list import TensorCPU, TensorList, TensorListCPU, TensorListGPU
from conftest import dali_or_skip, requires_cuda

DATA = np.arange(24, dtype=np.int32).reshape(2, 3, 4)


def both():
    dali = dali_or_skip()
    from nvidia.dali import tensors
    return TensorListCPU(torch.from_numpy(DATA.copy()), "HW"), tensors.TensorListCPU(DATA.copy(), "HW"), dali


def test_ndim_data_ptr_and_copy_to_external_match_dali():
    ours, theirs, _ = both()
    assert ours.ndim() == theirs.ndim() == 2 and ours[0].ndim() == theirs[0].ndim()
    assert TensorListCPU([], "").ndim() == 0 and TensorListCPU([], "").data_ptr() == 0
    assert ours.data_ptr() == ours.as_torch().data_ptr() and ours[1].data_ptr() - ours.data_ptr() == 48
    for dst in (np.zeros_like(DATA), torch.zeros(2, 3, 4, dtype=torch.int32)):
        ours.copy_to_external(dst)
        np.testing.assert_array_equal(np.asarray(dst), DATA)
    a, b = np.zeros_like(DATA), np.zeros_like(DATA)
    ours.copy_to_external(ctypes.c_void_p(a.ctypes.data))
    theirs.copy_to_external(ctypes.c_void_p(b.ctypes.data))
    np.testing.assert_array_equal(a, b)
    c = np.zeros(12, np.int32)
    ours[1].copy_to_external(c.ctypes.data)
    np.testing.assert_array_equal(c, DATA[1].ravel())


def test_copy_to_external_errors():
    ours = TensorListCPU(torch.from_numpy(DATA.copy()), "HW")
    with pytest.raises(ValueError, match="must be contiguous and have 96 bytes"):
        ours.copy_to_external(np.zeros(5, np.int32))
    with pytest.raises(TypeError, match="non-null pointer"):
        ours.copy_to_external(None)
    with pytest.raises(RuntimeError, match="not contiguous"):
        TensorListCPU([torch.zeros(3), torch.zeros(3)]).data_ptr()


def test_ragged_samples_back_to_back_have_a_data_ptr():
    flat = torch.arange(7)
    batch = TensorList.from_flat(flat, [[3], [4]], device="cpu")
    assert batch.data_ptr() == flat.data_ptr()
    out = np.zeros(7, np.int64)
    batch.copy_to_external(out)
    np.testing.assert_array_equal(out, np.arange(7))


def test_reinterpret_and_set_layout_match_dali():
    ours, theirs, _ = both()
    ours.reinterpret(types.FLOAT)
    theirs.reinterpret(theirs.dtype.__class__.FLOAT)
    assert int(ours.dtype) == int(theirs.dtype)
    np.testing.assert_array_equal(np.asarray(ours.at(1)), np.array(theirs[1]))
    with pytest.raises(ValueError, match="element size must not change"):
        ours.reinterpret(types.UINT8)
    with pytest.raises(TypeError, match="must be a DALIDataType"):
        ours.reinterpret(np.int32)
    ours.set_layout("AB")
    theirs.set_layout("AB")
    assert ours.layout() == theirs.layout() == "AB"
    ours.set_layout(None)
    assert ours.layout() == ""
    with pytest.raises(ValueError, match="Got: 3|got 3"):
        ours.set_layout("ABC")
    t = ours[0]
    t.set_layout("XY")
    t.reinterpret(types.UINT32)
    assert t.layout() == "XY" and t.dtype == types.UINT32 and ours.dtype == types.FLOAT


def test_broadcast_from_dlpack_list_and_reset_match_dali():
    _, _, dali = both()
    from nvidia.dali import tensors
    src = np.arange(3, dtype=np.float32)
    ours = TensorListCPU.broadcast(TensorCPU(torch.from_numpy(src), "W"), 4)
    theirs = tensors.TensorListCPU.broadcast(tensors.TensorCPU(src, "W"), 4)
    assert (len(ours), ours.layout(), ours.shape()) == (len(theirs), theirs.layout(), [list(s) for s in theirs.shape()])
    assert len(TensorListCPU.broadcast(TensorCPU(torch.zeros(2)), 0)) == 0
    with pytest.raises(ValueError, match=">= 0"):
        TensorListCPU.broadcast(TensorCPU(torch.zeros(2)), -1)
    samples = [torch.arange(3), torch.arange(5)]
    ours = TensorListCPU.from_dlpack_list(samples, "W")
    theirs = tensors.TensorListCPU.from_dlpack_list(samples, "W")
    assert ours.shape() == [list(s) for s in theirs.shape()] and ours.layout() == theirs.layout()
    assert ours.sample(1).data_ptr() == samples[1].data_ptr()  # shared, no copy
    flat = TensorListCPU.from_dlpack_list(samples, contiguous=True)
    assert flat.data_ptr() != 0 and flat.shape() == [[3], [5]]
    with pytest.raises(TypeError, match="different data types"):
        TensorListCPU.from_dlpack_list([torch.arange(3), torch.arange(3.0)])
    with pytest.raises(TypeError, match="position 0 does not support the DLPack protocol"):
        TensorListCPU.from_dlpack_list([1])
    ours.reset()
    assert (len(ours), ours.layout(), ours.dtype) == (0, "", types.NO_TYPE)


@requires_cuda
def test_gpu_classes():
    batch = TensorListGPU.from_dlpack_list([torch.arange(4, device="cuda")] * 2, "W")
    assert batch.device_id() == torch.cuda.current_device() and batch[0].device_id() == batch.device_id()
    assert batch.stream is None
    out = torch.zeros(8, dtype=torch.int64, device="cuda")
    batch.copy_to_external(out)
    ptr = torch.zeros(8, dtype=torch.int64, device="cuda")
    batch.copy_to_external(ctypes.c_void_p(ptr.data_ptr()), cuda_stream=torch.cuda.current_stream())
    np.testing.assert_array_equal(out.cpu().numpy(), [0, 1, 2, 3] * 2)
    np.testing.assert_array_equal(ptr.cpu().numpy(), [0, 1, 2, 3] * 2)
    with pytest.raises(TypeError, match="takes GPU data"):
        TensorListGPU.from_dlpack_list([torch.arange(3)])
