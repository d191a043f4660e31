"""erase and grid_mask against DALI 2.4 on the CPU: exact, outputs and errors."""
import numpy as np
import pytest

import torchdali
from conftest import assert_batches_equal, constant_source, dali_or_skip, requires_cuda, run_operator

rng = np.random.default_rng(7)


def images_of(dtype, sizes=((9, 11, 3), (6, 13, 3), (1, 1, 3)), seed=0):
    g = np.random.default_rng(seed)
    return [(g.integers(0, 200, s) if np.dtype(dtype).kind != "f" else g.uniform(-5, 200, s)).astype(dtype)
            for s in sizes]


def both(op, images, **kwargs):
    """The op's outputs from torchdali and DALI, asserted equal; returns ours."""
    dali = dali_or_skip()
    ours, our_layout = run_operator(torchdali, op, images, **kwargs)
    theirs, their_layout = run_operator(dali, op, images, **kwargs)
    assert_batches_equal(ours, theirs)
    assert our_layout == their_layout
    return ours


def refused(op, images, match, **kwargs):
    """Our error (naming the operator) for a batch that DALI refuses too (checked where `dali` is True)."""
    with pytest.raises((ValueError, TypeError), match=match) as info:
        run_operator(torchdali, op, images, **kwargs)
    assert op in str(info.value)


def dali_refuses(op, images, **kwargs):
    dali = dali_or_skip()
    with pytest.raises(Exception):
        run_operator(dali, op, images, **kwargs)


# --- erase ---

ERASE_CASES = [
    dict(anchor=[1, 2], shape=[3, 4]),
    dict(anchor=[1, 2], shape=[3, 4], axis_names="WH"),
    dict(anchor=[2], shape=[3], axes=[1]),
    dict(anchor=[1, 2], shape=[2, 3], axes=[1, 0]),
    dict(anchor=[-2, 3, 4, -1, 7, 8], shape=[4, 30, 2, 3, 2.5, -1]),  # clipped, empty, negative
    dict(anchor=[1.7, 2.2], shape=[1.5, 1.9]),  # truncation of anchor and of anchor + shape
    dict(anchor=[-0.6, -1.5], shape=[1.2, 3.4]),
    dict(anchor=[0.2, 0.5, 0.5, 0.1], shape=[0.4, 0.3, 0.5, 0.9], normalized=True),
    dict(anchor=[0.33, 0.71], shape=[2, 3], normalized_anchor=True),
    dict(anchor=[1, 2], shape=[0.34, 0.77], normalized_shape=True, normalized_anchor=False),
    dict(anchor=[3, 4, 0, 0], shape=[2, 5, 3, 3], centered_anchor=True),
    dict(anchor=[0.5, 0.5], shape=[0.3, 0.6], normalized=True, centered_anchor=True),
    dict(shape=[2, 3]),  # anchor zeros
    dict(anchor=[], shape=[]),  # nothing
    dict(),
    dict(anchor=[1, 1, 3], shape=[2, 2, 2], axis_names="HHW"),  # an axis twice: the last wins
    dict(anchor=[1, 2], shape=[3, 4], fill_value=[10, 20, 30]),
    dict(anchor=[1], shape=[1], axis_names="C", fill_value=77),
    dict(anchor=[0, 0], shape=[100, 100], fill_value=5),
    dict(anchor=[1e30, -1e30], shape=[3, 2e30]),  # beyond int64: DALI's conversion gives nothing
]


@pytest.mark.parametrize("kwargs", ERASE_CASES)
def test_erase_matches_dali(kwargs):
    both("erase", images_of(np.uint8), **kwargs)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64,
                                   np.float16, np.float32])
def test_erase_types(dtype):
    out = both("erase", images_of(dtype), anchor=[1, 2, 4, 0], shape=[3, 4, 1, 20], fill_value=9)
    assert out[0].dtype == dtype


