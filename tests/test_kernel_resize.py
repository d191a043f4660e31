"""torchdali::resize (CPU and CUDA kernels) against a float64 reference of DALI's filters."""
import math
import shutil

import pytest
import torch

from torchdali.kernels.resize import resize

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))]
SIZES = [(17, 23), (1, 1), (31, 5), (8, 40)]
OUT_SIZES = [(9, 31), (3, 2), (62, 4), (8, 13)]  # down, up and mixed, odd sizes
NN, LINEAR, CUBIC, LANCZOS3, TRIANGULAR = 0, 1, 2, 3, 4


def _cubic(x):
    x = abs(x)
    if x >= 2:
        return 0.0
    return -0.5 * x**3 + 2.5 * x**2 - 4 * x + 2 if x > 1 else 1.5 * x**3 - 2.5 * x**2 + 1


def _sinc(x):
    return math.sin(math.pi * x) / (math.pi * x) if x else 1.0


def _kernel(interp, antialias, in_size, out_size):
    """(function, radius) of DALI's filter for one axis."""
    down = out_size < in_size
    widen = in_size / out_size if (down and antialias) else 1.0
    if interp in (LINEAR, TRIANGULAR):
        return (lambda x: max(0.0, 1 - abs(x) / widen)), widen
    if interp == CUBIC:
        return (lambda x: _cubic(x / widen)), 2 * widen
    if interp == LANCZOS3:
        return (lambda x: _sinc(x / widen) * _sinc(x / widen / 3) if abs(x / widen) < 3 else 0.0), 3 * widen
    raise ValueError(interp)


def _weights(interp, antialias, n_in, lo, hi, n_out):
    """[n_out, n_in] float64 resampling matrix with edge clamping."""
    m = torch.zeros(n_out, n_in, dtype=torch.float64)
    scale = (hi - lo) / n_out
    for x in range(n_out):
        if interp == NN:
            m[x, min(max(math.floor(lo + (x + 0.5) * scale), 0), n_in - 1)] = 1
            continue
        f, radius = _kernel(interp, antialias, abs(hi - lo), n_out)
        center = lo + (x + 0.5) * scale - 0.5
        for s in range(math.floor(center - radius) - 1, math.ceil(center + radius) + 2):
            m[x, min(max(s, 0), n_in - 1)] += f(s - center)
        m[x] /= m[x].sum()
    return m


def reference(images, out_sizes, rois, interp, antialias):
    outs = []
    for im, (oh, ow), roi in zip(images, out_sizes, rois.tolist()):
        h, w, _ = im.shape
        y0, x0, y1, x1 = roi
        if y0 == y1:
            y0, y1 = 0, h
        if x0 == x1:
            x0, x1 = 0, w
        wy = _weights(interp, antialias, h, y0, y1, oh)
        wx = _weights(interp, antialias, w, x0, x1, ow)
        outs.append(torch.einsum("yh,hwc,xw->yxc", wy, im.cpu().double(), wx))
    return outs


def random_images(sizes, channels, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (h, w, channels), generator=g).to(dtype).to(device)
            for h, w in sizes]


def assert_matches(outs, expected, out_dtype, interp):
    for o, e in zip(outs, expected):
        assert o.dtype == out_dtype and o.shape == e.shape
        if out_dtype == torch.uint8:
            e = (e.clamp(0, 255) + 0.5).floor()
            diff = (o.cpu().double() - e).abs()
            assert diff.max() <= 1.0 and diff.mean() < 0.05
        else:
            # Cubic and Lanczos come from DALI's interpolated tables: within ~0.2 levels.
            tol = 0.05 if interp in (NN, LINEAR, TRIANGULAR) else 0.6
            tol = max(tol, 1.0) if out_dtype == torch.float16 else tol
            torch.testing.assert_close(o.cpu().double(), e, rtol=0, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("antialias", [True, False], ids=["aa", "no_aa"])
@pytest.mark.parametrize("interp", [NN, LINEAR, TRIANGULAR, CUBIC, LANCZOS3],
                         ids=["nn", "linear", "triangular", "cubic", "lanczos3"])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.uint8])
