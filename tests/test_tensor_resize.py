"""fn.tensor_resize against NVIDIA DALI: output shapes, types and layouts exactly, pixels
within the tolerance of test_resize.py, on images, plain tensors, volumes and sequences."""
import numpy as np
import pytest

import torchdali
from torchdali import types

from conftest import as_numpy_batch, assert_one_buffer, constant_source, dali_or_skip, requires_cuda

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(0)
IMAGES = [RNG.integers(0, 256, s, dtype=np.uint8) for s in ((20, 30, 3), (11, 7, 3), (40, 9, 3), (1, 1, 3))]
VOLUMES = [RNG.integers(0, 256, s, dtype=np.uint8) for s in ((4, 5, 6, 2), (7, 3, 9, 2))]
PER_SAMPLE_SIZES = [np.array([5 + i, 6 + 2 * i], np.float32) for i in range(len(IMAGES))]


def _lib_value(lib, v):
    return getattr(lib.types, v.name) if isinstance(v, (types.DALIDataType, types.DALIInterpType)) else v


def run(lib, images, layout="", device="cpu", batch=False, **kwargs):
    """lib.fn.tensor_resize's outputs as NumPy arrays, and the output layout (or, with `batch`,
    the TensorList); per-sample lists of arrays become argument inputs."""
    @lib.pipeline_def(batch_size=len(images), num_threads=2, device_id=None if device == "cpu" else 0, seed=1)
    def pipe():
        x = lib.fn.external_source(constant_source(images), layout=layout)
        named = {k: lib.fn.external_source(constant_source(v)) for k, v in kwargs.items()
                 if isinstance(v, list) and v and isinstance(v[0], np.ndarray)}
        consts = {k: _lib_value(lib, v) for k, v in kwargs.items() if k not in named}
        return lib.fn.tensor_resize(x.gpu() if device == "gpu" else x, **named, **consts)

    p = pipe()
    p.build()
    out = p.run()[0]
    return out if batch else (as_numpy_batch(out), out.layout())


def compare(images, layout="", tol=1.0, **kwargs):
    ref, ref_layout = run(dali_or_skip(), images, layout, **kwargs)
    got, got_layout = run(torchdali, images, layout, **kwargs)
    assert got_layout == ref_layout
    for i, (r, g) in enumerate(zip(ref, got)):
        assert g.shape == r.shape and g.dtype == r.dtype, (i, g.shape, r.shape, g.dtype, r.dtype, kwargs)
        if r.size:
            mad = np.abs(g.astype(np.float64) - r.astype(np.float64)).mean()
            assert mad < tol, (i, mad, kwargs)
    return got


CASES = {
    "sizes_all_axes": dict(sizes=[10, 12, 3]),
    "sizes_and_channels": dict(sizes=[10, 12, 5]),
    "sizes_axes": dict(sizes=[10, 12], axes=[0, 1]),
    "scales_axes": dict(scales=[0.5, 1.5], axes=[0, 1]),
    "per_sample_sizes": dict(sizes=PER_SAMPLE_SIZES, axes=[0, 1]),
    "one_axis": dict(sizes=[13], axes=[1]),
    "first_axis": dict(sizes=[13], axes=[0]),
    "negative_axis": dict(sizes=[13], axes=[-2]),
    "single_value_for_two_axes": dict(sizes=[9], axes=[0, 1]),
    "flip_by_negative_size": dict(sizes=[-10, 12], axes=[0, 1]),
    "not_larger": dict(sizes=[10, 10, 0], mode="not_larger"),
    "not_smaller_max": dict(sizes=[10, 10, 0], mode="not_smaller", max_size=[30, 30, 5]),
    "stretch": dict(sizes=[10, 0, 0], mode="stretch"),
    "default_one_given": dict(sizes=[10, 0, 0]),
    "default_two_given": dict(sizes=[10, 14, 0]),  # the third takes their scales' geometric mean
    "max_size": dict(sizes=[0, 40, 0], max_size=[30, 100, 100]),
    "roi_relative": dict(sizes=[10, 12], axes=[0, 1], roi_start=[0.1, 0.2], roi_end=[0.9, 0.5], roi_relative=True),
    "roi_flipped": dict(sizes=[10, 12], axes=[0, 1], roi_start=[0.9, 0.2], roi_end=[0.1, 0.8], roi_relative=True),
    "alignment_all_axes": dict(scales=[0.33, 0.77, 1], alignment=[0, 1, 0.5]),
    "alignment_one_value": dict(scales=[0.33, 0.77], axes=[0, 1], alignment=0),
    "truncate": dict(scales=[0.33, 0.77], axes=[0, 1], size_rounding="truncate"),
    "ceil": dict(scales=[0.33, 0.77], axes=[0, 1], size_rounding="ceil"),
    "no_subpixel": dict(scales=[0.33, 0.77], axes=[0, 1], subpixel_scale=False),
    "nn": dict(sizes=[17, 5], axes=[0, 1], interp_type=types.INTERP_NN),
    "cubic": dict(sizes=[17, 50], axes=[0, 1], interp_type=types.INTERP_CUBIC),
    "lanczos": dict(sizes=[17, 5], axes=[0, 1], interp_type=types.INTERP_LANCZOS3),
    "gaussian": dict(sizes=[17, 5], axes=[0, 1], interp_type=types.INTERP_GAUSSIAN),
    "min_mag": dict(sizes=[5, 50], axes=[0, 1], min_filter=types.INTERP_NN, mag_filter=types.INTERP_CUBIC),
    "no_antialias": dict(sizes=[5, 4], axes=[0, 1], antialias=False),
    "float_output": dict(sizes=[10, 12], axes=[0, 1], dtype=types.FLOAT),
}


