"""fn.crop on volumes (DHWC and CDHW): windows in depth, height and width, placed, padded and
trimmed as DALI's crop does; compared with a NumPy reference and, where installed, NVIDIA
DALI on the CPU."""
import numpy as np
import pytest

import torchdali
from torchdali import types

from conftest import dali_or_skip, requires_cuda, run_operator

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(3)
SHAPES = [(5, 9, 11), (7, 6, 13), (3, 4, 5), (9, 12, 10)]  # (depth, height, width)


def volumes(layout, dtype, channels=3, shapes=SHAPES):
    out = []
    for d, h, w in shapes:
        v = RNG.integers(-50, 300, (d, h, w, channels))
        v = v.astype(dtype) if np.issubdtype(dtype, np.floating) else np.clip(v, *_range(dtype)).astype(dtype)
        out.append(np.ascontiguousarray(v.transpose(3, 0, 1, 2)) if layout == "CDHW" else v)
    return out


def _range(dtype):
    info = np.iinfo(dtype)
    return info.min, info.max


def run(lib, vols, layout, **kwargs):
    out, out_layout = run_operator(lib, "crop", vols, layout=layout, **kwargs)
    assert out_layout == layout
    return out


def reference(vol, layout, crop, pos=(0.5, 0.5, 0.5), fill=0.0, policy="pad"):
    """The window of one volume, its anchor as DALI places it (float32 position times the room,
    rounded half away from zero); outside the volume: `fill` (pad) or clipped (trim)."""
    v = vol.transpose(1, 2, 3, 0) if layout == "CDHW" else vol
    size = np.array(v.shape[:3])
    ext = np.array([c if c else s for c, s in zip(crop, size)])
    at = np.float32(pos).astype(np.float64) * (size - ext)
    lo = (np.sign(at) * np.floor(np.abs(at) + 0.5)).astype(np.int64)
    if policy == "trim_to_shape":
        start = np.maximum(lo, 0)
        lo, ext = start, np.minimum(lo + ext, size) - start
    out = np.full(tuple(ext) + v.shape[3:], fill, v.dtype)
    src = [slice(max(a, 0), min(a + e, s)) for a, e, s in zip(lo, ext, size)]
    dst = [slice(s.start - a, s.stop - a) for s, a in zip(src, lo)]
    out[tuple(dst)] = v[tuple(src)]
    return out.transpose(3, 0, 1, 2) if layout == "CDHW" else out


CASES = {
    "dhw": dict(crop=(3, 4, 5)),
    "hw_keeps_depth": dict(crop=(4, 5), crop_pos_x=0.1, crop_pos_y=0.9),
    "separate_extents": dict(crop_d=2, crop_h=3, crop_w=4, crop_pos_z=0.8),
    "pad": dict(crop=(8, 10, 14), crop_pos_z=0.3, out_of_bounds_policy="pad", fill_values=[7.0]),
    "trim": dict(crop=(8, 10, 14), crop_pos_x=1.0, out_of_bounds_policy="trim_to_shape"),
    "truncate": dict(crop=(2, 3, 3), crop_pos_z=0.5, crop_pos_y=0.5, rounding="truncate"),
    "to_float": dict(crop=(3, 3, 3), dtype=types.FLOAT),
}


@pytest.mark.parametrize("layout", ["DHWC", "CDHW"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float32], ids=["uint8", "int32", "float32"])
@pytest.mark.parametrize("case", list(CASES))
def test_matches_dali(case, dtype, layout):
    dali = dali_or_skip()
    vols = volumes(layout, dtype)
    ours = run(torchdali, vols, layout, **CASES[case])
    theirs = run(dali, vols, layout, **CASES[case])
    for o, t in zip(ours, theirs):
        assert o.dtype == t.dtype and o.shape == t.shape
        np.testing.assert_array_equal(o, t)


@pytest.mark.parametrize("layout", ["DHWC", "CDHW"])
def test_matches_reference(layout):
    vols = volumes(layout, np.uint8)
    kw = dict(crop=(6, 8, 12), crop_pos_z=0.2, crop_pos_y=0.7, crop_pos_x=0.45)
    for policy in ("pad", "trim_to_shape"):
        out = run(torchdali, vols, layout, out_of_bounds_policy=policy, fill_values=[9.0], **kw)
        for o, v in zip(out, vols):
            np.testing.assert_array_equal(o, reference(v, layout, kw["crop"], (0.2, 0.7, 0.45), 9.0, policy))


def test_per_sample_positions_and_extents_match_dali():
    dali = dali_or_skip()
    vols = volumes("DHWC", np.uint8)
    arg_inputs = dict(crop_pos_z=[np.float32(v) for v in (0.0, 0.25, 1.0, 0.6)],
                      crop_d=[np.float32(v) for v in (1, 2, 3, 4)])
    ours = run(torchdali, vols, "DHWC", crop_h=3, crop_w=4, arg_inputs=arg_inputs)
    theirs = run(dali, vols, "DHWC", crop_h=3, crop_w=4, arg_inputs=arg_inputs)
    for o, t in zip(ours, theirs):
        np.testing.assert_array_equal(o, t)


