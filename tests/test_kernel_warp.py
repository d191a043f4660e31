"""torchdali::warp_affine (CPU and CUDA kernels, list and dense) against a NumPy reference of
DALI's sampling: output pixel (x, y) reads the input at M @ (x + 0.5, y + 0.5, 1) in float32;
NN takes floor(p), LINEAR blends the 4 pixels around p - 0.5; outside: fill or the edge."""
import math

import numpy as np
import pytest
import torch

from conftest import random_images, requires_cuda
from torchdali.kernels.warp import INTERP_LINEAR, INTERP_NN, warp_affine

DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]
SIZES = [(17, 23), (1, 1), (31, 5), (8, 40)]
OUT_SIZES = [(19, 21), (3, 2), (31, 5), (9, 41)]
TYPE_PAIRS = [(torch.uint8, torch.uint8), (torch.uint8, torch.float32), (torch.float16, torch.float16),
              (torch.float32, torch.uint8), (torch.float32, torch.float32), (torch.uint8, torch.float16),
              # DALI's label types: to their own type or float32, and from float32
              (torch.int16, torch.int16), (torch.int16, torch.float32), (torch.int32, torch.int32),
              (torch.int32, torch.float32), (torch.float32, torch.int16), (torch.float32, torch.int32)]
INT_TYPES = {torch.uint8: np.uint8, torch.int16: np.int16, torch.int32: np.int32}
F32 = np.float32


def matrices_for(sizes, seed=0):
    """Rotations with scale and shift about each image's centre, some reaching outside it."""
    rng = np.random.default_rng(seed)
    ms = []
    for h, w in sizes:
        a, s = rng.uniform(-math.pi, math.pi), rng.uniform(0.6, 1.5)
        c, n = s * math.cos(a), s * math.sin(a)
        ms.append([[c, -n, w / 2 - c * w / 2 + n * h / 2 + rng.uniform(-3, 3)],
                   [n, c, h / 2 - n * w / 2 - c * h / 2 + rng.uniform(-3, 3)]])
    return torch.tensor(ms, dtype=torch.float32)


def to_out(v, dtype):
    """float32 -> dtype as the kernels convert: round half away from zero, saturate (NaN: 0)."""
    v = np.asarray(v, F32)
    if dtype in INT_TYPES:
        info = np.iinfo(INT_TYPES[dtype])
        v = np.nan_to_num(v, nan=0.0).astype(np.float64)
        t = np.trunc(v)
        r = t + np.sign(v) * (np.abs(v - t) >= 0.5)
        return np.clip(r, info.min, info.max).astype(INT_TYPES[dtype])
    return v.astype(np.float16 if dtype == torch.float16 else F32)


def reference(img, m, out_hw, interp, fill, out_dtype):
    """One HWC image warped by the 2x3 matrix m, in float32 like the kernels."""
    in_dtype = img.dtype
    img = img.cpu().float().numpy()
    h, w, c = img.shape
    m = m.numpy().astype(F32)
    oy, ox = np.meshgrid(np.arange(out_hw[0]), np.arange(out_hw[1]), indexing="ij")
    fx, fy = ox.astype(F32) + F32(0.5), oy.astype(F32) + F32(0.5)
    px = (m[0, 0] * fx + m[0, 1] * fy) + m[0, 2]
    py = (m[1, 0] * fx + m[1, 1] * fy) + m[1, 2]

    def taps(col, row, fill_value):
        inside = (col >= 0) & (col < w) & (row >= 0) & (row < h)
        vals = img[np.clip(row, 0, h - 1), np.clip(col, 0, w - 1)]
        if fill is None:
            return vals
        return np.where(inside[..., None], vals, fill_value)

    fill_out = None if fill is None else to_out(np.broadcast_to(fill, (c,)), out_dtype).astype(F32)
    if interp == INTERP_NN:
        col, row = np.floor(px).astype(np.int64), np.floor(py).astype(np.int64)
        return to_out(taps(col, row, fill_out), out_dtype)
    fill_in = None if fill is None else to_out(fill_out, in_dtype).astype(F32)
    sx, sy = px - F32(0.5), py - F32(0.5)
    x0, y0 = np.floor(sx), np.floor(sy)
    qx, qy = (sx - x0)[..., None], (sy - y0)[..., None]
    wx = F32(1) - qx
    c0, r0 = x0.astype(np.int64), y0.astype(np.int64)
    top = taps(c0, r0, fill_in) * wx + taps(c0 + 1, r0, fill_in) * qx
    bottom = taps(c0, r0 + 1, fill_in) * wx + taps(c0 + 1, r0 + 1, fill_in) * qx
    return to_out(top + (bottom - top) * qy, out_dtype)