@pytest.mark.parametrize("case", list(CASES))
def test_images_vs_dali(case):
    compare(IMAGES, **CASES[case])


def test_absolute_roi_vs_dali():
    images = [im for im in IMAGES if im.shape[0] >= 9 and im.shape[1] >= 7]  # the ROI inside each image
    compare(images, sizes=[10, 12], axes=[0, 1], roi_start=[8, 2], roi_end=[1, 6.5])
    compare(images, sizes=[0, 9, 0], roi_start=[2.5, 1, 0], roi_end=[9, 6, 3])


def test_axis_names_follow_the_layout_vs_dali():
    compare(IMAGES, "HWC", scales=[0.5, 1.5], axis_names="HW")
    compare(IMAGES, "HWC", sizes=[7], axis_names="W")


@pytest.mark.parametrize("kwargs", [dict(sizes=[3, 7, 9], axes=[0, 1, 2]), dict(sizes=[3, 9], axes=[0, 2]),
                                    dict(sizes=[9, 2, 5], axes=[0, 1, 2], interp_type=types.INTERP_CUBIC),
                                    dict(scales=[1.7, 0.6], axes=[0, 1], interp_type=types.INTERP_NN)])
def test_volumes_vs_dali(kwargs):
    compare(VOLUMES, **kwargs)


def test_sequences_vs_dali():
    seq = [RNG.integers(0, 256, (3, 8, 9, 3), dtype=np.uint8), RNG.integers(0, 256, (2, 5, 12, 3), dtype=np.uint8)]
    compare(seq, "FHWC", sizes=[4, 5], axis_names="HW")
    compare(seq, "FHWC", sizes=[4, 5, 6], axis_names="FHW")


def test_plain_tensors_vs_dali():
    signals = [RNG.random(10).astype(np.float32), RNG.random(5).astype(np.float32) * 3]
    got = compare(signals, sizes=[7], tol=1e-3)
    assert [g.shape for g in got] == [(7,), (7,)]
    compare([RNG.integers(0, 256, (8, 9), dtype=np.uint8)], sizes=[3, 4])
    compare([RNG.integers(-3000, 3000, (8, 9)).astype(np.int16)], sizes=[3, 14])
    compare([RNG.integers(0, 60000, (8, 9)).astype(np.uint16)], sizes=[13, 4])
    compare([im.astype(np.float32) for im in IMAGES], sizes=[17, 5], axes=[0, 1], tol=1e-2)


def test_empty_samples_vs_dali():
    got = compare([np.zeros((0, 5, 3), np.uint8), IMAGES[0]], sizes=[4, 4], axes=[0, 1])
    assert got[0].shape == (0, 4, 3) and got[1].shape == (4, 4, 3)


def test_one_output_shape_is_a_dense_batch():
    assert_one_buffer(run(torchdali, IMAGES, batch=True, sizes=[9, 8], axes=[0, 1]))
    out = run(torchdali, VOLUMES, batch=True, sizes=[3, 7, 9], axes=[0, 1, 2])
    assert [tuple(s) for s in out.shape()] == [(3, 7, 9, 2)] * 2


@pytest.mark.parametrize("images, kwargs, message", [
    (IMAGES, dict(sizes=[10, 12, 3], scales=[1, 1, 1]), "exactly one of `sizes` and `scales`"),
    (IMAGES, dict(), "exactly one of `sizes` and `scales`"),
    (IMAGES, dict(sizes=[10, 12]), "`sizes` must have one value or one per axis"),
    (IMAGES, dict(scales=[2, 2, 1], mode="not_larger"), "`scales` cannot be used"),
    (IMAGES, dict(scales=[0.5], axes=[5]), r"axes \[5\] out of range"),
    (IMAGES, dict(scales=[0.5], axis_names="D"), "axis_names 'D'"),
    (IMAGES, dict(scales=[0.5, 2], axes=[0, 1], axis_names="HW"), "mutually exclusive"),
    (IMAGES, dict(sizes=[10, 12], axes=[0, 1], roi_start=[0, 0]), "roi_start"),
    (IMAGES, dict(sizes=[10, 12, 3], dtype=types.INT16), "dtype must be the input's"),
    (IMAGES, dict(sizes=[10, 12, 3], size_rounding="floor"), "size_rounding"),
    (VOLUMES, dict(sizes=[3, 7, 9, 3]), "at most 3 adjacent dims"),
    ([np.zeros((4, 4), np.float64)], dict(sizes=[2, 2]), "FLOAT64 is not supported"),
])
def test_bad_arguments_as_in_dali(images, kwargs, message):
    layout = "HWC" if "axis_names" in kwargs else ""
    with pytest.raises(Exception):
        run(dali_or_skip(), images, layout, **kwargs)
    with pytest.raises((ValueError, TypeError, IndexError), match=f"tensor_resize.*{message}"):
        run(torchdali, images, layout, **kwargs)


@requires_cuda
@pytest.mark.parametrize("images, kwargs", [(IMAGES, dict(sizes=[17, 50], axes=[0, 1], interp_type=types.INTERP_CUBIC)),
                                            (IMAGES, dict(sizes=PER_SAMPLE_SIZES, axes=[0, 1])),
                                            (VOLUMES, dict(sizes=[3, 7, 9], axes=[0, 1, 2]))])
def test_gpu_matches_cpu(images, kwargs):
    cpu, _ = run(torchdali, images, **kwargs)
    gpu, _ = run(torchdali, images, device="gpu", **kwargs)
    for c, g in zip(cpu, gpu):
        assert c.shape == g.shape and c.dtype == g.dtype
        assert np.abs(c.astype(float) - g.astype(float)).max() <= 1