def test_one_size_batch_is_one_tensor():
    vols = volumes("DHWC", np.float32, shapes=[(6, 7, 8)] * 3)
    out, _ = run_operator(torchdali, "crop", vols, layout="DHWC", crop=(2, 3, 4))
    assert [o.shape for o in out] == [(2, 3, 4, 3)] * 3
    for o, v in zip(out, vols):
        np.testing.assert_array_equal(o, reference(v, "DHWC", (2, 3, 4)))


def test_bad_volume_crops_are_named():
    vols = volumes("DHWC", np.uint8)
    with pytest.raises(ValueError, match=r"crop \('.*'\): sample 2: the crop window 4x4x4 at .* is outside the "
                                         r"3x4x5 volume"):
        run(torchdali, vols, "DHWC", crop=(4, 4, 4))
    with pytest.raises(ValueError, match="'crop_d' needs the height and width of the window too"):
        run(torchdali, vols, "DHWC", crop_d=2)
    with pytest.raises(ValueError, match="argument 'crop' must be \\(depth, height, width\\) or \\(height, width\\)"):
        run(torchdali, vols, "DHWC", crop=(1, 2, 3, 4))


@requires_cuda
@pytest.mark.parametrize("layout", ["DHWC", "CDHW"])
@pytest.mark.parametrize("case", ["dhw", "pad", "to_float"])
def test_gpu_equals_cpu(case, layout):
    vols = volumes(layout, np.uint8)
    cpu = run(torchdali, vols, layout, **CASES[case])
    gpu, _ = run_operator(torchdali, "crop", vols, layout=layout, device="gpu", **CASES[case])
    for c, g in zip(cpu, gpu):
        np.testing.assert_array_equal(c, g)


# --- crop_mirror_normalize on volumes ---

CMN_CASES = {
    "normalize_mirror": dict(crop=(3, 4, 5), output_layout="DHWC", mean=[10, 20, 30], std=[2, 3, 4], mirror=True,
                             crop_pos_z=0.2),
    "to_cdhw_padded_channels": dict(crop=(3, 4, 5), output_layout="CDHW", pad_output=True),
    "pad_fill_mirror": dict(crop=(8, 4, 5), output_layout="DHWC", out_of_bounds_policy="pad", fill_values=[1, 2, 3],
                            mirror=True),
    "uint8_out": dict(crop=(2, 3), output_layout="CDHW", dtype=types.UINT8, mean=[100.0], std=[0.5]),
    "float16_scale_shift": dict(output_layout="DHWC", dtype=types.FLOAT16, scale=2.0, shift=3.0),
}


@pytest.mark.parametrize("layout", ["DHWC", "CDHW"])
@pytest.mark.parametrize("case", list(CMN_CASES))
def test_crop_mirror_normalize_matches_dali(case, layout):
    dali = dali_or_skip()
    vols = volumes(layout, np.uint8)
    ours, ours_layout = run_operator(torchdali, "crop_mirror_normalize", vols, layout=layout, **CMN_CASES[case])
    theirs, their_layout = run_operator(dali, "crop_mirror_normalize", vols, layout=layout, **CMN_CASES[case])
    assert ours_layout == their_layout
    for o, t in zip(ours, theirs):
        assert o.dtype == t.dtype and o.shape == t.shape
        np.testing.assert_array_equal(o, t)


def test_crop_mirror_normalize_per_sample_mirror_on_one_size_batch_matches_reference():
    vols = volumes("DHWC", np.float32, shapes=[(4, 5, 6)] * 4)
    mirror = [np.int32(v) for v in (0, 1, 1, 0)]
    out, _ = run_operator(torchdali, "crop_mirror_normalize", vols, layout="DHWC", crop=(2, 3, 4),
                          output_layout="DHWC", mean=[5.0], std=[2.0], arg_inputs=dict(mirror=mirror))
    for o, v, m in zip(out, vols, mirror):
        expected = (reference(v, "DHWC", (2, 3, 4)) - 5.0) / 2.0
        np.testing.assert_allclose(o, expected[:, :, ::-1] if m else expected, rtol=1e-6)


def test_crop_mirror_normalize_layouts_must_fit():
    with pytest.raises(ValueError, match="output_layout 'CHW' does not fit DHWC"):
        run_operator(torchdali, "crop_mirror_normalize", volumes("DHWC", np.uint8), layout="DHWC", crop=(2, 2, 2))
    with pytest.raises(ValueError, match="output_layout 'DHWC' does not fit HWC"):
        run_operator(torchdali, "crop_mirror_normalize", [np.zeros((5, 5, 3), np.uint8)], output_layout="DHWC")


@requires_cuda
@pytest.mark.parametrize("case", ["normalize_mirror", "pad_fill_mirror"])
def test_crop_mirror_normalize_gpu_equals_cpu(case):
    vols = volumes("DHWC", np.uint8)
    cpu, _ = run_operator(torchdali, "crop_mirror_normalize", vols, layout="DHWC", **CMN_CASES[case])
    gpu, _ = run_operator(torchdali, "crop_mirror_normalize", vols, layout="DHWC", device="gpu", **CMN_CASES[case])
    for c, g in zip(cpu, gpu):
        np.testing.assert_allclose(c, g, rtol=1e-6, atol=1e-5)
