"""torchdali::pack against torch.cat of the flattened samples, unpack as its inverse;
gather_arrays against np.stack."""
import numpy as np
import pytest
import torch

from torchdali.kernels.pack import gather_arrays, pack, unpack


def _samples(shapes, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(s, generator=g) * 200).to(dtype) for s in shapes]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.float16, torch.float64])
@pytest.mark.parametrize("shapes", [[(3, 5, 2)] * 4, [(3, 5, 2), (1, 7, 2), (0, 4, 2), (9, 1, 2)],
                                    [()] * 3, [(4097,), (1,), (70000,)]],
                         ids=["dense", "ragged", "scalars", "long"])
def test_matches_the_flattened_samples(shapes, dtype):
    samples = _samples(shapes, dtype)
    samples[0] = samples[0].transpose(0, -1).contiguous().transpose(0, -1) if samples[0].dim() > 1 else samples[0]
    flat, got = pack(samples)
    assert flat.dtype == dtype and flat.dim() == 1
    assert torch.equal(flat, torch.cat([s.reshape(-1) for s in samples]))
    assert got.dtype == torch.int64 and got.tolist() == [list(s) for s in shapes]


def test_mixed_samples_are_named():
    with pytest.raises(ValueError, match="pack: all `samples` must have the same number of dims; sample 0 has 2, "
                                         "sample 1 has 1"):
        pack([torch.zeros(2, 2), torch.zeros(3)])
    with pytest.raises(TypeError, match="pack: all `samples` must have the same dtype.*sample 2 is Byte"):
        pack([torch.zeros(2), torch.zeros(2), torch.zeros(2, dtype=torch.uint8)])
    with pytest.raises(ValueError, match="at least one tensor"):
        pack([])


def test_opcheck():
    torch.library.opcheck(torch.ops.torchdali.pack.default, (_samples([(2, 3), (4, 3), (1, 3)]), False))


@pytest.mark.parametrize("shapes", [[(3, 5, 2)] * 4, [(3, 5, 2), (1, 7, 2), (0, 4, 2), (9, 1, 2)],
                                    [(4097,), (1,), (70000,)]], ids=["dense", "ragged", "long"])
def test_unpack_gives_back_the_samples_as_views(shapes):
    samples = _samples(shapes, torch.int16)
    flat, got = pack(samples)
    views = unpack(flat, got.numpy())
    assert [tuple(v.shape) for v in views] == [tuple(s) for s in shapes]
    assert all(torch.equal(v, s) for v, s in zip(views, samples))
    views[-1].fill_(7)  # views of flat's memory
    assert (flat[-views[-1].numel():] == 7).all()


def test_unpack_errors_and_opcheck():
    flat = torch.arange(10.0)
    with pytest.raises(ValueError, match="the shapes cover 6 elements but `flat` has 10"):
        unpack(flat, np.array([[2, 3]]))
    with pytest.raises(ValueError, match="need more than the 10 elements of `flat` \\(sample 1\\)"):
        unpack(flat, np.array([[1, 3], [4, 3]]))
    with pytest.raises(ValueError, match="contiguous 1-D tensor"):
        unpack(flat.view(2, 5), np.array([[10]]))
    torch.library.opcheck(torch.ops.torchdali.unpack.default, (flat, [2, 3, 4, 1], 2))


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float16, np.float64, np.bool_])
@pytest.mark.parametrize("shape", [(5,), (3, 7, 2), (0, 4)], ids=["1d", "3d", "empty"])
def test_gather_arrays_equals_np_stack(shape, dtype):
    rng = np.random.default_rng(0)
    arrays = [(rng.random(shape) * 100).astype(dtype) for _ in range(9)]
    arrays[3].flags.writeable = False  # read-only arrays are copied as well
    out = gather_arrays(arrays)
    assert out.shape == (9,) + shape and np.array_equal(out.numpy(), np.stack(arrays))
    assert out.numpy().ctypes.data not in {a.ctypes.data for a in arrays}


def test_gather_arrays_copies_large_batches_on_threads():
    arrays = [np.full((300, 400, 3), i, np.uint8) for i in range(40)]  # 14 MB: several chunks
    assert np.array_equal(gather_arrays(arrays).numpy(), np.stack(arrays))


@pytest.mark.parametrize("arrays", [
    [np.zeros(3), np.zeros(4)],                                  # shapes differ
    [np.zeros(3), np.zeros(3, np.float32)],                      # dtypes differ
    [np.zeros((3, 4)), np.zeros((4, 3)).T],                      # not contiguous
    [np.zeros(3, np.uint8), b"abc"],                             # not an array
    [np.zeros(3, np.uint8), bytearray(b"abc")],
    [np.float32(1.0), np.float32(2.0)],                          # scalars
    [np.zeros(()), np.zeros(())],                                # 0-d
    [np.array([None, 1]), np.array([None, 2])],                  # objects
    [np.zeros(2, np.uint32).astype(">u4"), np.zeros(2, ">u4")],  # a type torch lacks
    [torch.zeros(3), torch.zeros(3)],
    [],
], ids=["shapes", "dtypes", "strided", "bytes", "bytearray", "scalars", "0d", "objects", "big-endian", "torch", "empty"])
def test_gather_arrays_declines_what_is_not_one_shape_of_arrays(arrays):
    assert gather_arrays(arrays) is None
