"""torchdali::normalize (CPU and CUDA kernels) against torch float32 arithmetic with DALI's
rounding (half away from zero) and saturation."""
import shutil

import pytest
import torch

from torchdali.kernels.normalize import normalize

from conftest import random_images, requires_cuda

DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]
IN_DTYPES = [torch.uint8, torch.int16, torch.float16, torch.float32]
OUT_DTYPES = [torch.float32, torch.float16, torch.uint8, torch.int8, torch.int16, torch.int32]
SIZES = [(17, 23), (1, 1), (31, 5), (4, 40)]


def reference(images, mean, inv_std, shift, out_dtype):
    outs = []
    for i, im in enumerate(images):
        m, s = mean[i % len(mean)].cpu().float(), inv_std[i % len(inv_std)].cpu().float()
        v = (im.cpu().float() - m) * s + shift
        if not out_dtype.is_floating_point:
            info = torch.iinfo(out_dtype)
            v = v.double()
            v = torch.where(v >= 0, torch.floor(v + 0.5), torch.ceil(v - 0.5))
            v = v.clamp(info.min, info.max)
        outs.append(v.to(out_dtype))
    return outs


def assert_same(outs, expected):
    assert len(outs) == len(expected)
    for o, e in zip(outs, expected):
        assert o.dtype == e.dtype and o.shape == e.shape and o.is_contiguous()
        assert torch.equal(o.cpu(), e)


def params(images, pattern, seed):
    """Per-sample mean and inv_std broadcast along the dims that `pattern` marks with 1."""
    g = torch.Generator().manual_seed(seed)
    mean, inv = [], []
    for im in images:
        shape = [e if keep else 1 for e, keep in zip(im.shape, pattern)]
        mean.append(torch.rand(shape, generator=g) * 200)
        inv.append(torch.rand(shape, generator=g) * 2 - 0.5)
    return mean, inv


# which dims of an HWC sample keep their extent in the parameters
PATTERNS = {"scalar": (0, 0, 0), "per_channel": (0, 0, 1), "per_row": (1, 0, 0),
            "per_column_and_channel": (0, 1, 1), "elementwise": (1, 1, 1)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_dtype", IN_DTYPES)
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_matches_reference(device, in_dtype, pattern):
    images = random_images(SIZES, 3, in_dtype, device)
    mean, inv = params(images, PATTERNS[pattern], seed=1)
    for out_dtype in OUT_DTYPES:
        outs = normalize(images, mean, inv, 10.0, out_dtype)
        assert_same(outs, reference(images, mean, inv, 10.0, out_dtype))


@pytest.mark.parametrize("device", DEVICES)
def test_shared_params_chw_and_other_ranks(device):
    images = [im.permute(2, 0, 1).contiguous() for im in random_images(SIZES, 3, torch.uint8, device)]
    mean, inv = torch.tensor([[[100.0]], [[120.0]], [[90.0]]]), torch.full((1, 1, 1), 0.02)
    assert_same(normalize(images, [mean], [inv], 0.5, torch.float32),
                reference(images, [mean], [inv], 0.5, torch.float32))
    for shape in [(7,), (2, 3, 4, 5), (3, 1, 4, 1, 2), ()]:
        x = torch.randn(shape, device=device)
        m, s = torch.randn([1] * len(shape)), torch.rand(shape)
        assert_same(normalize([x, x * 2], [m], [s, s * 3]), reference([x, x * 2], [m], [s, s * 3], 0.0,
                                                                      torch.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_dense_batch_as_one_sample_and_params_on_device(device):
    batch = torch.rand(4, 6, 5, 3, device=device) * 255
    mean, inv = torch.rand(4, 1, 1, 3) * 100, torch.rand(4, 1, 1, 3)
    expected = reference(list(batch), list(mean), list(inv), 1.0, torch.uint8)
    out = normalize([batch], [mean.to(device)], [inv], 1.0, torch.uint8)[0]
    assert torch.equal(out.cpu(), torch.stack(expected))


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_and_empty_samples(device):
    base = torch.rand(6, 9, 4, device=device)
    images = [base[:, ::2, :3], torch.zeros(0, 3, 3, device=device)]
    mean, inv = [torch.full((1, 1, 3), 0.5)], [torch.full((1, 1, 3), 2.0)]
    outs = normalize(images, mean, inv)
    assert outs[1].shape == (0, 3, 3)
    assert_same(outs[:1], reference(images[:1], mean, inv, 0.0, torch.float32))


@requires_cuda
@pytest.mark.parametrize("in_dtype", IN_DTYPES)
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_cuda_matches_cpu(in_dtype, pattern):
    images = random_images(SIZES + [(300, 70)], 3, in_dtype, "cpu", seed=5)
    mean, inv = params(images, PATTERNS[pattern], seed=2)
    gpu = [im.cuda() for im in images]
    for out_dtype in OUT_DTYPES:
        cpu = normalize(images, mean, inv, 3.0, out_dtype)
        for m in (mean, [t.cuda() for t in mean]):
            assert_same(normalize(gpu, m, inv, 3.0, out_dtype), cpu)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    images = random_images(SIZES, 3, torch.uint8, device)
    mean, inv = params(images, PATTERNS["per_channel"], seed=3)
    torch.library.opcheck(torch.ops.torchdali.normalize.default,
                          (images, mean, inv, 2.0, torch.float32))
    torch.library.opcheck(torch.ops.torchdali.normalize.default,
                          (images, mean[:1], inv[:1], 128.0, torch.uint8))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(backend):
    if backend == "inductor" and not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("inductor needs a C++ compiler on CPU")

    def f(a, b, m, s):
        return [t * 2.0 for t in normalize([a, b], [m], [s], 0.0, torch.float32)]

    a, b = torch.rand(5, 7, 3), torch.rand(2, 9, 3)
    m, s = torch.rand(1, 1, 3), torch.rand(1, 1, 3)
    expected = [t * 2.0 for t in reference([a, b], [m], [s], 0.0, torch.float32)]
    torch._dynamo.reset()
    assert_same(torch.compile(f, fullgraph=True, backend=backend)(a, b, m, s), expected)


IM = torch.zeros(4, 5, 3)
P = torch.zeros(1, 1, 3)


@pytest.mark.parametrize("call, match", [
    (lambda: normalize([], [P], [P]), "at least one sample"),
    (lambda: normalize([IM, IM, IM], [P, P], [P]), "`mean` must hold 1 tensor .* or 3"),
    (lambda: normalize([IM], [P], [torch.zeros(1, 1, 2)]), "`inv_std` of shape .* does not broadcast"),
    (lambda: normalize([IM], [torch.zeros(1, 3)], [P]), "`mean` of shape"),
    (lambda: normalize([IM, torch.zeros(4, 5, 4)], [P], [P]), "sample 1"),
    (lambda: normalize([torch.zeros([1] * 9)], [torch.zeros([1] * 9)], [torch.zeros([1] * 9)]),
     "at most 8 dims"),
])
def test_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_dtypes():
    with pytest.raises(TypeError, match="`images` must be"):
        normalize([IM.double()], [P], [P])
    with pytest.raises(TypeError, match="out_dtype"):
        normalize([IM], [P], [P], 0.0, torch.float64)
    with pytest.raises(TypeError, match="one dtype"):
        normalize([IM, IM.half()], [P], [P])
