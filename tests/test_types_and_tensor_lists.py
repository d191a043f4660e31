"""types: DALI's names and values; TensorListCPU: DALI's accessors and zero-copy torch access."""
import numpy as np
import pytest
import torch

from torchdali import fn, pipeline_def, types
from torchdali.tensor_list import TensorList, TensorListCPU, to_torch_samples

from conftest import dali_or_skip


def test_type_names_and_torch_mapping():
    assert types.to_torch_type(types.UINT8) is torch.uint8
    assert types.to_torch_type(types.FLOAT) is torch.float32
    assert types.to_dali_type(torch.float16) is types.FLOAT16
    assert types.to_dali_type(np.int64) is types.INT64
    assert types.to_numpy_type(types.BOOL) == np.bool_
    assert types.NCHW == "CHW" and types.NHWC == "HWC"
    assert types.INTERP_TRIANGULAR == types.DALIInterpType.INTERP_TRIANGULAR
    with pytest.raises(TypeError):
        types.to_torch_type(types.STRING)


def test_enum_values_match_dali():
    dali_or_skip()
    import nvidia.dali.types as dt
    for enum_name in ("DALIDataType", "DALIImageType", "DALIInterpType"):
        theirs = getattr(dt, enum_name)
        ours = getattr(types, enum_name)
        for member in ours:
            assert int(getattr(theirs, member.name)) == int(member), (enum_name, member.name)


def test_tensor_list_accessors():
    @pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe():
        dense = fn.external_source(lambda: np.arange(6, dtype=np.int32).reshape(3, 2), layout="W")
        ragged = fn.external_source(lambda: [np.zeros(k + 1, np.uint8) for k in range(3)])
        return dense, ragged

    dense, ragged = pipe().run()
    assert isinstance(dense, TensorListCPU) and len(dense) == 3
    assert dense.is_dense_tensor() and not ragged.is_dense_tensor()
    assert dense.layout() == "W" and dense.shape() == [[2]] * 3 and ragged.shape() == [[1], [2], [3]]
    assert isinstance(dense.at(1), np.ndarray) and dense.at(1).tolist() == [2, 3]
    assert np.array(dense.as_tensor()).shape == (3, 2) and dense.as_tensor().shape() == [3, 2]
    assert dense.as_cpu() is dense
    assert [np.array(t).tolist() for t in dense] == [[0, 1], [2, 3], [4, 5]]
    assert dense[1].shape() == [2] and dense[1].layout() == "W" and dense[1].source_info() == ""
    t = dense.as_torch()
    assert t.shape == (3, 2) and dense.as_torch() is t
    assert t.data_ptr() == dense.at(0).ctypes.data  # samples are views of the batch
    with pytest.raises(RuntimeError, match="not dense"):
        ragged.as_tensor()
    assert [s.numel() for s in ragged.as_torch_list()] == [1, 2, 3]


def test_dense_input_stays_one_tensor():
    batch = torch.arange(12).reshape(3, 4)
    tl = TensorList.make(batch)
    assert tl.as_torch() is batch and tl.at(2).tolist() == [8, 9, 10, 11]


def test_a_batch_from_a_flat_buffer_keeps_it():
    """Ragged samples laid back to back stay one buffer (flat() gives it back, no copy);
    views per sample are made when asked for; agreeing shapes make one dense view."""
    flat = torch.arange(2 * 3 + 4 + 0, dtype=torch.uint8)
    batch = TensorList.from_flat(flat, np.array([[2, 3], [4, 1], [0, 5]]), layout="HW", source_info=["a", "b", "c"])
    assert len(batch) == 3 and batch.dtype == types.UINT8 and not batch.is_dense_tensor()
    assert batch.shape() == [[2, 3], [4, 1], [0, 5]] and batch.sample_shapes().tolist() == batch.shape()
    got, shapes = batch.flat()
    assert got is flat and shapes.tolist() == [[2, 3], [4, 1], [0, 5]]
    views = batch.as_torch_list()
    assert [v.data_ptr() - flat.data_ptr() for v in views[:2]] == [0, 6] and views[1].flatten().tolist() == [6, 7, 8, 9]
    assert batch.sample(0).tolist() == [[0, 1, 2], [3, 4, 5]] and batch[1].source_info() == "b"
    assert [b.data_ptr() for b in batch.buffers()] == [flat.data_ptr()]
    dense = TensorList.from_flat(flat[:8], np.array([[2, 2], [2, 2]]))
    assert dense.is_dense_tensor() and dense.as_torch().data_ptr() == flat.data_ptr()
    assert [b.data_ptr() for b in dense.buffers()] == [flat.data_ptr()]
    other = torch.zeros(3)
    listed = TensorList.make([flat[:2], flat[4:6], other])
    assert sorted(b.untyped_storage().data_ptr() for b in listed.buffers()) == sorted([flat.data_ptr(),
                                                                                         other.data_ptr()])


def test_conversion_of_user_data():
    assert isinstance(to_torch_samples(np.zeros((2, 3))), torch.Tensor)
    assert len(to_torch_samples([np.zeros(2), torch.ones(3)])) == 2
    cap = torch.utils.dlpack.to_dlpack(torch.ones(2))
    assert to_torch_samples([cap])[0].tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="not an array"):
        to_torch_samples(["text"], "op", "data")
