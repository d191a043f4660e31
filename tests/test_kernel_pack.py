"""torchdali::pack against torch.cat of the flattened samples."""
import pytest
import torch

from torchdali.kernels.pack import pack


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
