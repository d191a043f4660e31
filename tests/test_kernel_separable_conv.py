"""torchdali::separable_conv (CPU and CUDA kernels) against a float64 NumPy convolution with
reflect-101 borders."""
import shutil

import numpy as np
import pytest
import torch

from torchdali.kernels.separable_conv import separable_conv

from conftest import random_images, reflect101, requires_cuda

DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]
DTYPES = [torch.uint8, torch.float16, torch.float32]
# (h, w): odd sizes, 1x1, and sizes smaller than the windows below
SIZES = [(17, 23), (1, 1), (2, 3), (31, 5), (4, 40)]


def window(size, seed):
    w = np.random.default_rng(seed).random(size).astype(np.float32) + 0.1
    return w / w.sum()


def convolve_axis(x, w, axis):
    r, n = len(w) // 2, x.shape[axis]
    out = np.zeros(x.shape, np.float64)
    for k, wk in enumerate(w):
        out += float(wk) * np.take(x, reflect101(np.arange(n) + k - r, n), axis=axis)
    return out


def reference(images, windows, sizes, first_axis, num_axes, out_dtype):
    """Each sample convolved axis by axis (innermost first), in float64, then converted."""
    outs, at = [], 0
    sizes = list(sizes)
    for i, im in enumerate(images):
        x = im.cpu().double().numpy()
        ws = []
        for s in sizes[i * num_axes:(i + 1) * num_axes]:
            ws.append(windows[at:at + s].numpy())
            at += s
        for ax in reversed(range(num_axes)):
            x = convolve_axis(x, ws[ax], first_axis + ax)
        t = torch.from_numpy(x)
        if out_dtype == torch.uint8:
            t = torch.where(t >= 0, torch.floor(t + 0.5), torch.ceil(t - 0.5)).clamp(0, 255)
        outs.append(t.to(out_dtype))
    return outs


def make_windows(sizes, seed=0):
    return torch.from_numpy(np.concatenate([window(s, seed + k) for k, s in enumerate(sizes)]))


def assert_close(outs, expected, in_dtype=torch.float32):
    assert len(outs) == len(expected)
    for o, e in zip(outs, expected):
        assert o.dtype == e.dtype and o.shape == e.shape and o.is_contiguous()
        diff = (o.cpu().double() - e.double()).abs()
        if o.dtype == torch.uint8:  # float32 sums may round the other way near .5
            assert diff.max() <= 1 and diff.mean() < 0.02
        else:
            tol = 0.5 if o.dtype == torch.float16 or in_dtype == torch.float16 else 1e-3
            assert diff.max() <= tol


# (name, layout of the samples, first_axis, num_axes)
LAYOUTS = [("HWC", 0, 2), ("CHW", 1, 2), ("FHWC", 1, 2), ("DHWC", 0, 3), ("W", 0, 1)]


def samples(layout, dtype, device, seed=0):
    ims = random_images(SIZES, 3, dtype, device, seed)
    if layout == "HWC":
        return ims
    if layout == "CHW":
        return [im.permute(2, 0, 1).contiguous() for im in ims]
    if layout == "FHWC":
        return [torch.stack([im, im.flip(0)]) for im in ims]
    if layout == "DHWC":
        return [torch.stack([im, im.flip(0), im.flip(1)]) for im in ims]
    return [im[0, :, 0].contiguous() for im in ims]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout, first_axis, num_axes", LAYOUTS)
