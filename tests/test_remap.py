"""water, sphere and experimental.warp_perspective against DALI's CPU operators."""
import functools

import numpy as np
import pytest

import torchdali
from conftest import as_numpy_batch, constant_source, dali_or_skip, requires_cuda
from torchdali import types

M = [1.1, 0.1, -2, 0.05, 0.9, 1.5, 0.001, 0.002, 1.0]


def run_op(lib, op, images, layout="HWC", inputs=(), arg_inputs=None, device="cpu", **kwargs):
    """One iteration of lib.fn.<op> (a dotted name) on `images`; (outputs as NumPy, layout)."""
    images = [np.ascontiguousarray(im) for im in images]

    @lib.pipeline_def(batch_size=len(images), num_threads=2, device_id=None if device == "cpu" else 0, seed=1)
    def pipe():
        x = lib.fn.external_source(constant_source(images), layout=layout)
        x = x.gpu() if device == "gpu" else x
        extra = [lib.fn.external_source(constant_source(v)) for v in inputs]
        extra = [e.gpu() for e in extra] if device == "gpu" else extra
        named = {k: lib.fn.external_source(constant_source(v)) for k, v in (arg_inputs or {}).items()}
        return functools.reduce(getattr, op.split("."), lib.fn)(x, *extra, **kwargs, **named)

    p = pipe()
    p.build()
    out = p.run()[0]
    return as_numpy_batch(out), out.layout()


def compare(op, images, atol=0.0, **kwargs):
    """Our result equals DALI's (within `atol`), shapes, types and layout exactly."""
    dali = dali_or_skip()
    expected, elayout = run_op(dali, op, images, **kwargs)
    got, glayout = run_op(torchdali, op, images, **kwargs)
    assert glayout == elayout
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape and g.dtype == e.dtype, f"sample {i}: {g.shape} {g.dtype} vs {e.shape} {e.dtype}"
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=0, atol=atol,
                                   err_msg=f"sample {i}")


def images(sizes, dtype, c=3, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.random((h, w, c)) * 255).astype(dtype) for h, w in sizes]


# Float results differ from DALI's by float rounding only (DALI's interpolation sums in another order):
# a few ulp of values up to 255.
FLOAT_ATOL = 2e-3


@pytest.mark.parametrize("op", ["water", "sphere"])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR])
@pytest.mark.parametrize("sizes", [[(13, 17), (13, 17)], [(13, 17), (8, 5), (1, 1), (2, 9)]])
def test_displacement_matches_dali(op, dtype, interp, sizes):
    atol = FLOAT_ATOL if dtype == np.float32 and interp == types.INTERP_LINEAR else 0
    compare(op, images(sizes, dtype), atol=atol, interp_type=interp, fill_value=-7.0)


def test_water_arguments_match_dali():
    ims = images([(21, 19), (21, 19)], np.uint8)
    compare("water", ims, ampl_x=3.3, ampl_y=-2.7, freq_x=0.3, freq_y=0.45, phase_x=0.2, phase_y=1.1,
            fill_value=300.7, interp_type=types.INTERP_LINEAR)
    compare("water", ims, ampl_x=1e30, fill_value=12)
    compare("water", ims, freq_x=float("nan"))


@pytest.mark.parametrize("op", ["water", "sphere"])
def test_displacement_mask_channels_and_empty(op):
    ims = images([(9, 11), (9, 11), (9, 11)], np.uint8, c=5)
    compare(op, ims, arg_inputs={"mask": [np.int32(0), np.int32(1), np.int32(2)]})
    # DALI gives zeros for a constant mask=0 (while an argument-input 0 keeps the sample); ours keeps it
    got, _ = run_op(torchdali, op, ims, mask=0)
    assert all(np.array_equal(g, im) for g, im in zip(got, ims))
    compare(op, images([(0, 9), (4, 9)], np.uint8, c=1))


@pytest.mark.parametrize("op", ["water", "sphere"])
def test_displacement_errors(op):
    with pytest.raises(TypeError, match=f"{op}.*INT16"):
        run_op(torchdali, op, images([(4, 5)], np.int16))
    with pytest.raises(ValueError, match=f"{op}.*layout 'CHW'"):
        run_op(torchdali, op, images([(4, 5)], np.uint8), layout="CHW")
    with pytest.raises(ValueError, match=f"{op}.*interp_type"):
        run_op(torchdali, op, images([(4, 5)], np.uint8), interp_type=types.INTERP_CUBIC)