def images_for(dtype, device, chw, sizes=SIZES, c=3):
    ims = random_images(sizes, c, dtype, device)
    return [im.permute(2, 0, 1).contiguous() for im in ims] if chw else ims


def expected_for(images, m, out_sizes, interp, fill, out_dtype, chw):
    out = []
    for k, (im, hw) in enumerate(zip(images, out_sizes)):
        hwc = im.permute(1, 2, 0) if chw else im
        it = interp[k] if isinstance(interp, list) else interp
        r = torch.from_numpy(reference(hwc, m[k], hw, it, fill, out_dtype))
        out.append(r.permute(2, 0, 1) if chw else r)
    return out


def assert_equal(outs, expected):
    assert len(outs) == len(expected)
    for o, e in zip(outs, expected):
        assert o.dtype == e.dtype and tuple(o.shape) == tuple(e.shape) and o.is_contiguous()
        assert torch.equal(o.cpu(), e), (o.cpu().float() - e.float()).abs().max()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_dtype,out_dtype", TYPE_PAIRS)
@pytest.mark.parametrize("layout", ["HWC", "CHW"])
@pytest.mark.parametrize("interp", [INTERP_NN, INTERP_LINEAR])
@pytest.mark.parametrize("fill", [None, [300.0, 17.4, -2.5]])
def test_matches_reference(device, in_dtype, out_dtype, layout, interp, fill):
    chw = layout == "CHW"
    images = images_for(in_dtype, device, chw)
    m = matrices_for(SIZES)
    fill_t = None if fill is None else torch.tensor(fill)
    outs = warp_affine(images, m, OUT_SIZES, interp, fill_t, out_dtype, chw)
    assert all(o.device == images[0].device for o in outs)
    fill_np = None if fill is None else np.asarray(fill, F32)
    assert_equal(outs, expected_for(images, m, OUT_SIZES, interp, fill_np, out_dtype, chw))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interp", [INTERP_NN, INTERP_LINEAR])
