"""torchdali::warp_affine on 3D volumes (DHWC and CDHW, CPU and CUDA, list and dense) against a
NumPy reference of DALI's 3D sampling: voxel (x, y, z) reads the input at
M @ (x + 0.5, y + 0.5, z + 0.5, 1), each coordinate summed as ((m3 + m0 x) + m1 y) + m2 z in
float32; NN takes floor(p), LINEAR blends the 8 voxels around p - 0.5 (along x, then y as
weighted sums, then a lerp along z); outside: fill or the edge."""
import math

import numpy as np
import pytest
import torch

from conftest import requires_cuda
from test_kernel_warp import F32, assert_equal, to_out
from torchdali.kernels.warp import INTERP_LINEAR, INTERP_NN, warp_affine

DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]
SIZES = [(5, 7, 9), (1, 1, 1), (6, 3, 11), (2, 13, 4)]
OUT_SIZES = [(6, 8, 7), (2, 3, 2), (6, 3, 11), (3, 9, 5)]
TYPE_PAIRS = [(torch.uint8, torch.uint8), (torch.uint8, torch.float32), (torch.float32, torch.uint8),
              (torch.float32, torch.float32), (torch.float16, torch.float16), (torch.int16, torch.int16),
              (torch.int32, torch.float32), (torch.float32, torch.int32)]


def volumes_for(dtype, device, channel_first, sizes=SIZES, c=2, seed=0):
    """DHWC (or CDHW) volumes with values over 0..255."""
    g = torch.Generator().manual_seed(seed)
    vols = [torch.rand(d, h, w, c, generator=g) * 255 for d, h, w in sizes]
    vols = [v.round().to(dtype) if not dtype.is_floating_point else v.to(dtype) for v in vols]
    return [(v.permute(3, 0, 1, 2).contiguous() if channel_first else v).to(device) for v in vols]


def matrices_for(sizes, seed=0):
    """Rotations about random axes with scale and shift about each volume's centre, some
    reaching outside it: [N, 3, 4] over (x, y, z)."""
    rng = np.random.default_rng(seed)
    ms = []
    for d, h, w in sizes:
        q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        q *= rng.uniform(0.6, 1.5)
        centre = np.array([w, h, d], float) / 2
        t = centre - q @ centre + rng.uniform(-2, 2, 3)
        ms.append(np.concatenate([q, t[:, None]], axis=1))
    return torch.tensor(np.array(ms), dtype=torch.float32)


def reference(vol, m, out_dhw, interp, fill, out_dtype):
    """One DHWC volume warped by the 3x4 matrix m, in float32 like the kernels."""
    in_dtype = vol.dtype
    vol = vol.cpu().float().numpy()
    d, h, w, c = vol.shape
    m = m.numpy().astype(F32)
    oz, oy, ox = np.meshgrid(*[np.arange(k) for k in out_dhw], indexing="ij")
    f = [a.astype(F32) + F32(0.5) for a in (ox, oy, oz)]
    p = [((m[i, 3] + m[i, 0] * f[0]) + m[i, 1] * f[1]) + m[i, 2] * f[2] for i in range(3)]

    def tap(x, y, z, fill_value):
        inside = (x >= 0) & (x < w) & (y >= 0) & (y < h) & (z >= 0) & (z < d)
        values = vol[np.clip(z, 0, d - 1), np.clip(y, 0, h - 1), np.clip(x, 0, w - 1)]
        return values if fill is None else np.where(inside[..., None], values, fill_value)

    fill_out = None if fill is None else to_out(np.broadcast_to(fill, (c,)), out_dtype).astype(F32)
    if interp == INTERP_NN:
        return to_out(tap(*[np.floor(v).astype(np.int64) for v in p], fill_out), out_dtype)
    fill_in = None if fill is None else to_out(fill_out, in_dtype).astype(F32)
    s = [v - F32(0.5) for v in p]
    floors = [np.floor(v) for v in s]
    qx, qy, qz = [(v - v0)[..., None] for v, v0 in zip(s, floors)]
    x0, y0, z0 = [v.astype(np.int64) for v in floors]
    px, py = F32(1) - qx, F32(1) - qy

    def along_x(dy, dz):
        return tap(x0, y0 + dy, z0 + dz, fill_in) * px + tap(x0 + 1, y0 + dy, z0 + dz, fill_in) * qx

    s0 = along_x(0, 0) * py + along_x(1, 0) * qy
    s1 = along_x(0, 1) * py + along_x(1, 1) * qy
    return to_out(s0 + (s1 - s0) * qz, out_dtype)


