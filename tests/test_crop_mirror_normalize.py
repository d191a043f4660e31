"""fn.crop_mirror_normalize in a pipeline: against a NumPy reference and, where
installed, NVIDIA DALI on the same images."""
import numpy as np
import pytest

import torchdali
from torchdali import fn, types

from conftest import as_numpy_batch, dali_or_skip, requires_cuda

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(0)
IMAGES = [RNG.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((17, 23), (31, 9), (12, 12), (25, 40))]
MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]

CASES = {
    "imagenet": dict(crop=(7, 5), mean=MEAN, std=STD, dtype=types.FLOAT, output_layout=types.NCHW),
    "hwc_uint8_scale": dict(crop=(5, 9), mean=[10.0], std=[2.0], scale=0.5, shift=3.0, dtype=types.UINT8,
                            output_layout="HWC", crop_pos_x=0.25, crop_pos_y=0.8),
    "fp16_pad_output": dict(crop=(8, 8), mean=MEAN, std=STD, dtype=types.FLOAT16, pad_output=True),
    "no_crop": dict(mean=[128.0], std=[64.0]),
    "pad_policy": dict(crop=(20, 30), out_of_bounds_policy="pad", fill_values=[1.0, 2.0, 3.0],
                       output_layout="HWC"),
    "trim_policy": dict(crop=(20, 30), out_of_bounds_policy="trim_to_shape", crop_pos_x=1.0),
    "legacy_output_dtype": dict(crop=(4, 4), output_dtype=types.FLOAT, image_type=types.RGB),
    # float64 ties: 0.7 * 25 (sample 1's rows) and 0.7 * 5 (its columns) are 17.5 and 3.5,
    # but 17 and 3 with the position as a float32, as DALI takes it.
    "float32_anchor_ties": dict(crop=(6, 4), crop_pos_y=0.7, crop_pos_x=0.7, output_layout="HWC"),
}


def run(lib, kwargs, device="cpu", mirror=True, layout="HWC"):
    batch = IMAGES if layout == "HWC" else [np.ascontiguousarray(im.transpose(2, 0, 1)) for im in IMAGES]

    @lib.pipeline_def(batch_size=len(IMAGES), num_threads=2, device_id=None if device == "cpu" else 0, seed=1)
    def pipe():
        images = lib.fn.external_source(lambda: batch, layout=layout)
        if device == "gpu":
            images = images.gpu()
        flags = lib.fn.external_source(lambda: [np.int32(k % 2) for k in range(len(IMAGES))])
        return lib.fn.crop_mirror_normalize(images, mirror=flags if mirror else False, **kwargs)

    p = pipe()
    p.build()
    return p.run()[0]


def reference(img, crop=None, crop_pos_x=0.5, crop_pos_y=0.5, mirror=False, mean=(0.0,), std=(1.0,),
              scale=1.0, shift=0.0, dtype=types.FLOAT, output_layout="CHW", pad_output=False,
              out_of_bounds_policy="error", fill_values=(0.0,), output_dtype=None, image_type=None):
    h, w, c = img.shape
    ch, cw = crop if crop else (h, w)
    # As DALI: the position as a float32 (0.7 * 195 = 136.5 but float32(0.7) * 195 = 136.499998),
    # rounded half away from zero.
    ay, ax = (float(np.float32(pos)) * room for pos, room in ((crop_pos_y, h - ch), (crop_pos_x, w - cw)))
    y = int(np.copysign(np.floor(abs(ay) + 0.5), ay))
    x = int(np.copysign(np.floor(abs(ax) + 0.5), ax))
    if out_of_bounds_policy == "trim_to_shape":
        y0, x0 = max(y, 0), max(x, 0)
        ch, cw, y, x = min(y + ch, h) - y0, min(x + cw, w) - x0, y0, x0
    out_c = 4 if pad_output and c == 3 else c
    fill = np.broadcast_to(np.asarray(fill_values, np.float64), (c,)) if len(fill_values) in (1, c) else fill_values
    out = np.zeros((ch, cw, out_c))
    out[:, :, :c] = fill
    for r in range(ch):
        for q in range(cw):
            sy, sx = y + r, x + q
            if 0 <= sy < h and 0 <= sx < w:
                out[r, q, :c] = (img[sy, sx] - np.asarray(mean)) / np.asarray(std) * scale + shift
    if mirror:
        out = out[:, ::-1]
    np_type = types.to_numpy_type(dtype)
    if np.issubdtype(np_type, np.integer):
        info = np.iinfo(np_type)
        out = np.clip(np.where(out >= 0, np.floor(out + 0.5), np.ceil(out - 0.5)), info.min, info.max)
    out = out.astype(np_type)
    return out.transpose(2, 0, 1) if output_layout == "CHW" else out


@pytest.mark.parametrize("case", list(CASES))
def test_against_reference(case):
    out = run(torchdali, CASES[case])
    kwargs = dict(CASES[case])
    if "output_dtype" in kwargs:
        kwargs["dtype"] = kwargs.pop("output_dtype")
    for i, got in enumerate(as_numpy_batch(out)):
        ref = reference(IMAGES[i], mirror=bool(i % 2), **kwargs)
        assert got.shape == ref.shape and got.dtype == ref.dtype
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), atol=1e-2, rtol=1e-3)


@pytest.mark.parametrize("case", [c for c in CASES if c != "trim_policy"])
def test_against_dali(case):
    nvidia_dali = dali_or_skip()
    import nvidia.dali.fn  # noqa: F401
    ours = as_numpy_batch(run(torchdali, CASES[case]))
    theirs = as_numpy_batch(run(nvidia_dali, CASES[case]))
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert np.abs(a.astype(np.float64) - b.astype(np.float64)).mean() < 1e-2


