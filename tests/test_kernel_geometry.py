"""torchdali::flip and torchdali::transpose (CPU and CUDA kernels) against torch.flip and
torch.permute."""
import itertools
import shutil

import numpy as np
import pytest
import torch

from torchdali.kernels.geometry import flip, gather_windows, transpose

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]
SIZES = [(17, 23), (1, 1), (31, 5), (8, 40)]
DTYPES = [torch.uint8, torch.float16, torch.float32, torch.int16, torch.float64, torch.bool]


def random_images(sizes, c, dtype, device, seed=0, chw=False):
    g = torch.Generator().manual_seed(seed)
    ims = []
    for h, w in sizes:
        shape = (c, h, w) if chw else (h, w, c)
        ims.append((torch.rand(shape, generator=g) * 255).to(dtype))
    return [im.to(device) for im in ims]


def flip_reference(images, horizontal, vertical, height_dim):
    outs = []
    for im, hf, vf in zip(images, horizontal.tolist(), vertical.tolist()):
        dims = [d for d, f in ((height_dim, vf), (height_dim + 1, hf)) if f]
        outs.append(im.flip(dims) if dims else im.clone())
    return outs


def assert_same(outs, expected):
    assert len(outs) == len(expected)
    for o, e in zip(outs, expected):
        assert o.dtype == e.dtype and o.shape == e.shape and o.is_contiguous()
        assert torch.equal(o.cpu(), e.cpu())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout, c", [("HWC", 3), ("CHW", 3), ("HWC", 4), ("HWC", 5)])
def test_flip_matches_reference(device, dtype, layout, c):
    chw = layout == "CHW"
    images = random_images(SIZES, c, dtype, device, chw=chw)
    horizontal = torch.tensor([1, 0, 1, 0])
    vertical = torch.tensor([0, 1, 1, 0], dtype=torch.int32)
    height_dim = 1 if chw else 0
    assert_same(flip(images, horizontal, vertical, height_dim),
                flip_reference(images, horizontal, vertical, height_dim))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32])
@pytest.mark.parametrize("height_dim", [0, 1])
def test_flip_dense_batch_equals_the_list(height_dim, dtype, device):
    batch = random_images([(13, 7)] * 5, 3, dtype, device, chw=height_dim == 1)
    dense = torch.stack(batch)
    h, v = torch.tensor([1, 0, 1, 0, 1]), torch.tensor([0, 0, 1, 1, 1])
    out = flip(dense, h, v, height_dim)
    assert isinstance(out, torch.Tensor) and out.shape == dense.shape and out.is_contiguous()
    assert torch.equal(out, torch.stack(flip_reference(batch, h, v, height_dim)))
    assert torch.equal(flip(dense[:, :, ::2], h, v, height_dim),  # not contiguous
                       torch.stack(flip_reference(list(dense[:, :, ::2]), h, v, height_dim)))
    torch.library.opcheck(torch.ops.torchdali.flip.dense, (dense, h, v, height_dim))


@pytest.mark.parametrize("device", DEVICES)
def test_flip_every_flag_combination_and_shapes(device):
    shapes = [(5, 7), (4, 6, 1), (2, 3, 4, 5), (3, 0, 2), (4, 6, 0), (2, 3, 4, 0)]  # no channels too
    for shape, (hf, vf) in itertools.product(shapes, itertools.product((0, 1), repeat=2)):
        im = torch.randn(shape, device=device)
        flags_h, flags_v = torch.tensor([hf]), torch.tensor([vf])
        for hd in range(len(shape) - 1):
            assert_same(flip([im], flags_h, flags_v, hd), flip_reference([im], flags_h, flags_v, hd))


@pytest.mark.parametrize("device", DEVICES)
def test_flip_non_contiguous_input_and_flags_on_device(device):
    base = torch.randn(6, 9, 4, device=device)
    im = base[:, ::2, :3]  # not contiguous
    flags = torch.ones(1, dtype=torch.bool, device=device)
    assert_same(flip([im], flags, flags), [im.flip(0, 1)])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("perm", [(2, 0, 1), (1, 2, 0), (1, 0, 2), (0, 1, 2), (2, 1, 0)])
@pytest.mark.parametrize("layout, c", [("HWC", 3), ("CHW", 3), ("HWC", 4), ("CHW", 2)])
def test_transpose_matches_permute(device, dtype, perm, layout, c):
    images = random_images(SIZES, c, dtype, device, chw=layout == "CHW")
    assert_same(transpose(images, perm), [im.permute(perm) for im in images])


