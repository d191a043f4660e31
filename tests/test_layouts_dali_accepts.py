"""The geometric operators take every layout and element type that NVIDIA DALI's CPU operators
take (2-D HW, HWC with any channel count, CHW, sequences, volumes, sequences of volumes; label
and image types): for each combination DALI runs, torchdali runs too and gives the same
layout, shapes and type, and for the operators that only move values, the same values.
(paste is left out: DALI's CPU build crashes on it.)"""
import numpy as np
import pytest

import torchdali

from conftest import dali_or_skip, requires_cuda, run_operator

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

SHAPES = {"HW": (6, 7), "HWC": (6, 7, 5), "HWC, one channel": (6, 7, 1), "CHW": (5, 6, 7), "FHWC": (2, 6, 7, 3),
          "FCHW": (2, 3, 6, 7), "DHWC": (4, 6, 7, 2), "CDHW": (2, 4, 6, 7), "FDHWC": (2, 4, 6, 7, 1)}
DTYPES = [np.uint8, np.int16, np.int32, np.int64, np.uint16, np.float16, np.float32]
MOVES_VALUES = {"crop", "slice", "flip", "pad", "transpose"}


def arguments(op, layout):
    """Arguments for `op` on samples of `layout` (2-D ones, or 3-D where the samples are volumes)."""
    volume = "D" in layout
    spatial = len(layout.replace("F", "").replace("C", ""))
    return {
        "resize": dict(size=(3, 4, 5)) if volume else dict(resize_x=5, resize_y=4),
        "crop": dict(crop=(2, 3, 3)) if volume else dict(crop=(3, 3)),
        "slice": dict(rel_start=(0.1, 0.1), rel_shape=(0.5, 0.5), axis_names="HW"),
        "flip": dict(horizontal=1),
        "rotate": dict(angle=30.0, axis=[0.0, 1.0, 1.0]) if volume else dict(angle=30.0),
        "warp_affine": dict(matrix=[1, 0.1, 0, 0.5, 0, 1, 0, 0.3, 0, 0, 1, 0.2] if volume else [1, 0.1, 0, 0, 1, 0.5]),
        "crop_mirror_normalize": dict(crop=(2, 3, 3) if volume else (3, 3)),
        "pad": dict(fill_value=0, shape=(10, 12), axis_names="HW"),
        "transpose": dict(perm=list(range(len(layout.split(",")[0])))[::-1]),
    }[op] if spatial else {}


@pytest.mark.parametrize("op", ["resize", "crop", "slice", "flip", "rotate", "warp_affine", "crop_mirror_normalize",
                                "pad", "transpose"])
def test_what_dali_takes_torchdali_takes(op):
    dali = dali_or_skip()
    rng = np.random.default_rng(0)
    taken = 0
    for name, shape in SHAPES.items():
        layout = name.split(",")[0]
        for dtype in DTYPES:
            data = [rng.integers(0, 100, shape).astype(dtype) for _ in range(2)]
            kwargs = dict(arguments(op, layout), interp_type=dali.types.INTERP_NN) if op in ("rotate", "warp_affine") \
                else arguments(op, layout)
            try:
                theirs, their_layout = run_operator(dali, op, data, layout=layout, **kwargs)
            except (RuntimeError, ValueError, TypeError):
                continue  # DALI does not take it
            taken += 1
            ours, our_layout = run_operator(torchdali, op, data, layout=layout, **kwargs)
            assert our_layout == their_layout, (name, dtype)
            for a, b in zip(ours, theirs):
                assert a.shape == b.shape and a.dtype == b.dtype, (name, dtype, a.shape, b.shape, a.dtype, b.dtype)
                if op in MOVES_VALUES:
                    np.testing.assert_array_equal(a, b, err_msg=f"{name} {dtype}")
    assert taken >= 10  # the combinations DALI runs: enough to say something


@requires_cuda
@pytest.mark.parametrize("op", ["resize", "crop", "slice", "flip", "rotate", "warp_affine", "crop_mirror_normalize",
                                "pad", "transpose", "paste"])
def test_the_gpu_takes_what_the_cpu_takes(op):
    """Every combination the CPU operator runs, the GPU one runs too, with the same result
    (within one level where the operators filter)."""
    rng = np.random.default_rng(1)
    taken = 0
    for name, shape in SHAPES.items():
        layout = name.split(",")[0]
        kwargs = dict(ratio=2.0, fill_value=0) if op == "paste" else arguments(op, layout)
        for dtype in DTYPES:
            data = [rng.integers(0, 100, shape).astype(dtype) for _ in range(2)]
            try:
                cpu, cpu_layout = run_operator(torchdali, op, data, layout=layout, **kwargs)
            except (ValueError, TypeError):
                continue  # not taken: tests elsewhere check the error
            taken += 1
            gpu, gpu_layout = run_operator(torchdali, op, data, layout=layout, device="gpu", **kwargs)
            assert gpu_layout == cpu_layout
            for a, b in zip(gpu, cpu):
                assert a.shape == b.shape and a.dtype == b.dtype, (name, dtype)
                tolerance = 0 if op in MOVES_VALUES or op == "paste" else 1
                assert np.abs(a.astype(np.float64) - b.astype(np.float64)).max() <= tolerance, (name, dtype)
    assert taken >= 6  # paste takes the fewest: HWC images of uint8, float16 and float32
