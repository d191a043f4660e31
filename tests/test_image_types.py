"""DALI's image types beyond uint8 / float16 / float32 in the operators that take them:
resize (int16, uint16), crop (uint16, and the integer label types), crop_mirror_normalize
(uint16, int16, int32). Compared with NVIDIA DALI on the CPU where installed."""
import numpy as np
import pytest

import torchdali
from torchdali import types

from conftest import dali_or_skip, requires_cuda, run_operator

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(11)
SIZES = [(17, 23), (31, 9), (12, 12), (40, 25)]
RANGES = {np.uint16: (0, 65535), np.int16: (-32768, 32767), np.int32: (-(1 << 24), 1 << 24)}


def images(dtype):
    """Smooth images spanning most of the type's range, with some noise."""
    lo, hi = RANGES[dtype]
    out = []
    for h, w in SIZES:
        y, x = np.mgrid[:h, :w]
        base = np.stack([np.sin(x / 4 + k) * np.cos(y / 5 - k) for k in range(3)], -1)
        v = (base * 0.45 + 0.5) * (hi - lo) + lo + RNG.uniform(-50, 50, base.shape)
        out.append(np.clip(v, lo, hi).astype(dtype))
    return out


def compare(op, image_type, max_diff, **kwargs):
    dali = dali_or_skip()
    ims = images(image_type)
    ours, _ = run_operator(torchdali, op, ims, **kwargs)
    theirs, _ = run_operator(dali, op, ims, **kwargs)
    for o, t in zip(ours, theirs):
        assert o.shape == t.shape and o.dtype == t.dtype
        assert np.abs(o.astype(np.float64) - t.astype(np.float64)).max() <= max_diff


@pytest.mark.parametrize("dtype", [np.int16, np.uint16], ids=["int16", "uint16"])
@pytest.mark.parametrize("kwargs", [dict(size=[11, 30]), dict(resize_shorter=7, interp_type=types.INTERP_CUBIC),
                                    dict(size=[20, 20], dtype=types.FLOAT), dict(size=[9, 9], interp_type=types.INTERP_NN)],
                         ids=["linear", "cubic_shorter", "to_float", "nearest"])
def test_resize_matches_dali(dtype, kwargs):
    # float results within float32 rounding of 16-bit values; integer ones within one level
    compare("resize", dtype, 1.0 if kwargs.get("dtype") is None else 0.05, **kwargs)


@pytest.mark.parametrize("kwargs", [dict(crop=(6, 7), crop_pos_x=0.3), dict(crop=(20, 30), out_of_bounds_policy="pad",
                                                                           fill_values=[70000.0])],
                         ids=["crop", "pad_saturated_fill"])
def test_crop_uint16_matches_dali(kwargs):
    compare("crop", np.uint16, 0.0, **kwargs)


@pytest.mark.parametrize("dtype", [np.uint16, np.int16, np.int32], ids=["uint16", "int16", "int32"])
def test_crop_mirror_normalize_matches_dali(dtype):
    lo, hi = RANGES[dtype]
    scale = (hi - lo) / 2.0
    compare("crop_mirror_normalize", dtype, 1e-4, crop=(8, 6), mean=[lo + scale], std=[scale], mirror=True)


def test_resize_keeps_the_16_bit_type_and_refuses_other_outputs():
    out, _ = run_operator(torchdali, "resize", images(np.uint16), size=[5, 5])
    assert all(o.dtype == np.uint16 for o in out)
    with pytest.raises(ValueError, match="dtype must be the input's"):
        run_operator(torchdali, "resize", images(np.uint16), size=[5, 5], dtype=types.UINT8)


@requires_cuda
@pytest.mark.parametrize("op,dtype,kwargs", [("resize", np.int16, dict(size=[11, 30])),
                                             ("resize", np.uint16, dict(size=[20, 20], dtype=types.FLOAT)),
                                             ("crop", np.uint16, dict(crop=(6, 7))),
                                             ("crop_mirror_normalize", np.int32, dict(crop=(8, 6), mirror=True))])
def test_gpu_matches_cpu(op, dtype, kwargs):
    ims = images(dtype)
    cpu, _ = run_operator(torchdali, op, ims, **kwargs)
    gpu, _ = run_operator(torchdali, op, ims, device="gpu", **kwargs)
    for c, g in zip(cpu, gpu):
        assert c.dtype == g.dtype and c.shape == g.shape
        assert np.abs(c.astype(np.float64) - g.astype(np.float64)).max() <= (1.0 if op == "resize" else 1e-3 * abs(c).max())