@pytest.mark.parametrize("case", ["imagenet", "hwc_uint8_scale", "pad_policy", "no_crop"])
def test_chw_input_gives_the_hwc_result(case):
    hwc = as_numpy_batch(run(torchdali, CASES[case]))
    chw = as_numpy_batch(run(torchdali, CASES[case], layout="CHW"))
    for a, b in zip(hwc, chw):
        np.testing.assert_array_equal(a, b)


FILL_CASES = {
    "uint8_fractional_fill": dict(crop=(20, 30), out_of_bounds_policy="pad", dtype=types.UINT8,
                                  fill_values=[3.7, 100.2, 250.9], output_layout="HWC"),
    "chw_input_fill": dict(crop=(20, 30), out_of_bounds_policy="pad", dtype=types.FLOAT,
                           fill_values=[0.5], mean=MEAN, std=STD),
}


@pytest.mark.parametrize("case", list(FILL_CASES))
def test_fill_values_and_chw_input_against_dali(case):
    nvidia_dali = dali_or_skip()
    layout = "CHW" if case.startswith("chw") else "HWC"
    ours = as_numpy_batch(run(torchdali, FILL_CASES[case], layout=layout))
    theirs = as_numpy_batch(run(nvidia_dali, FILL_CASES[case], layout=layout))
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), atol=1e-5)


@pytest.mark.parametrize("lib", ["torchdali", "dali"])
def test_anchor_is_computed_in_float32_as_dali(lib):
    # crop 128 rows of 323 at 0.7: 0.7 * 195 is 136.5 in float64, 136.49998 in float32 (row 136).
    lib = torchdali if lib == "torchdali" else dali_or_skip()
    rows = np.arange(323, dtype=np.uint8)[:, None, None].repeat(100, 1).repeat(3, 2)

    @lib.pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        x = lib.fn.external_source(lambda: [rows], layout="HWC")
        return lib.fn.crop_mirror_normalize(x, crop=(128, 96), crop_pos_y=0.7, dtype=lib.types.UINT8,
                                            output_layout="HWC")

    p = pipe()
    p.build()
    (out,) = as_numpy_batch(p.run()[0])
    assert out[0, 0, 0] == 136


def test_deprecated_arguments_warn():
    with pytest.warns(DeprecationWarning, match="output_dtype.*dtype"):
        fn.crop_mirror_normalize(fn.random.uniform(), output_dtype=types.FLOAT)
    with pytest.warns(DeprecationWarning, match="image_type.*no longer used"):
        fn.crop_mirror_normalize(fn.random.uniform(), image_type=types.RGB)


def test_dense_output_is_one_tensor():
    out = run(torchdali, CASES["imagenet"])
    assert out.is_dense_tensor() and out.as_torch().shape == (4, 3, 7, 5) and out.layout() == "CHW"


def test_batches_of_one_size_each_take_their_own_windows():
    """The windows of a batch whose images share a size are kept for that size: batches of
    changing sizes (and counts) still get each their own windows, and a window that leaves its
    image is still an error."""
    sizes = [(4, (20, 30)), (4, (11, 9)), (3, (20, 30)), (4, (20, 30)), (4, (6, 5)), (4, (11, 9)), (4, (5, 5))]
    batches = [[RNG.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(n)] for n, (h, w) in sizes]
    kwargs = dict(crop=(6, 5), crop_pos_x=0.3, crop_pos_y=0.8, output_layout="HWC")

    @torchdali.pipeline_def(batch_size=4, num_threads=1, device_id=None, prefetch_queue_depth=1)
    def pipe():
        return fn.crop_mirror_normalize(fn.external_source(source=iter(batches), layout="HWC"), **kwargs)

    p = pipe()
    p.build()
    for batch in batches[:-1]:
        out = as_numpy_batch(p.run()[0])
        assert len(out) == len(batch)
        for img, got in zip(batch, out):
            np.testing.assert_allclose(got, reference(img, **kwargs), atol=1e-4)
    with pytest.raises(ValueError, match="outside the 5x5 image"):
        p.run()


def test_window_outside_image_is_an_error_by_default():
    with pytest.raises(ValueError, match="crop_mirror_normalize.*sample 0.*outside the 17x23 image"):
        run(torchdali, dict(crop=(20, 30)))


def test_bad_arguments():
    with pytest.raises(ValueError, match="argument 'mean' has 2 values for 3 channels"):
        run(torchdali, dict(crop=(4, 4), mean=[1.0, 2.0]))
    with pytest.raises(ValueError, match="argument 'std'.*must not contain 0"):
        fn.crop_mirror_normalize(fn.random.uniform(), std=[0.0])
    with pytest.raises(ValueError, match="argument 'crop' = .*must be positive"):
        fn.crop_mirror_normalize(fn.random.uniform(), crop=(-1, 4))
    with pytest.raises(ValueError, match=r"sample 0: crop size \(inf, 4.0\) is not valid: sizes must be finite"):
        run(torchdali, dict(crop=(float("inf"), 4)))
    with pytest.raises(ValueError, match="output_layout"):
        fn.crop_mirror_normalize(fn.random.uniform(), output_layout="WHC")


@requires_cuda
@pytest.mark.parametrize("case", list(CASES))
def test_gpu_matches_cpu(case):
    cpu = as_numpy_batch(run(torchdali, CASES[case]))
    gpu = as_numpy_batch(run(torchdali, CASES[case], device="gpu"))
    for a, b in zip(cpu, gpu):
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), atol=1e-2)
