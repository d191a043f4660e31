"""torchdali::color_transform (CPU and CUDA kernels) against a float64 torch reference."""
import shutil

import pytest
import torch

from torchdali.kernels.color import color_transform

from conftest import random_images

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))]
SIZES = [(17, 23), (1, 1), (31, 5), (8, 40)]
IN_DTYPES = [torch.uint8, torch.float16, torch.float32]
OUT_DTYPES = [torch.float32, torch.float16, torch.uint8, torch.int8, torch.int16, torch.int32]


def reference(images, matrices, offsets, out_dtype):
    """The op's contract in plain float64 torch, one sample at a time."""
    outs = []
    for im, m, off in zip(images, matrices.double().cpu(), offsets.double().cpu()):
        v = im.cpu().double() @ m.T + off
        if not out_dtype.is_floating_point:
            info = torch.iinfo(out_dtype)
            v = (v.sign() * (v.abs() + 0.5).floor()).clamp(info.min, info.max)  # ties away from 0
        outs.append(v.to(out_dtype))
    return outs


def make_args(sizes, in_dtype, out_dtype, device, c=3, seed=0):
    """Per-sample matrices and offsets that send some values out of the output's range."""
    g = torch.Generator().manual_seed(seed + 1)
    images = random_images(sizes, c, in_dtype, device, seed)
    n = len(sizes)
    scale = {torch.int32: 1e4, torch.int16: 100.0}.get(out_dtype, 1.0)
    matrices = (torch.eye(c) + 0.3 * torch.randn(n, c, c, generator=g)) * scale
    offsets = torch.randn(n, c, generator=g) * 40 * scale
    return images, matrices, offsets, out_dtype


def assert_matches(outs, expected):
    assert len(outs) == len(expected)
    for out, exp in zip(outs, expected):
        assert out.dtype == exp.dtype and out.shape == exp.shape
        out = out.cpu()
        if exp.dtype.is_floating_point:
            tol = 1e-4 if exp.dtype == torch.float32 else 2e-3
            torch.testing.assert_close(out, exp, rtol=tol, atol=tol * 10)
        else:
            # float32 math may land on the other side of a rounding tie than float64.
            diff = (out.long() - exp.long()).abs()
            assert (diff <= 1).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("in_dtype", IN_DTYPES)
def test_matches_reference(in_dtype, out_dtype, device):
    args = make_args(SIZES, in_dtype, out_dtype, device)
    outs = torch.ops.torchdali.color_transform.default(*args)
    assert all(o.device.type == device for o in outs)
    assert_matches(outs, reference(*args))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.uint8])
@pytest.mark.parametrize("in_dtype", IN_DTYPES)
def test_dense_batch_equals_the_list(in_dtype, out_dtype, device):
    images, matrices, offsets, _ = make_args([(9, 14)] * 5, in_dtype, out_dtype, device)
    dense = torch.stack(images)
    out = color_transform(dense, matrices, offsets, out_dtype)
    assert isinstance(out, torch.Tensor) and out.shape == dense.shape and out.dtype == out_dtype
    assert torch.equal(out, torch.stack(color_transform(images, matrices, offsets, out_dtype)))
    torch.library.opcheck(torch.ops.torchdali.color_transform.dense,
                          (dense, matrices, offsets, out_dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", [1, 2, 4])
def test_other_channel_counts(c, device):
    args = make_args(SIZES, torch.uint8, torch.uint8, device, c=c)
    assert_matches(torch.ops.torchdali.color_transform.default(*args), reference(*args))


@pytest.mark.parametrize("device", DEVICES)
def test_sequences_and_non_contiguous_images(device):
    seq = random_images([(5, 6)], 12, torch.uint8, device)[0].view(5, 6, 4, 3)  # FHWC
    chw = random_images([(3, 9)], 11, torch.uint8, device)[0]
    hwc_view = chw[:, :, :3].permute(1, 0, 2)  # [9, 3, 3], not contiguous
    assert not hwc_view.is_contiguous()
    m = torch.stack([torch.eye(3) * 0.5, torch.eye(3).flip(0)])
    args = ([seq, hwc_view], m, torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]), torch.uint8)
    outs = torch.ops.torchdali.color_transform.default(*args)
    assert_matches(outs, reference(*args))
    torch.testing.assert_close(outs[1].cpu(), hwc_view.flip(-1).cpu())  # channel swap
    assert outs[0].shape == (5, 6, 4, 3)


