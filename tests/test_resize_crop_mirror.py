"""fn.resize_crop_mirror against NVIDIA DALI's fused operator (shapes, types and layouts
exactly, pixels within test_resize.py's tolerance), and against resize, then crop, then flip."""
import numpy as np
import pytest

import torchdali
from torchdali import types

from conftest import as_numpy_batch, assert_one_buffer, constant_source, dali_or_skip, requires_cuda

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(0)
IMAGES = [RNG.integers(0, 256, s, dtype=np.uint8) for s in ((20, 30, 3), (11, 7, 3), (40, 9, 3), (1, 1, 3),
                                                             (333, 500, 3))]
N = len(IMAGES)


def run(lib, op, images, layout="HWC", device="cpu", batch=False, **kwargs):
    """lib.fn.<op>(images, **kwargs) as NumPy arrays and the layout (or, with `batch`, the
    TensorList); per-sample lists of arrays become argument inputs."""
    @lib.pipeline_def(batch_size=len(images), num_threads=2, device_id=None if device == "cpu" else 0, seed=1)
    def pipe():
        x = lib.fn.external_source(constant_source(images), layout=layout)
        named = {k: lib.fn.external_source(constant_source(v)) for k, v in kwargs.items()
                 if isinstance(v, list) and v and isinstance(v[0], np.ndarray)}
        consts = {k: getattr(lib.types, v.name) if isinstance(v, (types.DALIDataType, types.DALIInterpType)) else v
                  for k, v in kwargs.items() if k not in named}
        return getattr(lib.fn, op)(x.gpu() if device == "gpu" else x, **named, **consts)

    p = pipe()
    p.build()
    out = p.run()[0]
    return out if batch else (as_numpy_batch(out), out.layout())


def assert_close(got, ref, tol=1.0):
    assert len(got) == len(ref)
    for i, (g, r) in enumerate(zip(got, ref)):
        assert g.shape == r.shape and g.dtype == r.dtype, (i, g.shape, r.shape, g.dtype, r.dtype)
        mad = np.abs(g.astype(np.float64) - r.astype(np.float64)).mean()
        assert mad < tol, (i, mad)


def compare(images=IMAGES, tol=1.0, **kwargs):
    ref, ref_layout = run(dali_or_skip(), "resize_crop_mirror", images, **kwargs)
    got, layout = run(torchdali, "resize_crop_mirror", images, **kwargs)
    assert layout == ref_layout
    assert_close(got, ref, tol)
    return got


