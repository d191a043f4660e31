"""fn.resize on volumes (DHWC and CDHW): DALI's output sizes in three axes (resize_x / y / z,
size, resize_shorter / longer, modes, ROI) and its separable filters, compared with NVIDIA
DALI on the CPU where installed: equal shapes, pixels within one level (the passes' order and
float rounding differ)."""
import numpy as np
import pytest

import torchdali
from torchdali import types

from conftest import dali_or_skip, requires_cuda, run_operator

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(5)
SHAPES = [(5, 9, 11), (7, 6, 13), (12, 20, 16)]  # (depth, height, width)


def volumes(layout, dtype=np.uint8, shapes=SHAPES):
    """Smooth volumes with a little noise, as scans are."""
    out = []
    for d, h, w in shapes:
        z, y, x = np.mgrid[:d, :h, :w]
        v = np.stack([128 + 100 * np.sin(x / 3 + k) * np.cos(y / 4 - k) * np.cos(z / 2) for k in range(3)], -1)
        v = np.clip(v + RNG.uniform(-5, 5, v.shape), 0, 255).astype(dtype)
        out.append(np.ascontiguousarray(v.transpose(3, 0, 1, 2)) if layout == "CDHW" else v)
    return out


CASES = {
    "size": dict(size=[4, 5, 6]),
    "per_axis_keeping_aspect": dict(resize_z=10, resize_y=12),
    "shorter": dict(resize_shorter=8),
    "longer_max_size": dict(resize_longer=18, max_size=[9, 30, 30]),
    "not_larger": dict(resize_x=9, mode="not_larger"),
    "cubic": dict(size=[3, 17, 7], interp_type=types.INTERP_CUBIC),
    "nearest": dict(size=[6, 6, 6], interp_type=types.INTERP_NN),
    "roi": dict(size=[4, 8, 8], roi_start=[1, 2, 3], roi_end=[4, 6, 9]),
    "flipped_roi_relative": dict(size=[5, 5, 5], roi_start=[1.0, 0.0, 0.2], roi_end=[0.0, 1.0, 0.9],
                                 roi_relative=True),
    "lanczos_float": dict(size=[5, 5, 5], dtype=types.FLOAT, interp_type=types.INTERP_LANCZOS3),
}


@pytest.mark.parametrize("layout", ["DHWC", "CDHW"])
@pytest.mark.parametrize("case", list(CASES))
def test_matches_dali(case, layout):
    dali = dali_or_skip()
    vols = volumes(layout)
    ours, out_layout = run_operator(torchdali, "resize", vols, layout=layout, **CASES[case])
    theirs, _ = run_operator(dali, "resize", vols, layout=layout, **CASES[case])
    assert out_layout == layout
    for o, t in zip(ours, theirs):
        assert o.shape == t.shape and o.dtype == t.dtype
        diff = np.abs(o.astype(np.float64) - t.astype(np.float64))
        assert diff.max() <= 1.0 and diff.mean() < 0.05


def test_a_size_that_keeps_the_volume_copies_it():
    vols = volumes("DHWC", np.float32)
    out, _ = run_operator(torchdali, "resize", vols, layout="DHWC", size=[5, 9, 11], interp_type=types.INTERP_LINEAR)
    np.testing.assert_allclose(out[0], vols[0], atol=1e-4)


def test_volume_arguments_are_checked():
    vols = volumes("DHWC")
    with pytest.raises(ValueError, match=r"resize \('.*'\): 'size' must have 3 values \(depth, height, width\)"):
        run_operator(torchdali, "resize", vols, layout="DHWC", size=[4, 5])
    with pytest.raises(ValueError, match="'roi_start'/'roi_end' must have 3 values"):
        run_operator(torchdali, "resize", vols, layout="DHWC", size=[4, 5, 6], roi_start=[0, 0], roi_end=[3, 3])
    images = [np.zeros((5, 6, 3), np.uint8)]
    with pytest.raises(ValueError, match="'resize_z' applies to volumes"):
        run_operator(torchdali, "resize", images, resize_z=3, resize_x=4)


@requires_cuda
@pytest.mark.parametrize("layout", ["DHWC", "CDHW"])
@pytest.mark.parametrize("case", ["size", "shorter", "roi"])
def test_gpu_matches_cpu(case, layout):
    vols = volumes(layout)
    cpu, _ = run_operator(torchdali, "resize", vols, layout=layout, **CASES[case])
    gpu, _ = run_operator(torchdali, "resize", vols, layout=layout, device="gpu", **CASES[case])
    for c, g in zip(cpu, gpu):
        assert c.shape == g.shape
        assert np.abs(c.astype(np.float64) - g.astype(np.float64)).max() <= 1.0