@pytest.mark.parametrize("dtype,fills", [
    (np.uint8, [300, -5, -2.7, 2.7, 1e10, -1e10, float("nan")]),
    (np.int8, [200, -129.9, 1e10]),
    (np.int16, [70000.5, -40000]),
    (np.uint16, [-1, 65536.7]),
    (np.int32, [3e9, -3e9, float("nan")]),
    (np.uint32, [-3, 1e10, 1e20]),
    (np.int64, [-3e20, 1e19, float("nan")]),
    (np.uint64, [-3, 1e19, 1e20, float("nan")]),
    (np.float16, [1e10, -1e10, 0.1]),
    (np.float32, [1e30, float("inf")]),
])
def test_erase_fill_value_cast_as_dali(dtype, fills):
    """DALI converts fill values with a C++ cast (wrapping, truncating): our values are its values."""
    for fill in fills:
        both("erase", images_of(dtype, sizes=((4, 5, 2),)), anchor=[1, 1], shape=[2, 2], fill_value=fill)


@pytest.mark.parametrize("layout,shape,kwargs", [
    ("CHW", (3, 9, 11), dict(anchor=[1, 2], shape=[5, 6])),
    ("CHW", (3, 9, 11), dict(anchor=[1, 2], shape=[5, 6], fill_value=[1, 2, 3])),
    ("FHWC", (3, 7, 8, 2), dict(anchor=[1, 2, 3], shape=[1, 3, 3])),  # all axes but C, F included
    ("FHWC", (3, 7, 8, 2), dict(anchor=[2, 3], shape=[3, 3], axis_names="HW")),
    ("DHWC", (4, 5, 6, 2), dict(anchor=[1, 1, 1, 0, 0, 0], shape=[2, 2, 2, 1, 1, 1], fill_value=[3, 4])),
    ("W", (17,), dict(anchor=[3, 9], shape=[2, 100])),
    ("", (5, 6, 2), dict(anchor=[1, 2], shape=[2, 2], axes=[0, 1])),
    ("", (5, 6, 2), dict(anchor=[1], shape=[1], axes=[2])),
    ("HW", (6, 7), dict(anchor=[1, 2], shape=[3, 3], fill_value=4)),
    ("FDHWC", (2, 3, 4, 5, 1), dict(anchor=[1, 1], shape=[2, 2], axis_names="DW")),
])
def test_erase_layouts(layout, shape, kwargs):
    ims = [rng.integers(0, 100, shape).astype(np.uint8) for _ in range(2)]
    both("erase", ims, layout=layout, **kwargs)


def test_erase_ragged_batch_and_empty_samples():
    ims = images_of(np.float32, sizes=((9, 11, 3), (0, 5, 3), (4, 0, 3), (5, 4, 3)))
    both("erase", ims, anchor=[1, 1, 3, 0], shape=[2, 3, 1, 10], fill_value=[1, 2, 3])
    both("erase", ims, anchor=[0.1, 0.2], shape=[0.5, 0.5], normalized=True, centered_anchor=True)


def test_erase_per_sample_arguments():
    ims = images_of(np.uint8, sizes=((9, 11, 3), (6, 13, 3), (7, 7, 3)))
    anchors = [np.array([1, 2], np.float32), np.array([0, 0, 4, 4], np.float32), np.array([2.5, 1.5], np.float32)]
    shapes = [np.array([3, 3], np.float32), np.array([2, 2, 9, 1], np.float32), np.array([3, 4], np.float32)]
    fills = [np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32), np.array([250, 260, -1], np.float32)]
    both("erase", ims, arg_inputs={"anchor": anchors, "shape": shapes, "fill_value": fills})
    both("erase", ims, shape=[3, 3], arg_inputs={"anchor": anchors[:1] * 3})
    rows = [np.array([[1, 2], [4, 5]], np.float32), np.array([[0, 0], [1, 1]], np.float32)] * 2  # flattened
    both("erase", ims, arg_inputs={"anchor": rows[:3], "shape": rows[1:]})
    both("erase", ims, anchor=[1, 1], shape=[4, 4], arg_inputs={"fill_value": [np.float32(v) for v in (3, 7, 300)]})