BORDERS = ["constant", "replicate", "reflect", "reflect_101", "wrap"]


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32])
@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR, types.INTERP_CUBIC])
def test_warp_perspective_matches_dali(dtype, interp):
    # integer results may round the other way where DALI's float sum lands next to .5
    atol = FLOAT_ATOL if dtype == np.float32 else 0 if interp == types.INTERP_NN else 1
    for border in BORDERS:
        compare("experimental.warp_perspective", images([(13, 17), (8, 5)], dtype), atol=atol, matrix=M,
                interp_type=interp, border_mode=border, fill_value=[3.5, 300, -2])
        compare("experimental.warp_perspective", images([(13, 17)] * 2, dtype), atol=atol, matrix=M,
                interp_type=interp, border_mode=border, size=[7, 9])


@pytest.mark.parametrize("kwargs", [dict(inverse_map=False), dict(pixel_origin="center"), dict(size=[5]),
                                    dict(size=[0, 3.6]), dict(fill_value=[9])])
def test_warp_perspective_options_match_dali(kwargs):
    compare("experimental.warp_perspective", images([(13, 17), (8, 5)], np.uint8), matrix=M,
            interp_type=types.INTERP_NN, **kwargs)


def test_warp_perspective_degenerate_matrices_match_dali():
    ims = images([(6, 7)], np.uint8)
    compare("experimental.warp_perspective", ims, matrix=[0] * 9)
    compare("experimental.warp_perspective", ims, matrix=[0] * 9, inverse_map=False)
    compare("experimental.warp_perspective", ims, matrix=[1, 0, 0, 0, 1, 0, 0, 0, 0])


def test_warp_perspective_layouts_inputs_and_sequences_match_dali():
    ims = images([(13, 17), (8, 5)], np.uint8)
    nn = dict(interp_type=types.INTERP_NN)
    compare("experimental.warp_perspective", [im.transpose(2, 0, 1) for im in ims], layout="CHW", matrix=M, **nn)
    compare("experimental.warp_perspective", [im[..., 0] for im in ims], layout="HW", matrix=M, **nn)
    mats = [np.array(M, np.float32).reshape(3, 3), np.eye(3, dtype=np.float32)]
    compare("experimental.warp_perspective", ims, inputs=[mats], **nn)
    compare("experimental.warp_perspective", ims, arg_inputs={"matrix": mats, "size": [
        np.array([4.4, 6.6], np.float32), np.array([9, 3], np.float32)]}, **nn)
    seq = [np.stack(images([(13, 17)] * 3, np.uint8, seed=s)) for s in (1, 2)]
    compare("experimental.warp_perspective", seq, layout="FHWC", matrix=M, **nn)
    compare("experimental.warp_perspective", seq, layout="FHWC", matrix=M, fill_value=[1, 2, 3])


def test_warp_perspective_errors():
    wp = "experimental.warp_perspective"
    with pytest.raises(TypeError, match="warp_perspective.*INT32"):
        run_op(torchdali, wp, images([(4, 5)], np.int32), matrix=M)
    with pytest.raises(ValueError, match="warp_perspective.*more than 4 channels"):
        run_op(torchdali, wp, images([(4, 5)], np.uint8, c=5), matrix=M)
    with pytest.raises(ValueError, match="warp_perspective.*'fill_value'"):
        run_op(torchdali, wp, images([(4, 5)], np.uint8), matrix=M, fill_value=[1, 2])
    with pytest.raises(ValueError, match="warp_perspective.*'matrix'"):
        run_op(torchdali, wp, images([(4, 5)], np.uint8), matrix=M[:6])
    with pytest.raises(ValueError, match="warp_perspective.*'matrix' must be given"):
        run_op(torchdali, wp, images([(4, 5)], np.uint8))
    with pytest.raises(ValueError, match="warp_perspective.*not both"):
        run_op(torchdali, wp, images([(4, 5)], np.uint8), inputs=[[np.eye(3, dtype=np.float32)]], matrix=M)
    with pytest.raises(ValueError, match="warp_perspective.*border_mode"):
        run_op(torchdali, wp, images([(4, 5)], np.uint8), matrix=M, border_mode="foo")
    with pytest.raises(ValueError, match="warp_perspective.*empty"):
        run_op(torchdali, wp, images([(0, 5)], np.uint8), matrix=M)
    with pytest.raises(TypeError, match="warp_perspective.*3x3 float32"):
        run_op(torchdali, wp, images([(4, 5)], np.uint8), inputs=[[np.eye(3)]])