def expected_for(vols, m, out_sizes, interp, fill, out_dtype, channel_first):
    out = []
    for k, (v, dhw) in enumerate(zip(vols, out_sizes)):
        dhwc = v.permute(1, 2, 3, 0) if channel_first else v
        it = interp[k] if isinstance(interp, list) else interp
        r = torch.from_numpy(reference(dhwc, m[k], dhw, it, fill, out_dtype))
        out.append(r.permute(3, 0, 1, 2) if channel_first else r)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_dtype,out_dtype", TYPE_PAIRS)
@pytest.mark.parametrize("layout", ["DHWC", "CDHW"])
@pytest.mark.parametrize("interp", [INTERP_NN, INTERP_LINEAR])
@pytest.mark.parametrize("fill", [None, [300.0, -2.5]])
def test_matches_reference(device, in_dtype, out_dtype, layout, interp, fill):
    cf = layout == "CDHW"
    vols = volumes_for(in_dtype, device, cf)
    m = matrices_for(SIZES)
    outs = warp_affine(vols, m, OUT_SIZES, interp, None if fill is None else torch.tensor(fill), out_dtype, cf)
    assert all(o.device == vols[0].device for o in outs)
    fill_np = None if fill is None else np.asarray(fill, F32)
    assert_equal(outs, expected_for(vols, m, OUT_SIZES, interp, fill_np, out_dtype, cf))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interp", [INTERP_NN, INTERP_LINEAR])
def test_identity_and_integer_shift_are_exact(device, interp):
    vols = volumes_for(torch.uint8, device, False)
    eye = torch.eye(3, 4).expand(len(vols), 3, 4).contiguous()
    assert_equal(warp_affine(vols, eye, SIZES, interp), [v.cpu() for v in vols])
    shift = eye.clone()
    shift[:, :, 3] = torch.tensor([2.0, -1.0, 1.0])  # output (x, y, z) reads input (x + 2, y - 1, z + 1)
    for v, o in zip(vols, warp_affine(vols, shift, SIZES, interp, torch.tensor([7.0]))):
        d, h, w = v.shape[:3]
        expected = torch.full_like(v.cpu(), 7)
        expected[: max(d - 1, 0), 1:, : max(w - 2, 0)] = v.cpu()[1:, : h - 1, 2:]
        assert torch.equal(o.cpu(), expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["DHWC", "CDHW"])