@pytest.mark.parametrize("kwargs,match", [
    (dict(anchor=[1, 2, 3], shape=[2, 3]), "anchor has 3 values and shape 2"),
    (dict(anchor=[2], shape=[2, 3]), "anchor has 1 values and shape 2"),
    (dict(anchor=[1, 2, 3], shape=[2, 3, 1]), "not a multiple of the 2 axes"),
    (dict(anchor=[1, 2], shape=[2, 3], fill_value=[7, 8]), "fill_value has 2 values but sample 0 has 3 channels"),
    (dict(anchor=[1, 2], shape=[2, 3], axis_names="HX"), "'X' is not in the input layout"),
    (dict(anchor=[1, 2], shape=[2, 3], normalized=True, normalized_anchor=True), "'normalized' cannot be given"),
    (dict(anchor=[1, 2], shape=[2, 3], normalized=False, normalized_shape=False), "'normalized' cannot be given"),
])
def test_erase_errors_where_dali_refuses(kwargs, match):
    ims = images_of(np.uint8)
    dali_refuses("erase", ims, **kwargs)
    refused("erase", ims, match, **kwargs)


def test_erase_refuses_types_and_dims_dali_refuses():
    dali_refuses("erase", images_of(np.float64), anchor=[1, 1], shape=[1, 1])
    refused("erase", images_of(np.float64), "FLOAT64 is not supported", anchor=[1, 1], shape=[1, 1])
    six = [np.zeros((2, 2, 2, 2, 2, 2), np.uint8)]
    dali_refuses("erase", six, layout="", anchor=[1], shape=[1], axes=[0])
    refused("erase", six, "6 dims are not supported", layout="", anchor=[1], shape=[1], axes=[0])
    fills = [np.array([1, 2, 3], np.float32), np.array([5], np.float32)]
    dali_refuses("erase", images_of(np.uint8)[:2], shape=[2, 2], arg_inputs={"fill_value": fills})
    refused("erase", images_of(np.uint8)[:2], "same number of values", shape=[2, 2], arg_inputs={"fill_value": fills})
    shapes = [np.array([2, 2], np.float32)] * 3  # per-sample shape without anchor: DALI refuses it
    dali_refuses("erase", images_of(np.uint8), arg_inputs={"shape": shapes})
    refused("erase", images_of(np.uint8), "give anchor too", arg_inputs={"shape": shapes})


def test_erase_refuses_what_crashes_dali():
    """Without a layout and axes, or with axes out of range, DALI 2.4 crashes or writes out of
    bounds: a clear error here."""
    ims = images_of(np.uint8)
    refused("erase", ims, "no axes for anchor and shape", layout="", anchor=[1, 2], shape=[2, 3])
    refused("erase", ims, "no axes", anchor=[1, 2], shape=[2, 3], axes=[])
    refused("erase", ims, "3 is not an axis", anchor=[1, 2], shape=[2, 3], axes=[0, 3])
    refused("erase", ims, "-1 is not an axis", anchor=[1, 2], shape=[2, 3], axes=[0, -1])
    refused("erase", ims, "has no 'C'", layout="", anchor=[1, 2], shape=[2, 3], axes=[0, 1], fill_value=[1, 2, 3])


# --- grid_mask ---

def grid_args(n, seed):
    g = np.random.default_rng(seed)
    return {"tile": [np.int32(t) for t in g.integers(1, 30, n)],
            "ratio": [np.float32(r) for r in g.uniform(0, 1, n)],
            "angle": [np.float32(a) for a in g.uniform(-7, 7, n)],
            "shift_x": [np.float32(s) for s in g.uniform(-40, 40, n)],
            "shift_y": [np.float32(s) for s in g.uniform(-40, 40, n)]}


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.float32])
def test_grid_mask_matches_dali_exactly(dtype):
    """Per-sample tiles, ratios, angles and shifts over odd sizes: exact (DALI's float32 steps are
    repeated one by one: the boundary pixels agree)."""
    sizes = [(int(h), int(w), 3) for h, w in rng.integers(1, 90, (10, 2))]
    out = both("grid_mask", images_of(dtype, sizes=sizes), arg_inputs=grid_args(len(sizes), 1))
    assert out[0].dtype == dtype