@requires_cuda
@pytest.mark.parametrize("op, kwargs", [("water", dict(interp_type=types.INTERP_LINEAR)), ("sphere", {}),
                                        ("experimental.warp_perspective", dict(matrix=M)),
                                        ("experimental.warp_perspective", dict(matrix=M, border_mode="wrap",
                                                                               interp_type=types.INTERP_CUBIC))])
def test_gpu_matches_cpu(op, kwargs):
    ims = images([(13, 17), (13, 17), (8, 5)], np.uint8)
    cpu, _ = run_op(torchdali, op, ims, **kwargs)
    gpu, _ = run_op(torchdali, op, ims, device="gpu", **kwargs)
    for c, g in zip(cpu, gpu):
        assert np.abs(c.astype(int) - g).max() <= 1


def remap_reference(image, mapx, mapy, interp, pixel_origin):
    """DALI's documented remap, in NumPy: output(x, y) = input(mapx(x, y), mapy(x, y)); with 'corner' origin a map
    value v lies v - 0.5 pixel centres from the first pixel's centre (DALI shifts the maps by -0.5 before its
    centre-based kernel); NN takes the pixel under the point, LINEAR interpolates the 4 nearest centres; pixels
    outside the image read 0; integers rounded half away from zero and saturated."""
    h, w, c = image.shape
    shift = 0.5 if pixel_origin == "corner" else 0.0
    x = mapx.astype(np.float64) - shift
    y = mapy.astype(np.float64) - shift
    src = image.astype(np.float64)

    def tap(xi, yi):
        inside = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)
        return np.where(inside[..., None], src[np.clip(yi, 0, h - 1), np.clip(xi, 0, w - 1)], 0.0)

    if interp == types.INTERP_NN:
        out = tap(np.floor(x + 0.5).astype(np.int64), np.floor(y + 0.5).astype(np.int64))
    else:
        x0, y0 = np.floor(x), np.floor(y)
        fx, fy = (x - x0)[..., None], (y - y0)[..., None]
        x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
        out = ((tap(x0, y0) * (1 - fx) + tap(x0 + 1, y0) * fx) * (1 - fy)
               + (tap(x0, y0 + 1) * (1 - fx) + tap(x0 + 1, y0 + 1) * fx) * fy)
    if np.issubdtype(image.dtype, np.integer):
        info = np.iinfo(image.dtype)
        out = np.clip(np.sign(out) * np.floor(np.abs(out) + 0.5), info.min, info.max)
    return out.astype(image.dtype)


def random_maps(rng, h, w, lead=()):
    """Maps reaching a bit outside the image, with exact pixel edges and centres among them."""
    mapx = rng.uniform(-2, w + 2, lead + (h, w)).astype(np.float32)
    mapy = rng.uniform(-2, h + 2, lead + (h, w)).astype(np.float32)
    mapx.flat[:3] = [0.0, 0.5, w]
    mapy.flat[:3] = [0.5, 0.0, h]
    return mapx, mapy


def run_remap(lib, ims, mapx, mapy, layout="HWC", map_layout="", device="cpu", **kwargs):
    """One iteration of lib.fn.experimental.remap; (outputs as NumPy, layout)."""
    @lib.pipeline_def(batch_size=len(ims), num_threads=2, device_id=None if device == "cpu" else 0, seed=1)
    def pipe():
        x, mx, my = (lib.fn.external_source(constant_source([np.ascontiguousarray(a) for a in v]), layout=lay)
                     for v, lay in ((ims, layout), (mapx, map_layout), (mapy, map_layout)))
        if device == "gpu":
            x, mx, my = x.gpu(), mx.gpu(), my.gpu()
        return lib.fn.experimental.remap(x, mx, my, **kwargs)

    p = pipe()
    p.build()
    out = p.run()[0]
    return as_numpy_batch(out), out.layout()


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint16, np.float32])
@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR])
@pytest.mark.parametrize("origin", ["corner", "center"])
@pytest.mark.parametrize("sizes,c", [([(13, 17), (13, 17)], 3), ([(13, 17), (8, 5), (1, 1), (2, 9)], 1)])
def test_remap_matches_reference(dtype, interp, origin, sizes, c):
    rng = np.random.default_rng(3)
    ims = images(sizes, dtype, c=c)
    maps = [random_maps(rng, h, w) for h, w in sizes]
    mapx, mapy = [m[0] for m in maps], [m[1] for m in maps]
    # HW maps, and HWC maps of one channel
    mapy = [m[..., None] for m in mapy] if c == 1 else mapy
    got, layout = run_remap(torchdali, ims, mapx, mapy, interp=interp, pixel_origin=origin)
    assert layout == "HWC"
    for g, im, mx, my in zip(got, ims, mapx, mapy):
        expected = remap_reference(im, mx, my.reshape(mx.shape), interp, origin)
        assert g.shape == im.shape and g.dtype == im.dtype
        np.testing.assert_allclose(g.astype(np.float64), expected.astype(np.float64), rtol=0,
                                   atol=1e-4 if dtype == np.float32 else 0)