def test_dense_equals_stacked_list(device, layout):
    cf = layout == "CDHW"
    vols = volumes_for(torch.uint8, device, cf)
    m = matrices_for(SIZES, seed=5)
    sizes = [(4, 6, 5)] * len(vols)
    dense = warp_affine(vols, m, sizes, [INTERP_NN, INTERP_LINEAR] * 2, None, torch.uint8, cf, dense=True)
    assert dense.shape == ((4, 2, 4, 6, 5) if cf else (4, 4, 6, 5, 2))
    assert torch.equal(dense, torch.stack(warp_affine(vols, m, sizes, [INTERP_NN, INTERP_LINEAR] * 2, None,
                                                      torch.uint8, cf)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fill", [None, [-7.0]])
def test_nearest_copies_int32_labels_exactly(device, fill):
    """Label ids above 2^24 (which float32 would round) come through INTERP_NN unchanged."""
    g = torch.Generator().manual_seed(5)
    labels = [(torch.randint(0, 1000, (d, h, w, 1), generator=g, dtype=torch.int32) * 2 + (1 << 30) + 1).to(device)
              for d, h, w in SIZES]
    m = matrices_for(SIZES, seed=3)
    fill_t = None if fill is None else torch.tensor(fill)
    outs = warp_affine(labels, m, OUT_SIZES, INTERP_NN, fill_t, torch.int32)
    fill_np = None if fill is None else np.asarray(fill, F32)
    for o, v, mat, dhw in zip(outs, labels, m, OUT_SIZES):
        ids = torch.from_numpy(reference(v.cpu() - (1 << 30), mat, dhw, INTERP_NN, None, torch.int32))
        expected = ids + (1 << 30)  # the reference is float32: ids below 2^24 are exact there
        if fill is not None:
            inside = torch.from_numpy(reference(torch.ones_like(v.cpu()), mat, dhw, INTERP_NN, fill_np, torch.int32))
            expected = torch.where(inside == 1, expected, torch.tensor(int(fill[0]), dtype=torch.int32))
        assert torch.equal(o.cpu(), expected)


@requires_cuda
@pytest.mark.parametrize("in_dtype,out_dtype", TYPE_PAIRS)
@pytest.mark.parametrize("interp", [INTERP_NN, INTERP_LINEAR])
@pytest.mark.parametrize("fill", [None, [1.5]])
def test_cuda_equals_cpu(in_dtype, out_dtype, interp, fill):
    sizes = [(40, 64, 48), (3, 101, 37), (1, 2, 3)]
    vols = volumes_for(in_dtype, "cpu", False, sizes=sizes, c=3)
    m = matrices_for(sizes, seed=7)
    out_sizes = [(41, 60, 50), (5, 99, 41), (2, 2, 2)]
    fill_t = None if fill is None else torch.tensor(fill)
    cpu = warp_affine(vols, m, out_sizes, interp, fill_t, out_dtype)
    cuda = warp_affine([v.cuda() for v in vols], m, out_sizes, interp, fill_t, out_dtype)
    assert_equal(cuda, cpu)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("channel_first", [False, True])
def test_opcheck(device, dense, channel_first):
    vols = volumes_for(torch.uint8, device, channel_first)
    sizes = [(3, 5, 4)] * len(vols) if dense else OUT_SIZES
    op = torch.ops.torchdali.warp_affine.dense if dense else torch.ops.torchdali.warp_affine.default
    torch.library.opcheck(op, (vols, matrices_for(SIZES), [v for s in sizes for v in s], [1, 0, 1, 0],
                               torch.tensor([3.0]), torch.float32, channel_first))


BAD_CALLS = [
    ("images 2D for 3x4 matrices", dict(volumes=[torch.zeros(3, 3, 2)] * 2), ValueError,
     r"must be DHWC \(4 dims, as the matrices are 3D\)"),
    ("volumes for 2x3 matrices", dict(matrices=torch.zeros(2, 2, 3)), ValueError, r"must be HWC \(3 dims"),
    ("matrix shape", dict(matrices=torch.zeros(2, 3, 3)), ValueError, r"\[2, 2, 3\].* or \[2, 3, 4\]"),
    ("out sizes count", dict(out_sizes=[(4, 4), (3, 3)]), ValueError,
     r"`out_sizes` must hold 3 values \(depth, height, width\) per image"),
    ("zero depth", dict(out_sizes=[(4, 4, 4), (0, 3, 3)]), ValueError, "output size of sample 1 must be positive"),
    ("non-finite matrix", dict(matrices=torch.tensor([[1.0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, math.inf]]).expand(
        2, 3, 4)), ValueError, "matrix of sample 0 is not finite"),
    ("channels differ", dict(volumes=[torch.zeros(3, 3, 3, 2), torch.zeros(3, 3, 3, 1)]), ValueError, "2 channels"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case,kwargs,exc,match", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_arguments(device, case, kwargs, exc, match):
    call = dict(volumes=[torch.zeros(5, 6, 3, 2), torch.zeros(4, 4, 4, 2)], matrices=torch.eye(3, 4).expand(2, 3, 4),
                out_sizes=[(4, 4, 4), (3, 3, 3)])
    call.update(kwargs)
    with pytest.raises(exc, match=match):
        torch.ops.torchdali.warp_affine.default(
            [v.to(device) for v in call["volumes"]], call["matrices"].contiguous(),
            [v for s in call["out_sizes"] for v in s], [1, 1], None, torch.float32, False)