@pytest.mark.parametrize("in_dtype", [torch.uint8, torch.float16, torch.float32])
@pytest.mark.parametrize("channels", [1, 3, 4, 5])  # the CPU kernel's pixel sizes, and any
def test_matches_reference(channels, in_dtype, out_dtype, interp, antialias, device):
    images = random_images(SIZES, channels, in_dtype, device)
    rois = torch.zeros(len(SIZES), 4)
    outs = resize(images, OUT_SIZES, rois, interp, antialias, out_dtype)
    assert all(o.device.type == device for o in outs)
    assert_matches(outs, reference(images, OUT_SIZES, rois, interp, antialias), out_dtype, interp)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interp", [NN, LINEAR, CUBIC])
def test_rois_flips_and_float16_output(interp, device):
    images = random_images(SIZES, 1, torch.float32, device, seed=3)
    rois = torch.tensor([[2.5, 20.0, 14.0, 3.0],    # x flipped
                         [0.0, 0.0, 0.0, 0.0],      # whole image
                         [30.0, 1.0, 2.0, 4.5],     # y flipped
                         [-2.0, 5.0, 10.0, 41.0]])  # reaches outside: edges clamp
    outs = resize(images, OUT_SIZES, rois, interp, True, torch.float16)
    assert_matches(outs, reference(images, OUT_SIZES, rois, interp, True), torch.float16, interp)


@pytest.mark.parametrize("device", DEVICES)
def test_per_sample_filters_and_identity(device):
    images = random_images(SIZES, 4, torch.uint8, device, seed=5)
    interp = torch.tensor([[NN, NN], [LINEAR, CUBIC], [CUBIC, LANCZOS3], [TRIANGULAR, LINEAR]])
    outs = resize(images, SIZES, None, interp, True, torch.uint8)
    for o, im in zip(outs, images):  # same size: every filter is the identity
        assert torch.equal(o, im)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_images(device):
    base = random_images([(3, 12)], 10, torch.uint8, device)[0]
    images = [base.permute(1, 2, 0), base[:, 2:, ::2].permute(1, 2, 0)]
    outs = resize(images, [(5, 7), (20, 3)], None, LINEAR, True, torch.float32)
    expected = reference(images, [(5, 7), (20, 3)], torch.zeros(2, 4), LINEAR, True)
    assert_matches(outs, expected, torch.float32, LINEAR)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interp", [NN, LINEAR, CUBIC, LANCZOS3])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32])
def test_chw_and_dense_outputs_equal_the_hwc_list(dtype, interp, device):
    images = random_images(SIZES, 3, dtype, device, seed=11)
    rois = torch.tensor([[1.5, 2.0, 15.0, 20.0], [0.0, 0.0, 0.0, 0.0],
                         [30.0, 1.0, 2.0, 4.5], [0.0, 0.0, 0.0, 0.0]])
    chw = [im.permute(2, 0, 1).contiguous() for im in images]
    hwc_list = resize(images, OUT_SIZES, rois, interp, True, dtype)
    chw_list = resize(chw, OUT_SIZES, rois, interp, True, dtype, chw=True)
    for h, c in zip(hwc_list, chw_list):
        assert c.shape == h.permute(2, 0, 1).shape and c.is_contiguous()
        assert torch.equal(c, h.permute(2, 0, 1))
    same = [(7, 12)] * len(SIZES)
    expected = torch.stack(resize(images, same, rois, interp, True, dtype))
    dense = resize(images, same, rois, interp, True, dtype, dense=True)
    assert dense.shape == (len(SIZES), 7, 12, 3) and torch.equal(dense, expected)
    dense_chw = resize(chw, same, rois, interp, True, dtype, chw=True, dense=True)
    assert torch.equal(dense_chw, expected.permute(0, 3, 1, 2))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interp", [NN, LINEAR, CUBIC])