def test_remap_identity_and_shift():
    ims = images([(7, 9)], np.uint8)
    gy, gx = np.mgrid[0:7, 0:9].astype(np.float32)
    same, _ = run_remap(torchdali, ims, [gx + 0.5], [gy + 0.5])
    np.testing.assert_array_equal(same[0], ims[0])
    centre, _ = run_remap(torchdali, ims, [gx], [gy], pixel_origin="center", interp=types.INTERP_NN)
    np.testing.assert_array_equal(centre[0], ims[0])
    left, _ = run_remap(torchdali, ims, [gx + 1.5], [gy + 0.5])
    np.testing.assert_array_equal(left[0][:, :-1], ims[0][:, 1:])
    assert not left[0][:, -1].any()


def test_remap_sequences():
    rng = np.random.default_rng(5)
    seqs = [(rng.random((f, 6, 7, 3)) * 255).astype(np.uint8) for f in (2, 3)]
    per_frame = [random_maps(rng, 6, 7, (f,)) for f in (2, 3)]
    got, layout = run_remap(torchdali, seqs, [m[0] for m in per_frame], [m[1] for m in per_frame], layout="FHWC",
                            map_layout="FHW")
    assert layout == "FHWC"
    for g, s, (mx, my) in zip(got, seqs, per_frame):
        expected = np.stack([remap_reference(f, x, y, types.INTERP_LINEAR, "corner") for f, x, y in zip(s, mx, my)])
        np.testing.assert_array_equal(g, expected)
    one = [random_maps(rng, 6, 7) for _ in seqs]  # one map for every frame
    got, _ = run_remap(torchdali, seqs, [m[0] for m in one], [m[1] for m in one], layout="FHWC", map_layout="HW")
    for g, s, (mx, my) in zip(got, seqs, one):
        np.testing.assert_array_equal(g, np.stack([remap_reference(f, mx, my, types.INTERP_LINEAR, "corner")
                                                   for f in s]))


@pytest.mark.parametrize("ims,maps,kwargs,match", [
    ([np.zeros((4, 5, 2), np.uint8)], (np.zeros((4, 5), np.float32),) * 2, {}, "2 channels"),
    ([np.zeros((4, 5, 3), np.int32)], (np.zeros((4, 5), np.float32),) * 2, {}, "INT32 is not supported"),
    ([np.zeros((4, 5, 3), np.uint8)], (np.zeros((4, 5), np.float64),) * 2, {}, "mapx.*FLOAT"),
    ([np.zeros((4, 5, 3), np.uint8)], (np.zeros((4, 5), np.float32), np.zeros((5, 4), np.float32)), {}, "mapy"),
    ([np.zeros((4, 5, 3), np.uint8)], (np.zeros((4, 5), np.float32),) * 2, {"interp": types.INTERP_CUBIC},
     "INTERP_NN and INTERP_LINEAR"),
    ([np.zeros((4, 5, 3), np.uint8)], (np.zeros((4, 5), np.float32),) * 2, {"pixel_origin": "middle"},
     "pixel_origin"),
])
def test_remap_errors(ims, maps, kwargs, match):
    with pytest.raises(Exception, match=match) as info:
        run_remap(torchdali, ims, [maps[0]], [maps[1]], **kwargs)
    assert "remap" in str(info.value)


@requires_cuda
@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR])
def test_remap_gpu_matches_cpu(interp):
    rng = np.random.default_rng(7)
    sizes = [(13, 17), (8, 5)]
    ims = images(sizes, np.uint8)
    maps = [random_maps(rng, h, w) for h, w in sizes]
    args = ([m[0] for m in maps], [m[1] for m in maps])
    cpu, _ = run_remap(torchdali, ims, *args, interp=interp)
    gpu, _ = run_remap(torchdali, ims, *args, interp=interp, device="gpu")
    for g, c in zip(gpu, cpu):
        np.testing.assert_array_equal(g, c)