def test_identity_and_integer_shift_are_exact(device, interp):
    images = images_for(torch.uint8, device, False)
    eye = torch.tensor([[1.0, 0, 0], [0, 1, 0]]).expand(len(images), 2, 3).contiguous()
    assert_equal(warp_affine(images, eye, SIZES, interp), [im.cpu() for im in images])
    shift = eye.clone()
    shift[:, 0, 2], shift[:, 1, 2] = 2, -1  # output (x, y) reads input (x + 2, y - 1)
    outs = warp_affine(images, shift, SIZES, interp, torch.tensor([7.0]))
    for im, o in zip(images, outs):
        h, w = im.shape[:2]
        expected = torch.full_like(im.cpu(), 7)
        expected[1:, : max(w - 2, 0)] = im.cpu()[: h - 1, 2:]
        assert torch.equal(o.cpu(), expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_half_pixel_shift_rounds_halves_away_from_zero(device, offset):
    """A shift by half a pixel blends two taps with weights 1/2, so odd sums land on halves,
    which round up (the CUDA kernel's uint8 RGB path rounds to even and corrects halves); the
    images start at every byte alignment (that path reads its taps as aligned words)."""
    h, w = 9, 37
    flat = torch.randint(0, 256, (offset + 2 * h * w * 3,), dtype=torch.uint8,
                         generator=torch.Generator().manual_seed(offset)).to(device)
    images = [flat[offset:offset + h * w * 3].view(h, w, 3), flat[offset + h * w * 3:].view(h, w, 3)]
    m = torch.tensor([[[1.0, 0, 0.5], [0, 1, 0]], [[0.8, -0.6, 9.5], [0.6, 0.8, -11.5]]])
    outs = warp_affine(images, m, [(h, w)] * 2, INTERP_LINEAR, torch.tensor([3.0]))
    left, right = images[0][:, :-1].cpu().int(), images[0][:, 1:].cpu().int()
    assert ((left + right) % 2 == 1).any()
    assert torch.equal(outs[0][:, :-1].cpu(), ((left + right + 1) // 2).to(torch.uint8))
    assert_equal(outs, expected_for(images, m, [(h, w)] * 2, INTERP_LINEAR, np.full(3, 3.0, F32),
                                    torch.uint8, False))


@pytest.mark.parametrize("device", DEVICES)
def test_per_sample_interp_and_single_fill_value(device):
    images = images_for(torch.float32, device, False)
    m = matrices_for(SIZES, seed=3)
    interp = [INTERP_NN, INTERP_LINEAR, INTERP_LINEAR, INTERP_NN]
    outs = warp_affine(images, m, OUT_SIZES, interp, torch.tensor([5.0]), torch.float32)
    assert_equal(outs, expected_for(images, m, OUT_SIZES, interp, np.full(3, 5.0, F32),
                                    torch.float32, False))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["HWC", "CHW"])
def test_dense_equals_stacked_list(device, layout):
    chw = layout == "CHW"
    images = images_for(torch.uint8, device, chw)
    m = matrices_for(SIZES, seed=5)
    sizes = [(13, 11)] * len(images)
    dense = warp_affine(images, m, sizes, INTERP_LINEAR, None, torch.uint8, chw, dense=True)
    assert dense.shape == ((4, 3, 13, 11) if chw else (4, 13, 11, 3))
    assert torch.equal(dense, torch.stack(warp_affine(images, m, sizes, INTERP_LINEAR, None,
                                                      torch.uint8, chw)))
    with pytest.raises(ValueError, match="all output sizes must be equal"):
        warp_affine(images, m, OUT_SIZES, chw=chw, dense=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fill", [None, [9.0]])
def test_far_away_matrix_gives_border(device, fill):
    images = images_for(torch.uint8, device, False, sizes=[(5, 6)])
    m = torch.tensor([[[3e37, 3e37, 1e38], [1.0, 0.0, -1e9]]])
    out = warp_affine(images, m, [(4, 4)], INTERP_LINEAR, None if fill is None else torch.tensor(fill))[0]
    if fill is None:  # every pixel is an edge pixel of the source: the top-right corner
        assert torch.equal(out.cpu(), images[0].cpu()[0, -1].expand(4, 4, 3))
    else:
        assert torch.equal(out.cpu(), torch.full((4, 4, 3), 9, dtype=torch.uint8))


@requires_cuda
@pytest.mark.parametrize("in_dtype,out_dtype", TYPE_PAIRS)
@pytest.mark.parametrize("interp", [INTERP_NN, INTERP_LINEAR])
@pytest.mark.parametrize("fill", [None, [1.5]])
def test_cuda_equals_cpu(in_dtype, out_dtype, interp, fill):
    sizes = [(480, 640), (37, 1001), (3, 3)]
    images = images_for(in_dtype, "cpu", False, sizes=sizes)
    m = matrices_for(sizes, seed=7)
    out_sizes = [(500, 333), (41, 999), (7, 5)]
    fill_t = None if fill is None else torch.tensor(fill)
    cpu = warp_affine(images, m, out_sizes, interp, fill_t, out_dtype)
    cuda = warp_affine([im.cuda() for im in images], m, out_sizes, interp, fill_t, out_dtype)
    assert_equal(cuda, cpu)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fill", [None, [-7.0]])
def test_nearest_copies_int32_labels_exactly(device, fill):
    """Label values that float32 cannot hold (above 2^24) come through INTERP_NN unchanged:
    an int32 label map keeps its ids; outside the image, the fill."""
    g = torch.Generator().manual_seed(5)
    labels = [(torch.randint(0, 1000, (h, w, 1), generator=g, dtype=torch.int32) * 2 + (1 << 30) + 1).to(device)
              for h, w in SIZES]
    m = matrices_for(SIZES, seed=3)
    outs = warp_affine(labels, m, OUT_SIZES, INTERP_NN, None if fill is None else torch.tensor(fill), torch.int32)
    for im, out, mat, (oh, ow) in zip(labels, outs, m, OUT_SIZES):
        h, w, _ = im.shape
        oy, ox = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
        fx, fy = ox.astype(F32) + F32(0.5), oy.astype(F32) + F32(0.5)
        mat = mat.numpy().astype(F32)
        col = np.floor((mat[0, 0] * fx + mat[0, 1] * fy) + mat[0, 2]).astype(np.int64)
        row = np.floor((mat[1, 0] * fx + mat[1, 1] * fy) + mat[1, 2]).astype(np.int64)
        inside = (col >= 0) & (col < w) & (row >= 0) & (row < h)
        expected = im.cpu().numpy()[np.clip(row, 0, h - 1), np.clip(col, 0, w - 1)]
        if fill is not None:
            expected = np.where(inside[..., None], expected, np.int32(fill[0]))
        np.testing.assert_array_equal(out.cpu().numpy(), expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("fill", [None, [3.0, 4.0, 5.0]])
def test_opcheck(device, dense, fill):
    images = images_for(torch.uint8, device, False)
    sizes = [(9, 7)] * len(images) if dense else OUT_SIZES
    flat = [v for hw in sizes for v in hw]
    op = torch.ops.torchdali.warp_affine.dense if dense else torch.ops.torchdali.warp_affine.default
    fill_t = None if fill is None else torch.tensor(fill)
    torch.library.opcheck(op, (images, matrices_for(SIZES), flat, [1, 0, 1, 0], fill_t,
                               torch.float32, False))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    images = images_for(torch.uint8, device, False, sizes=[(12, 10), (12, 10)])
    m = matrices_for([(12, 10), (12, 10)], seed=2)

    def f(ims, mats):
        out = warp_affine(ims, mats, [(8, 9), (8, 9)], INTERP_LINEAR, None, torch.float32, dense=True)
        return out * 2

    compiled = torch.compile(f, fullgraph=True, backend="eager" if device == "cpu" else "inductor")
    assert torch.equal(compiled(images, m), f(images, m))


BAD_CALLS = [
    ("matrix shape", dict(matrices=torch.zeros(2, 3, 3)), ValueError, r"`matrices` must have shape \[2, 2, 3\]"),
    ("non-finite matrix", dict(matrices=torch.tensor([[[1.0, 0, 0], [0, 1, 0]], [[1.0, math.nan, 0], [0, 1, 0]]])),
     ValueError, "matrix of sample 1 is not finite"),
    ("integer matrix", dict(matrices=torch.zeros(2, 2, 3, dtype=torch.int32)), TypeError, "floating point"),
    ("zero out size", dict(out_sizes=[(4, 4), (0, 3)]), ValueError, "output size of sample 1 must be positive"),
    ("negative out size", dict(out_sizes=[(-4, 4), (3, 3)]), ValueError, "output size of sample 0 must be positive"),
    ("out sizes count", dict(out_sizes=[(4, 4)]), ValueError, "`out_sizes` must hold 2 values"),
    ("fill length", dict(fill=torch.tensor([1.0, 2.0])), ValueError, "`fill` must have 1 or 3"),
    ("bad interp", dict(interp=2), ValueError, "interpolation type 2 of sample 0 is not supported"),
    ("interp count", dict(interp=[0, 1, 1]), ValueError, "`interp` must hold one interpolation type per image"),
    ("out dtype", dict(out_dtype=torch.int8), TypeError, "`out_dtype` must be uint8, int16, int32, float16 or"),
    ("images dtype", dict(images=[torch.zeros(3, 3, 3, dtype=torch.int8)] * 2), TypeError, "must be uint8, int16"),
    ("label to uint8", dict(images=[torch.zeros(3, 3, 3, dtype=torch.int32)] * 2, out_dtype=torch.uint8), TypeError,
     "int16 and int32 images are warped to their own type or float32"),
    ("uint8 to label", dict(images=[torch.zeros(3, 3, 3, dtype=torch.uint8)] * 2, out_dtype=torch.int16), TypeError,
     "only float32 images to int16 or int32"),
    ("channels differ", dict(images=[torch.zeros(3, 3, 3), torch.zeros(3, 3, 1)]), ValueError, "3 channels"),
    ("empty image", dict(images=[torch.zeros(3, 3, 3), torch.zeros(0, 3, 3)]), ValueError, "sample 1 is empty"),
    ("not 3 dims", dict(images=[torch.zeros(3, 3)] * 2), ValueError, "must be HWC"),
    ("no images", dict(images=[]), ValueError, "at least one image"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case,kwargs,exc,match", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_arguments(device, case, kwargs, exc, match):
    call = dict(images=[torch.zeros(5, 6, 3), torch.zeros(4, 4, 3)],
                matrices=torch.tensor([[1.0, 0, 0], [0, 1, 0]]).expand(2, 2, 3).contiguous(),
                out_sizes=[(4, 4), (3, 3)], interp=1, fill=None, out_dtype=torch.float32)
    call.update(kwargs)
    call["images"] = [im.to(device) for im in call["images"]]
    with pytest.raises(exc, match=match):
        torch.ops.torchdali.warp_affine.default(
            call["images"], call["matrices"], [v for hw in call["out_sizes"] for v in hw],
            [call["interp"]] * 2 if isinstance(call["interp"], int) else call["interp"], call["fill"],
            call["out_dtype"], False)