@pytest.mark.parametrize("device", DEVICES)
def test_transpose_other_ranks(device):
    g = torch.Generator().manual_seed(3)
    for shape in [(7,), (4, 9), (2, 3, 4, 5), (3, 1, 4, 1, 2), (2, 0, 3)]:
        im = torch.randn(shape, generator=g).to(device)
        for perm in itertools.islice(itertools.permutations(range(len(shape))), 8):
            assert_same(transpose([im, im * 2], perm), [im.permute(perm), (im * 2).permute(perm)])
    im = torch.randn(5, 6, 3, device=device)[:, ::2]  # not contiguous
    assert_same(transpose([im], (2, 0, 1)), [im.permute(2, 0, 1)])


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32])
def test_cuda_matches_cpu(dtype):
    images = random_images(SIZES + [(300, 70)], 3, dtype, "cpu", seed=5)
    h, v = torch.tensor([1, 1, 0, 0, 1]), torch.tensor([1, 0, 1, 0, 1])
    gpu = [im.cuda() for im in images]
    assert_same(flip(gpu, h, v), flip(images, h, v))
    assert_same(flip(gpu, h.cuda(), v.cuda()), flip(images, h, v))
    assert_same(transpose(gpu, (2, 0, 1)), transpose(images, (2, 0, 1)))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    images = random_images(SIZES, 3, torch.float32, device)
    torch.library.opcheck(torch.ops.torchdali.flip.default,
                          (images, torch.tensor([1, 0, 1, 0]), torch.tensor([0, 1, 1, 0]), 0))
    torch.library.opcheck(torch.ops.torchdali.transpose.default, (images, [2, 0, 1]))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(backend):
    if backend == "inductor" and not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("inductor needs a C++ compiler on CPU")

    def f(a, b, hf, vf):
        outs = flip([a, b], hf, vf)
        return [t * 2.0 for t in transpose(outs, (2, 0, 1))]

    a, b = torch.rand(5, 7, 3), torch.rand(2, 9, 3)
    hf, vf = torch.tensor([1, 0]), torch.tensor([1, 1])
    expected = [a.flip(0, 1).permute(2, 0, 1) * 2.0, b.flip(0).permute(2, 0, 1) * 2.0]
    torch._dynamo.reset()
    assert_same(torch.compile(f, fullgraph=True, backend=backend)(a, b, hf, vf), expected)


@pytest.mark.parametrize("call, match", [
    (lambda: flip([], torch.zeros(0), torch.zeros(0)), "at least one sample"),
    (lambda: flip([torch.zeros(2, 3, 3)], torch.zeros(2), torch.zeros(1)), "horizontal"),
    (lambda: flip([torch.zeros(2, 3, 3)], torch.zeros(1), torch.zeros(1), 2), "dimensions"),
    (lambda: flip([torch.zeros(2, 3, 3), torch.zeros(2, 3)], torch.zeros(2), torch.zeros(2)),
     "sample 1"),
    (lambda: transpose([torch.zeros(2, 3, 3)], (0, 1)), "perm"),
    (lambda: flip(torch.zeros(2, 3, 3), torch.zeros(3), torch.zeros(2)), "horizontal"),
    (lambda: flip(torch.zeros(2, 3), torch.zeros(2), torch.zeros(2)), "dimensions"),
    (lambda: transpose([torch.zeros(2, 3, 3)], (0, 1, 1)), "permutation"),
])
def test_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_dtype_mix():
    with pytest.raises(TypeError, match="one dtype"):
        transpose([torch.zeros(2, 3, 3), torch.zeros(2, 3, 3, dtype=torch.uint8)], (2, 0, 1))
    with pytest.raises(TypeError, match="bytes"):
        flip([torch.zeros(2, 3, 3, dtype=torch.complex128)], torch.zeros(1), torch.zeros(1))


# --- gather_windows ---

def _windows(shapes, seed):
    rng = np.random.default_rng(seed)
    rows = []
    for h, w in shapes:
        wh, ww = int(rng.integers(0, h + 1)), int(rng.integers(0, w + 1))
        rows.append((int(rng.integers(0, h - wh + 1)), int(rng.integers(0, w - ww + 1)), wh, ww))
    return np.array(rows, np.int64)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.float32, torch.float64])
@pytest.mark.parametrize("inner", [(3,), (), (2, 5)], ids=["hwc", "hw", "hw25"])
def test_gather_windows_equals_slicing(inner, dtype, device):
    shapes = [(17, 23), (1, 1), (31, 5), (8, 40), (0, 3)]
    images = [(torch.rand((h, w) + inner) * 100).to(dtype).to(device) for h, w in shapes]
    windows = _windows(shapes, seed=len(inner))
    outs = gather_windows(images, windows)
    for out, im, (y, x, h, w) in zip(outs, images, windows.tolist()):
        assert out.is_contiguous() and torch.equal(out, im[y:y + h, x:x + w])
    same = np.array([[1, 2, 0, 1]] + [[0, 0, 0, 1]] * 3, np.int64)  # one size: one dense tensor
    dense = gather_windows(images[:4], same)
    assert dense.shape == (4, 0, 1) + inner
    same = np.array([[3, 4, 1, 1], [0, 0, 1, 1], [9, 2, 1, 1], [7, 39, 1, 1]], np.int64)
    dense = gather_windows(images[:4], same)
    assert torch.equal(dense, torch.stack([im[y:y + 1, x:x + 1] for im, (y, x, _, _) in zip(images, same.tolist())]))


@pytest.mark.parametrize("device", DEVICES)
def test_gather_windows_errors_and_opcheck(device):
    images = [torch.zeros(4, 5, 3, device=device), torch.zeros(6, 2, 3, device=device)]
    with pytest.raises(ValueError, match=r"gather_windows: window 1 \(y=5, x=0, h=2, w=1\) is not inside sample 1 "
                                         r"of shape \[6, 2, 3\]"):
        gather_windows(images, np.array([[0, 0, 4, 5], [5, 0, 2, 1]]))
    with pytest.raises(ValueError, match=r"`windows` must have shape \[2, 4\]"):
        torch.ops.torchdali.gather_windows(images, torch.zeros(3, 4, dtype=torch.int64))
    torch.library.opcheck(torch.ops.torchdali.gather_windows.default,
                          (images, torch.tensor([[1, 1, 2, 3], [0, 1, 6, 1]])))