CASES = {
    "crop_center": dict(size=(16, 18), crop=(8, 10)),
    "crop_placed": dict(size=(16, 18), crop=(8, 10), crop_pos_x=0.3, crop_pos_y=0.8),
    "crop_h_w": dict(size=(16, 18), crop_h=7, crop_w=5, crop_pos_x=0.9),
    "fractional_crop": dict(size=(16, 18), crop=(8.7, 10.2)),
    "truncated_anchor": dict(size=(16, 18), crop=(8, 10), crop_pos_x=0.7, crop_pos_y=0.3, rounding="truncate"),
    "crop_larger_than_resized": dict(size=(16, 18), crop=(20, 25)),
    "no_crop": dict(size=(16, 18), mirror=1),
    "resize_shorter": dict(resize_shorter=12, crop=(8, 10), mirror=2),
    "resize_longer": dict(resize_longer=30, crop=(8, 10)),
    "resize_x": dict(resize_x=33, crop=(8, 10), mirror=1),
    "not_larger_max": dict(size=(40, 40), mode="not_larger", max_size=30, crop=(8, 10), mirror=3),
    "roi": dict(size=(16, 16), roi_start=(0.1, 0.9), roi_end=(0.8, 0.2), roi_relative=True, crop=(8, 10), mirror=1),
    "per_sample": dict(size=(16, 16), crop=(8, 10), mirror=[np.array(i % 4, np.int32) for i in range(N)],
                       crop_pos_x=[np.array(i / N, np.float32) for i in range(N)]),
    "nn": dict(resize_shorter=24, crop=(9, 9), mirror=1, interp_type=types.INTERP_NN),
    "cubic": dict(resize_shorter=40, crop=(30, 20), mirror=3, interp_type=types.INTERP_CUBIC),
    "lanczos_down": dict(size=(7, 9), crop=(5, 5), mirror=2, interp_type=types.INTERP_LANCZOS3),
    "no_antialias": dict(size=(7, 9), crop=(5, 5), antialias=False),
    "float_output": dict(size=(16, 18), crop=(8, 10), dtype=types.FLOAT),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fused_vs_dali(case):
    compare(**CASES[case])


@pytest.mark.parametrize("mirror", [0, 1, 2, 3, -1, 4])
def test_mirror_bits_vs_dali(mirror):
    compare(size=(16, 18), crop=(8, 10), crop_pos_x=0.2, mirror=mirror)


def test_float_and_one_channel_images_vs_dali():
    compare([im.astype(np.float32) for im in IMAGES], size=(12, 17), crop=(8, 10), mirror=1, tol=1e-2)
    compare([np.ascontiguousarray(im[..., :1]) for im in IMAGES], resize_shorter=21, crop=(9, 7), mirror=2)


@pytest.mark.parametrize("mirror", [0, 1, 2, 3])
def test_fused_is_resize_then_crop_then_flip(mirror):
    kwargs = dict(size=(16, 18))
    fused, _ = run(torchdali, "resize_crop_mirror", IMAGES, crop=(8, 10), crop_pos_x=0.3, crop_pos_y=0.8,
                   mirror=mirror, **kwargs)
    resized, _ = run(torchdali, "resize", IMAGES, **kwargs)
    cropped, _ = run(torchdali, "crop", resized, crop=(8, 10), crop_pos_x=0.3, crop_pos_y=0.8)
    flipped, _ = run(torchdali, "flip", cropped, horizontal=mirror & 1, vertical=mirror >> 1 & 1)
    assert_close(fused, flipped, tol=0.05)  # the same filters at the same places: off by a rounding at most


@pytest.mark.parametrize("mirror", [1, 2, 3])
def test_chw_gives_the_hwc_result(mirror):
    """1 flips horizontally and 2 vertically for CHW as for HWC, as DALI documents (DALI 2.4 itself
    flips CHW vertically for 1 and not at all for 2)."""
    kwargs = dict(resize_shorter=21, crop=(12, 10), crop_pos_x=0.2, mirror=mirror)
    hwc, _ = run(torchdali, "resize_crop_mirror", IMAGES, **kwargs)
    chw = run(torchdali, "resize_crop_mirror", [np.ascontiguousarray(im.transpose(2, 0, 1)) for im in IMAGES],
              layout="CHW", batch=True, **kwargs)
    assert chw.layout() == "CHW"
    for h, c in zip(hwc, as_numpy_batch(chw)):
        np.testing.assert_array_equal(c, h.transpose(2, 0, 1))


def test_one_output_size_is_a_dense_batch():
    assert_one_buffer(run(torchdali, "resize_crop_mirror", IMAGES, batch=True, size=(16, 18), crop=(8, 10)))


@pytest.mark.parametrize("kwargs, message", [
    (dict(size=(16, 18), crop_w=5), "`crop_w` and `crop_h` must be given together"),
    (dict(crop=(8, 10)), "exactly one way of giving the size"),
    (dict(size=(16, 18), crop=(8, 10), crop_pos_x=1.5), "'crop_pos_x' = 1.5: must be in"),
    (dict(resize_shorter=12, mode="stretch"), "mutually exclusive"),
    (dict(size=(16, 18), roi_start=(0, 0)), "'roi_start' and 'roi_end' must be given together"),
])
def test_bad_arguments_as_in_dali(kwargs, message):
    with pytest.raises(Exception):
        run(dali_or_skip(), "resize_crop_mirror", IMAGES, **kwargs)
    with pytest.raises(ValueError, match=f"resize_crop_mirror.*{message}"):
        run(torchdali, "resize_crop_mirror", IMAGES, **kwargs)


def test_refused_inputs():
    with pytest.raises(ValueError, match="resize_crop_mirror.*'crop' must be \\(height, width\\)"):
        run(torchdali, "resize_crop_mirror", IMAGES, size=(16, 18), crop=(8, 10, 3))
    with pytest.raises(ValueError, match="resize_crop_mirror.*layout 'DHWC' is not supported"):
        run(torchdali, "resize_crop_mirror", [np.zeros((2, 3, 4, 1), np.uint8)], layout="DHWC", size=(3, 3))


@requires_cuda
@pytest.mark.parametrize("case", ["crop_placed", "roi", "per_sample", "cubic"])
def test_gpu_matches_cpu(case):
    cpu, _ = run(torchdali, "resize_crop_mirror", IMAGES, **CASES[case])
    gpu, _ = run(torchdali, "resize_crop_mirror", IMAGES, device="gpu", **CASES[case])
    for c, g in zip(cpu, gpu):
        assert c.shape == g.shape and c.dtype == g.dtype
        assert np.abs(c.astype(float) - g.astype(float)).max() <= 1