@pytest.mark.parametrize("chw", [False, True], ids=["hwc", "chw"])
def test_a_dense_input_equals_its_samples(chw, interp, device):
    """A dense batch, read in place (resize.dense_in), or a non-contiguous one, gives what its
    samples give as a list; with different output sizes it goes through the list form."""
    batch = torch.stack(random_images([(13, 21)] * 5, 3, torch.uint8, device, seed=3))
    if chw:
        batch = batch.permute(0, 3, 1, 2).contiguous()
    rois = torch.tensor([[1.5, 2.0, 11.0, 20.0], [0.0, 0.0, 0.0, 0.0], [12.0, 1.0, 2.0, 4.5],
                         [0.0, 0.0, 0.0, 0.0], [3.0, 3.0, 4.0, 9.0]])
    same = [(7, 12)] * 5
    expected = resize(list(batch.unbind(0)), same, rois, interp, True, torch.float32, chw=chw, dense=True)
    assert torch.equal(resize(batch, same, rois, interp, True, torch.float32, chw=chw, dense=True), expected)
    strided = torch.cat([batch, batch], dim=-1)[..., :batch.shape[-1]]  # not contiguous
    assert torch.equal(resize(strided, same, rois, interp, True, torch.float32, chw=chw, dense=True), expected)
    outs = resize(batch, OUT_SIZES + [(5, 5)], rois, interp, True, torch.float32, chw=chw)
    for out, sample, size, roi in zip(outs, batch.unbind(0), OUT_SIZES + [(5, 5)], rois):
        assert torch.equal(out, resize([sample], [size], roi[None], interp, True, torch.float32, chw=chw)[0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("interp", [NN, LINEAR, TRIANGULAR, CUBIC, LANCZOS3])
def test_cuda_matches_cpu(interp):
    sizes = SIZES + [(480, 640), (333, 500)]
    out_sizes = OUT_SIZES + [(224, 224), (700, 123)]
    images = random_images(sizes, 3, torch.uint8, "cpu", seed=7)
    rois = torch.zeros(len(sizes), 4)
    rois[-1] = torch.tensor([10.5, 400.0, 300.0, 20.0])
    cpu = resize(images, out_sizes, rois, interp, True, torch.uint8)
    gpu = resize([im.cuda() for im in images], out_sizes, rois.cuda(), interp, True, torch.uint8)
    for c, g in zip(cpu, gpu):
        c, g = c.double(), g.cpu().double()
        if interp == 0:
            # DALI's CPU nearest neighbour (kept on purpose) may pick the next source row:
            # each GPU row must equal the CPU row or one of its neighbours.
            for r in range(g.shape[0]):
                near = c[max(r - 1, 0):r + 2]
                assert ((near - g[r]).abs().amax(dim=(1, 2)) == 0).any(), r
            continue
        diff = (c - g).abs()
        assert diff.max() <= 1 and diff.mean() < 0.05


# The CUDA kernel resamples output tiles in shared memory, its tile size planned from the
# batch's steepest downscale, and falls back to two passes when no tile fits. The CPU kernel
# cuts the batch into bands of output rows (the first pass's rows of a band overlap the next's).
LARGE_CASES = {  # sizes, out_sizes, channels, dtype, interp, ROI of sample 0 (None: none)
    "five_channels": ([(37, 45), (64, 3)], [(19, 90), (8, 8)], 5, torch.uint8, LINEAR, None),
    "float16_cubic": ([(301, 257)], [(97, 200)], 3, torch.float16, CUBIC, None),
    "steep_tiles": ([(600, 700), (90, 80)], [(60, 40), (200, 200)], 3, torch.uint8, LINEAR, None),
    "two_pass_fallback": ([(1200, 1600), (30, 41)], [(4, 3), (7, 9)], 3, torch.uint8, LANCZOS3,
                          None),
    "gray_nn_up": ([(5, 6)], [(300, 410)], 1, torch.float32, NN, None),
    "horizontal_first_bands_y_flipped": ([(400, 1000), (30, 41)], [(300, 500), (7, 9)], 4,
                                         torch.uint8, LINEAR, [390.5, 20.0, 3.0, 990.0]),
    "vertical_first_bands_x_flipped": ([(301, 157)], [(61, 150)], 3, torch.float32, LINEAR,
                                       [0.0, 150.0, 301.0, 2.5]),
    "gray_cubic_up": ([(120, 90)], [(333, 251)], 1, torch.float16, CUBIC, [10.0, 80.5, 100.0, 3.0]),
    "five_channels_lanczos_up": ([(700, 40)], [(90, 300)], 5, torch.uint8, LANCZOS3, None),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", LARGE_CASES.values(), ids=LARGE_CASES.keys())
def test_tiles_bands_and_two_pass_match_the_reference(case, device):
    sizes, out_sizes, channels, dtype, interp, roi = case
    images = random_images(sizes, channels, dtype, device, seed=3)
    rois = torch.zeros(len(sizes), 4)
    if roi is not None:
        rois[0] = torch.tensor(roi)
    outs = resize(images, out_sizes, rois, interp, True, torch.float32)
    assert_matches(outs, reference(images, out_sizes, rois, interp, True), torch.float32, interp)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    images = random_images(SIZES, 3, torch.uint8, device)
    args = (images, [v for hw in OUT_SIZES for v in hw], torch.zeros(len(SIZES), 4),
            torch.ones(len(SIZES), 2, dtype=torch.int64), True, torch.float32)
    torch.library.opcheck(torch.ops.torchdali.resize.default, args)
    chw = [im.permute(2, 0, 1).contiguous() for im in images]
    dense_args = (chw, [5, 9] * len(SIZES)) + args[2:] + (True,)
    torch.library.opcheck(torch.ops.torchdali.resize.default, dense_args)
    torch.library.opcheck(torch.ops.torchdali.resize.dense, dense_args)
    batch = torch.stack(random_images([(6, 11)] * len(SIZES), 3, torch.uint8, device)).permute(0, 3, 1, 2)
    torch.library.opcheck(torch.ops.torchdali.resize.dense_in, (batch.contiguous(),) + dense_args[1:])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("chw", [False, True], ids=["hwc", "chw"])
@pytest.mark.parametrize("in_dtype", [torch.uint8, torch.float32])
def test_a_flat_batch_gives_the_list_forms_outputs_back_to_back(in_dtype, chw, device):
    """Images of different sizes back to back in one buffer with their shapes (resize.flat, as
    the decoders output them): the outputs of the list form, back to back in one buffer."""
    images = random_images(SIZES, 3, in_dtype, device)
    if chw:
        images = [im.permute(2, 0, 1).contiguous() for im in images]
    shapes = torch.tensor([list(im.shape) for im in images], dtype=torch.int64)
    flat = torch.cat([im.reshape(-1) for im in images])
    rois = torch.rand(len(SIZES), 4, generator=torch.Generator().manual_seed(1)) * 4
    interp = torch.tensor([[LINEAR, CUBIC], [NN, NN], [LANCZOS3, LINEAR], [TRIANGULAR, CUBIC]])
    expected = resize(images, OUT_SIZES, rois, interp, True, torch.float32, chw)
    out = resize(flat, OUT_SIZES, rois, interp, True, torch.float32, chw, shapes=shapes)
    assert out.dim() == 1 and out.dtype == torch.float32
    assert torch.equal(out, torch.cat([e.reshape(-1) for e in expected]))
    args = (flat, shapes, [v for hw in OUT_SIZES for v in hw], rois, interp, True, torch.float32, chw)
    torch.library.opcheck(torch.ops.torchdali.resize.flat, args)


@pytest.mark.parametrize("device", DEVICES)
def test_a_flat_batch_that_its_shapes_overrun_is_refused(device):
    images = random_images(SIZES, 3, torch.uint8, device)
    shapes = torch.tensor([list(im.shape) for im in images], dtype=torch.int64)
    flat = torch.cat([im.reshape(-1) for im in images])
    with pytest.raises(ValueError, match="more elements than the flat batch holds"):
        resize(flat[:-1], OUT_SIZES, shapes=shapes)
    huge = shapes.clone()
    huge[1] = torch.tensor([1 << 40, 1 << 40, 3])
    with pytest.raises(ValueError, match="sample 1 of shape .* does not fit the flat batch"):
        resize(flat, OUT_SIZES, shapes=huge)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(backend):
    if backend == "inductor" and not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("inductor needs a C++ compiler on CPU")
    images = random_images(SIZES, 3, torch.uint8, "cpu")
    rois = torch.zeros(len(SIZES), 4)
    interp = torch.ones(len(SIZES), 2, dtype=torch.int64)

    def f(images, rois, interp):
        outs = resize(images, OUT_SIZES, rois, interp, True, torch.float32)
        dense = resize(images, [(6, 6)] * len(images), rois, interp, True, torch.float32,
                       dense=True)
        return [o * 2.0 for o in outs] + [dense - 1.0]

    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True, backend=backend)(images, rois, interp)
    for g, e in zip(got, f(images, rois, interp)):
        torch.testing.assert_close(g, e)


def _call(**overrides):
    args = dict(images=random_images(SIZES, 3, torch.uint8, "cpu"),
                out_sizes=[v for hw in OUT_SIZES for v in hw], rois=torch.zeros(4, 4),
                interp=torch.ones(4, 2, dtype=torch.int64), antialias=True,
                out_dtype=torch.uint8)
    args.update(overrides)
    return torch.ops.torchdali.resize.default(*args.values())


@pytest.mark.parametrize("overrides, error, match", [
    ({"images": []}, ValueError, r"resize: `images` must hold"),
    ({"out_sizes": [3, 3]}, ValueError, r"resize: `out_sizes` must hold 2 values"),
    ({"out_sizes": [0, 3] * 4}, ValueError, r"resize: output size of sample 0 must be positive"),
    ({"rois": torch.zeros(4, 3)}, ValueError, r"resize: `rois` must have shape"),
    ({"interp": torch.ones(4, dtype=torch.int64)}, ValueError, r"resize: `interp` must have shape"),
    ({"interp": torch.full((4, 2), 9)}, ValueError, r"resize: unknown interpolation type 9"),
    ({"out_dtype": torch.int32}, TypeError, r"resize: `out_dtype` must be"),
    ({"images": [torch.zeros(4, 4, 3, dtype=torch.int32)] * 4}, TypeError, r"resize: `images` must be uint8"),
    ({"images": [torch.zeros(4, 4, 3, dtype=torch.uint8)] * 3 + [torch.zeros(4, 4, 1, dtype=torch.uint8)]},
     ValueError, r"sample 3 has shape"),
    ({"images": [torch.zeros(4, 4, dtype=torch.uint8)] * 4}, ValueError, r"HWC \(3 dims\)"),
])
def test_bad_inputs(overrides, error, match):
    with pytest.raises(error, match=match):
        _call(**overrides)


def test_dense_needs_one_output_size():
    images = random_images(SIZES, 3, torch.uint8, "cpu")
    with pytest.raises(ValueError, match=r"resize: a dense output needs one output size.*sample 1"):
        resize(images, OUT_SIZES, dense=True)
    with pytest.raises(ValueError, match=r"resize: all `images` must be CHW with 17 channels"):
        resize(images, OUT_SIZES, chw=True)