def test_matches_reference(device, dtype, layout, first_axis, num_axes):
    images = samples(layout, dtype, device)
    # per-sample, per-axis windows; some wider than the samples
    sizes = [[1, 3, 5, 7, 11, 9, 3, 13, 5, 15][(i * 3 + a) % 10]
             for i in range(len(images)) for a in range(num_axes)]
    windows = make_windows(sizes)
    for out_dtype in {dtype, torch.float32}:
        outs = separable_conv(images, windows, sizes, first_axis, num_axes, out_dtype)
        assert_close(outs, reference(images, windows, sizes, first_axis, num_axes, out_dtype),
                     dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_wide_lines_and_identity(device):
    """Lines with many elements per step (the CPU's row-accumulator path) and a window of 1."""
    im = torch.rand(5, 9, 40, device=device)  # CHW-like: the H pass has inner = 40
    w = make_windows([5, 1])
    out = separable_conv([im], w, [5, 1], 1, 2, torch.float32)
    assert_close(out, reference([im], w, [5, 1], 1, 2, torch.float32))
    one = torch.ones(1)
    assert torch.equal(separable_conv([im], torch.ones(2), [1, 1], 1, 2)[0], im)
    assert torch.equal(separable_conv([im], one, [1], 0, 1)[0], im)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_samples(device):
    images = [torch.zeros(0, 4, 3, device=device), torch.rand(3, 4, 3, device=device)]
    w = make_windows([3, 3, 3, 3])
    outs = separable_conv(images, w, [3] * 4, 0, 2)
    assert outs[0].shape == (0, 4, 3)
    assert_close(outs[1:], reference(images[1:], w[6:], [3, 3], 0, 2, torch.float32))


# A large sample per layout of LAYOUTS (126,000 elements), beside the small ones.
LARGE = {"HWC": (600, 70, 3), "CHW": (3, 600, 70), "FHWC": (2, 300, 70, 3),
         "DHWC": (2, 300, 70, 3), "W": (126000,)}


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout, first_axis, num_axes", LAYOUTS)
def test_cuda_matches_cpu(dtype, layout, first_axis, num_axes):
    g = torch.Generator().manual_seed(3)
    large = (torch.rand(LARGE[layout], generator=g) * 255).to(dtype)
    images = samples(layout, dtype, "cpu", seed=3) + [large]
    sizes = [3 + 2 * (i + a) for i in range(len(images)) for a in range(num_axes)]
    w = make_windows(sizes, seed=7)
    gpu_images = [im.cuda() for im in images]
    for out_dtype in {dtype, torch.float32}:
        cpu = separable_conv(images, w, sizes, first_axis, num_axes, out_dtype)
        for windows in (w, w.cuda()):  # weights uploaded with the descriptors, or in place
            gpu = separable_conv(gpu_images, windows, sizes, first_axis, num_axes, out_dtype)
            for c, o in zip(cpu, gpu):
                assert o.is_cuda and torch.equal(c, o.cpu())


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    images = random_images(SIZES, 3, torch.float32, device)
    sizes = [3, 5] * len(images)
    torch.library.opcheck(torch.ops.torchdali.separable_conv.default,
                          (images, make_windows(sizes), sizes, 0, 2, torch.float32))
    u8 = random_images(SIZES[:2], 3, torch.uint8, device)
    torch.library.opcheck(torch.ops.torchdali.separable_conv.default,
                          (u8, make_windows([3] * 4), [3] * 4, 0, 2, torch.uint8))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(backend):
    if backend == "inductor" and not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("inductor needs a C++ compiler on CPU")
    w = make_windows([3, 5])

    def f(a, b):
        outs = separable_conv([a, b], torch.cat([w, w]), [3, 5, 3, 5], 0, 2, torch.float32)
        return [t * 2.0 for t in outs]

    a, b = torch.rand(5, 7, 3), torch.rand(2, 9, 3)
    expected = [t * 2.0 for t in reference([a, b], torch.cat([w, w]), [3, 5, 3, 5], 0, 2,
                                           torch.float32)]
    torch._dynamo.reset()
    assert_close(torch.compile(f, fullgraph=True, backend=backend)(a, b), expected)


IM = torch.zeros(4, 5, 3)


@pytest.mark.parametrize("call, match", [
    (lambda: separable_conv([], torch.ones(1), [], 0, 1), "at least one sample"),
    (lambda: separable_conv([IM], make_windows([4, 3]), [4, 3], 0, 2), "odd and positive"),
    (lambda: separable_conv([IM], torch.ones(3), [3, -1], 0, 2), "odd and positive"),
    (lambda: separable_conv([IM], make_windows([3]), [3], 0, 2), "2 entries"),
    (lambda: separable_conv([IM], torch.ones(5), [3, 3], 0, 2), "6 weights"),
    (lambda: separable_conv([IM], torch.ones(2, 3), [3, 3], 0, 2), "1-D"),
    (lambda: separable_conv([IM], torch.ones(3), [3], 0, 0), "num_axes"),
    (lambda: separable_conv([IM], torch.ones(12), [3] * 4, 0, 4), "num_axes"),
    (lambda: separable_conv([IM], torch.ones(6), [3, 3], 2, 2), "dimensions"),
    (lambda: separable_conv([IM], torch.ones(3), [3], -1, 1), "first_axis"),
    (lambda: separable_conv([IM, torch.zeros(4, 5)], torch.ones(6), [3] * 2, 0, 1), "sample 1"),
])
def test_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_dtypes():
    with pytest.raises(TypeError, match="images"):
        separable_conv([IM.int()], torch.ones(6), [3, 3], 0, 2)
    with pytest.raises(TypeError, match="out_dtype"):
        separable_conv([IM], torch.ones(6), [3, 3], 0, 2, torch.int16)
    with pytest.raises(TypeError, match="one dtype"):
        separable_conv([IM, IM.half()], torch.ones(12), [3] * 4, 0, 2)