@pytest.mark.parametrize("kwargs", [
    dict(), dict(tile=10), dict(tile=7, ratio=0.3, angle=0.7), dict(tile=1, ratio=1.0, shift_x=1e-8),
    dict(tile=9, ratio=1.5), dict(tile=9, ratio=-0.5), dict(tile=12, angle=-3.14159265, shift_x=3.5, shift_y=-2.25),
    dict(tile=3, angle=np.pi / 4, ratio=0.5), dict(tile=2, ratio=0.5, angle=np.pi / 2),
])
def test_grid_mask_arguments(kwargs):
    both("grid_mask", images_of(np.uint8, sizes=((37, 53, 3), (20, 20, 1), (1, 1, 2))), **kwargs)


def test_grid_mask_keeps_float_values_as_dali():
    """in * mask: NaN stays NaN, negative values turn -0.0, as DALI's multiply does."""
    im = np.array([[[np.nan, -3.0], [np.inf, 2.0]], [[-1.0, 5.0], [7.0, -0.0]]], np.float32)
    out = both("grid_mask", [im], tile=2, ratio=0.5)
    assert np.isnan(out[0][0, 0, 0])


def test_grid_mask_layouts_read_as_hwc():
    ims = images_of(np.uint8, sizes=((5, 30, 40), (5, 30, 40)))
    both("grid_mask", ims, layout="CHW", tile=10)
    both("grid_mask", ims, layout="", tile=6, angle=0.4)


def test_grid_mask_empty_samples():
    both("grid_mask", images_of(np.float32, sizes=((0, 5, 3), (4, 4, 3), (3, 0, 3))), tile=3)


def test_grid_mask_errors():
    ims = images_of(np.uint8)
    dali_refuses("grid_mask", ims, tile=0)
    refused("grid_mask", ims, "'tile' = 0: must be positive", tile=0)
    for dtype in (np.float16, np.uint16):
        dali_refuses("grid_mask", images_of(dtype))
        refused("grid_mask", images_of(dtype), "is not supported; give one of UINT8, INT16, INT32, FLOAT")
    refused("grid_mask", [np.zeros((4, 5), np.uint8)], "2 dims are not supported", layout="HW")
    refused("grid_mask", [np.zeros((1, 4, 5, 3), np.uint8)], "4 dims are not supported", layout="FHWC")
    tiles = [np.int32(4), np.int32(-1), np.int32(3)]
    refused("grid_mask", ims, "sample 1 = -1: must be positive", arg_inputs={"tile": tiles})


# --- gpu ---

@requires_cuda
@pytest.mark.parametrize("op,kwargs", [
    ("erase", dict(anchor=[1, 2, -1, 3], shape=[3, 4, 3, 20], fill_value=[1, 2, 3])),
    ("erase", dict(anchor=[0.3, 0.2], shape=[0.5, 0.5], normalized=True, centered_anchor=True, fill_value=300)),
    ("grid_mask", dict(tile=7, ratio=0.4, angle=0.9, shift_x=3.0, shift_y=-1.5)),
])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32])
def test_gpu_matches_cpu(op, kwargs, dtype):
    if op == "grid_mask" and dtype == np.uint16:
        pytest.skip("grid_mask does not take uint16")
    for sizes in (((9, 11, 3), (9, 11, 3)), ((9, 11, 3), (6, 13, 3))):
        ims = images_of(dtype, sizes=sizes)
        cpu, _ = run_operator(torchdali, op, ims, **kwargs)
        gpu, _ = run_operator(torchdali, op, ims, device="gpu", **kwargs)
        assert_batches_equal(gpu, cpu)


def test_erase_result_is_independent_of_the_input_batch():
    """The output is new memory: the input batch is left as it was."""
    ims = images_of(np.uint8)
    before = [im.copy() for im in ims]

    @torchdali.pipeline_def(batch_size=len(ims), num_threads=1, device_id=None)
    def pipe():
        x = torchdali.fn.external_source(constant_source(ims), layout="HWC")
        return x, torchdali.fn.erase(x, anchor=[0, 0], shape=[3, 3])

    p = pipe()
    p.build()
    x, y = p.run()
    for i, im in enumerate(before):
        np.testing.assert_array_equal(np.array(x.at(i)), im)
        assert (np.array(y.at(i))[:3, :3] == 0).all()