def test_rounding_ties_away_from_zero_and_saturation():
    im = torch.tensor([[[1.0, 3.0, 5.0], [-1.0, -3.0, -5.0], [600.0, -600.0, 255.4]]])
    outs = color_transform([im], (torch.eye(3) * 0.5)[None], torch.zeros(1, 3), torch.int16)
    assert outs[0].tolist() == [[[1, 2, 3], [-1, -2, -3], [300, -300, 128]]]
    outs = color_transform([im], torch.eye(3)[None], torch.zeros(1, 3), torch.uint8)
    assert outs[0].tolist() == [[[1, 3, 5], [0, 0, 0], [255, 0, 255]]]


@pytest.mark.parametrize("device", DEVICES)
def test_python_face_default_dtype(device):
    images = random_images(SIZES, 3, torch.float16, device)
    outs = color_transform(images, torch.eye(3).expand(4, 3, 3), torch.zeros(4, 3))
    assert [o.dtype for o in outs] == [torch.float16] * 4
    for o, im in zip(outs, images):
        torch.testing.assert_close(o, im)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    args = make_args(SIZES, torch.uint8, torch.float16, device)
    torch.library.opcheck(torch.ops.torchdali.color_transform.default, args)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(backend):
    if backend == "inductor" and not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("inductor needs a C++ compiler on CPU")
    images, matrices, offsets, _ = make_args(SIZES, torch.uint8, torch.float32, "cpu")

    def adjust(images, matrices, offsets):
        outs = color_transform(images, matrices, offsets, torch.float32)
        dense = color_transform(torch.stack([images[0]] * 4), matrices, offsets, torch.uint8)
        return [o * 2.0 for o in outs] + [dense + 1]

    torch._dynamo.reset()
    got = torch.compile(adjust, fullgraph=True, backend=backend)(images, matrices, offsets)
    for a, b in zip(got, adjust(images, matrices, offsets)):
        torch.testing.assert_close(a, b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("params_on", ["cpu", "cuda"])
@pytest.mark.parametrize("c", [3, 4])
def test_cuda_matches_cpu(params_on, c):
    images, matrices, offsets, out_dtype = make_args(SIZES * 5 + [(300, 301)], torch.uint8,
                                                     torch.uint8, "cpu", c=c)
    cpu = color_transform(images, matrices, offsets, out_dtype)
    gpu = color_transform([im.cuda() for im in images], matrices.to(params_on),
                          offsets.to(params_on), out_dtype)
    for a, b in zip(cpu, gpu):
        assert (a.long() - b.cpu().long()).abs().max() <= 1


def _call(**overrides):
    args = dict(zip(["images", "matrices", "offsets", "out_dtype"],
                    make_args(SIZES, torch.uint8, torch.float32, "cpu")))
    args.update(overrides)
    return torch.ops.torchdali.color_transform.default(*args.values())


@pytest.mark.parametrize("overrides, error, match", [
    ({"images": []}, ValueError, r"color_transform: `images` must hold"),
    ({"images": [torch.zeros(4, dtype=torch.uint8)] * 4}, ValueError,
     r"color_transform: `images` must be channel-last"),
    ({"images": [torch.zeros(4, 4, 3, dtype=torch.uint8)] * 3 + [torch.zeros(4, 4, 1, dtype=torch.uint8)]},
     ValueError, r"color_transform: all `images` must have the same number of channels"),
    ({"images": [torch.zeros(4, 4, 3, dtype=torch.uint8)] * 3 + [torch.zeros(4, 4, 3)]},
     TypeError, r"color_transform: all `images` must have the same dtype"),
    ({"images": [torch.zeros(4, 4, 3, dtype=torch.int32)] * 4}, TypeError,
     r"color_transform: `images` must be uint8"),
    ({"matrices": torch.zeros(4, 3, 2)}, ValueError, r"color_transform: `matrices` must have shape \[4, 3, 3\]"),
    ({"matrices": torch.zeros(3, 3, 3)}, ValueError, r"color_transform: `matrices`"),
    ({"offsets": torch.zeros(4, 2)}, ValueError, r"color_transform: `offsets` must have shape \[4, 3\]"),
    ({"out_dtype": torch.float64}, TypeError, r"color_transform: `out_dtype`"),
])
def test_bad_arguments(overrides, error, match):
    with pytest.raises(error, match=match):
        _call(**overrides)
