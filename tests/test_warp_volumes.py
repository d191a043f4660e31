"""fn.warp_affine and fn.rotate on 3D volumes (DHWC, CDHW) and sequences of them (FDHWC,
FCDHW): against NVIDIA DALI (CPU) where installed - warp_affine's voxels exactly for integer
types, rotate's output shapes exactly (DALI's canvas and parity rule about an axis) and its
voxels but for a few at exact ties - and against the operators' own layouts and frames."""
import math

import numpy as np
import pytest

import torchdali
from torchdali import types
from torchdali.operators.warp import rotated_volume_canvas

from conftest import assert_batches_equal, dali_or_skip, requires_cuda, run_operator

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(3)
SHAPES = [(5, 7, 9, 2), (4, 6, 3, 2), (1, 1, 1, 2), (6, 11, 4, 2)]
VOLUMES = [RNG.integers(0, 256, s, dtype=np.uint8) for s in SHAPES]
AXES = [[0, 0, 1], [1, 0, 0], [0, 1, 0], [1, 1, 1], [0.3, -2, 0.7]]
ANGLES = [0.0, 17.3, 30.0, -45.0, 90.0, 135.0, 200.0, -63.5]


def channel_first(volumes):
    return [np.ascontiguousarray(np.moveaxis(v, -1, 0)) for v in volumes]


def random_matrices(seed):
    """Per volume a 3x4 output-to-input matrix: a random rotation and scale about its centre."""
    rng = np.random.default_rng(seed)
    out = []
    for d, h, w, _ in SHAPES:
        q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        q *= rng.uniform(0.6, 1.5)
        centre = np.array([w, h, d], float) / 2
        out.append(np.concatenate([q, (centre - q @ centre + rng.uniform(-2, 2, 3))[:, None]], 1).astype(np.float32))
    return out


def run(lib, op, volumes=VOLUMES, layout="DHWC", **kwargs):
    return run_operator(lib, op, volumes, layout=layout, **kwargs)


# --- against DALI ---

@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.float32])
@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR])
@pytest.mark.parametrize("fill", [None, 7.3])
def test_warp_affine_matches_dali(dtype, interp, fill):
    dali = dali_or_skip()
    volumes = [(v.astype(np.float32) * 1.7 - 30).astype(dtype) for v in VOLUMES]
    kwargs = dict(interp_type=interp, arg_inputs=dict(matrix=random_matrices(int(interp))))
    if fill is not None:
        kwargs["fill_value"] = fill
    ours, layout = run(torchdali, "warp_affine", volumes, **kwargs)
    theirs, _ = run(dali, "warp_affine", volumes, **kwargs)
    assert layout == "DHWC"
    if dtype == np.float32 and interp == types.INTERP_LINEAR:  # DALI rounds the blend a little differently
        for a, b in zip(ours, theirs):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(a, b, atol=1e-3)
    else:
        assert_batches_equal(ours, theirs)


@pytest.mark.parametrize("kwargs", [
    dict(size=[3, 4, 5]),
    dict(matrix=[1.0, 0.1, 0, 0.5, 0, 1, 0.2, 0.3, -0.1, 0, 1, 0.2], inverse_map=False),
    dict(matrix=[0.9, 0.2, 0, 1.5, 0, 1.1, 0, -0.3, 0, 0.1, 0.8, 0.2], dtype=types.FLOAT),
], ids=["size", "inverse_map", "dtype"])
def test_warp_affine_arguments_match_dali(kwargs):
    dali = dali_or_skip()
    kwargs = dict(kwargs)
    kwargs.setdefault("matrix", [1, 0, 0, 0.5, 0, 1, 0, 0.3, 0, 0, 1, 0.2])
    ours, _ = run(torchdali, "warp_affine", interp_type=types.INTERP_NN, **kwargs)
    theirs, _ = run(dali, "warp_affine", interp_type=types.INTERP_NN, **kwargs)
    assert_batches_equal(ours, theirs)


@pytest.mark.parametrize("axis", AXES, ids=str)
def test_rotate_canvas_matches_dali(axis):
    dali = dali_or_skip()
    for angle in ANGLES:
        ours, _ = run(torchdali, "rotate", angle=angle, axis=axis)
        theirs, _ = run(dali, "rotate", angle=angle, axis=axis)
        assert [o.shape for o in ours] == [t.shape for t in theirs], (angle, axis)
        dhw = np.array([v.shape[:3] for v in VOLUMES])
        expected = rotated_volume_canvas(dhw, np.array([axis] * len(dhw), float), np.full(len(dhw), angle))
        assert [o.shape[:3] for o in ours] == [tuple(e) for e in expected.tolist()]


@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("interp", [types.INTERP_NN, types.INTERP_LINEAR])
def test_rotate_voxels_match_dali(axis, interp):
    """Equal but for voxels whose source point falls on a voxel boundary, where DALI's float32
    matrix (its axis normalization by an approximate reciprocal square root, whose last bit
    depends on the processor) may round the other way: at most 3% of the voxels at angles that
    put many voxels on boundaries (multiples of 45 degrees), and at 17.3 degrees none."""
    dali = dali_or_skip()
    for angle in ANGLES:
        kwargs = dict(angle=angle, axis=axis, interp_type=interp, fill_value=3.0)
        ours, _ = run(torchdali, "rotate", **kwargs)
        theirs, _ = run(dali, "rotate", **kwargs)
        differ = sum(int((a != b).sum()) for a, b in zip(ours, theirs))
        total = sum(a.size for a in ours)
        assert differ <= (0 if angle == 17.3 else 0.03 * total), (angle, differ, total)


@pytest.mark.parametrize("kwargs", [dict(keep_size=True), dict(size=[4, 5, 6]), dict(dtype=types.FLOAT)],
                         ids=["keep_size", "size", "dtype"])
def test_rotate_arguments_match_dali(kwargs):
    dali = dali_or_skip()
    ours, _ = run(torchdali, "rotate", angle=17.3, axis=[0, 1, 1], **kwargs)
    theirs, _ = run(dali, "rotate", angle=17.3, axis=[0, 1, 1], **kwargs)
    if kwargs.get("dtype") == types.FLOAT:
        for a, b in zip(ours, theirs):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(a, b, atol=1e-3)
    else:
        assert_batches_equal(ours, theirs)


def test_per_sample_angles_and_axes_match_dali():
    dali = dali_or_skip()
    arg_inputs = dict(angle=[np.float32(a) for a in (10, -30, 75, 200)],
                      axis=[np.array(a, np.float32) for a in ([0, 0, 1], [1, 2, 0], [0, 1, 0], [1, 1, 1])])
    ours, _ = run(torchdali, "rotate", arg_inputs=arg_inputs, interp_type=types.INTERP_NN)
    theirs, _ = run(dali, "rotate", arg_inputs=arg_inputs, interp_type=types.INTERP_NN)
    assert [o.shape for o in ours] == [t.shape for t in theirs]
    assert sum(int((a != b).sum()) for a, b in zip(ours, theirs)) <= 0.01 * sum(a.size for a in ours)


@pytest.mark.parametrize("op,kwargs", [("rotate", dict(angle=30.0, axis=[0, 1, 1], fill_value=0)),
                                       ("warp_affine", dict(matrix=[1, 0, 0, 0.5, 0, 1, 0, 0.3, 0, 0, 1, 0.2]))])
def test_sequences_of_volumes_match_dali(op, kwargs):
    dali = dali_or_skip()
    sequences = [np.stack([v, 255 - v]) for v in VOLUMES[:2]]
    ours, layout = run(torchdali, op, sequences, layout="FDHWC", interp_type=types.INTERP_NN, **kwargs)
    theirs, _ = run(dali, op, sequences, layout="FDHWC", interp_type=types.INTERP_NN, **kwargs)
    assert layout == "FDHWC"
    assert [o.shape for o in ours] == [t.shape for t in theirs]
    assert sum(int((a != b).sum()) for a, b in zip(ours, theirs)) <= 0.01 * sum(a.size for a in ours)


def test_resize_of_sequences_of_volumes_matches_dali():
    dali = dali_or_skip()
    sequences = [np.stack([v, 255 - v]) for v in VOLUMES[:2]]
    for layout, data in (("FDHWC", sequences), ("FCDHW", [np.ascontiguousarray(np.moveaxis(s, -1, 1))
                                                          for s in sequences])):
        ours, got_layout = run(torchdali, "resize", data, layout=layout, size=(3, 4, 5))
        theirs, _ = run(dali, "resize", data, layout=layout, size=(3, 4, 5))
        assert got_layout == layout
        for a, b in zip(ours, theirs):
            assert a.shape == b.shape and np.abs(a.astype(int) - b.astype(int)).max() <= 1


# --- our own layouts and frames ---

@pytest.mark.parametrize("op,kwargs", [("rotate", dict(angle=-63.5, axis=[0.3, -2, 0.7])),
                                       ("warp_affine", dict(arg_inputs=dict(matrix=random_matrices(4)),
                                                            fill_value=9.0, size=[4, 6, 5]))])
def test_channel_first_volumes_equal_channel_last(op, kwargs):
    last, _ = run(torchdali, op, **kwargs)
    first, layout = run(torchdali, op, channel_first(VOLUMES), layout="CDHW", **kwargs)
    assert layout == "CDHW"
    assert_batches_equal(first, channel_first(last))


@pytest.mark.parametrize("op,kwargs", [("rotate", dict(angle=40.0, axis=[1, 0, 1])),
                                       ("warp_affine", dict(matrix=[1, 0, 0, 0.5, 0, 1, 0, 0.3, 0, 0, 1, 0.2])),
                                       ("resize", dict(size=(3, 8, 5))),
                                       ("crop", dict(crop=(2, 3, 3), crop_pos_z=0.7))])
@pytest.mark.parametrize("layout", ["FDHWC", "FCDHW"])
def test_sequences_of_volumes_run_frame_by_frame(op, kwargs, layout):
    sequences = [np.stack([v, 255 - v, v // 2]) for v in VOLUMES[:2]]
    if layout == "FCDHW":
        sequences = [np.ascontiguousarray(np.moveaxis(s, -1, 1)) for s in sequences]
    got, got_layout = run(torchdali, op, sequences, layout=layout, **kwargs)
    assert got_layout == layout
    expected = [np.stack(run(torchdali, op, list(s), layout=layout[1:], **kwargs)[0]) for s in sequences]
    assert_batches_equal(got, expected)


def test_zero_angle_and_quarter_turns_are_exact():
    same, _ = run(torchdali, "rotate", angle=0.0, axis=[0.3, 1, 2], interp_type=types.INTERP_NN)
    assert_batches_equal(same, VOLUMES)
    turned, _ = run(torchdali, "rotate", angle=90.0, axis=[0, 0, 1], interp_type=types.INTERP_NN)
    for v, t in zip(VOLUMES, turned):  # about z (x right, y down): every depth plane turned clockwise
        np.testing.assert_array_equal(t, np.rot90(v, -1, axes=(1, 2)))


# --- errors ---

ERRORS = [
    ("rotate", dict(angle=10.0), r"rotate \('.*'\): argument 'axis' is required for volumes"),
    ("rotate", dict(angle=10.0, axis=[0, 0, 0]), r"rotate: argument 'axis'.*not all zero"),
    ("rotate", dict(angle=10.0, axis=[0, 1]), r"rotate: argument 'axis'.*3 finite values"),
    ("rotate", dict(angle=10.0, axis=[0, 0, 1], size=[4, 5]),
     r"rotate \('.*'\): argument 'size' must have 3 values \(depth, height, width\) for volumes"),
    ("warp_affine", dict(matrix=[1, 0, 0, 0, 1, 0]),
     r"warp_affine \('.*'\): argument 'matrix' must have 12 values \(a 3x4 matrix\) for volumes, got 6"),
    ("warp_affine", dict(matrix=[1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, math.nan]), r"warp_affine: argument 'matrix'.*finite"),
]


@pytest.mark.parametrize("op,kwargs,match", ERRORS, ids=[e[2][:50] for e in ERRORS])
def test_bad_arguments_name_operator_and_argument(op, kwargs, match):
    with pytest.raises(ValueError, match=match):
        run(torchdali, op, **kwargs)


def test_bad_matrix_input_and_volumes_are_named():
    with pytest.raises(ValueError, match=r"warp_affine \('.*'\): input 1 \(mtx\) of sample 0 must have 12 values "
                                         r"\(a 3x4 matrix\), got 6"):
        run(torchdali, "warp_affine", inputs=([np.eye(2, 3, dtype=np.float32)] * len(VOLUMES),))
    with pytest.raises(ValueError, match=r"rotate \('.*'\): sample 1 has 1 channels, sample 0 has 2"):
        run(torchdali, "rotate", [VOLUMES[0], VOLUMES[1][..., :1]], angle=3.0, axis=[0, 0, 1])
    with pytest.raises(TypeError, match=r"rotate \('.*'\): input type .*INT64 is not supported"):
        run(torchdali, "rotate", [v.astype(np.int64) for v in VOLUMES], angle=3.0, axis=[0, 0, 1])


# --- GPU ---

@requires_cuda
@pytest.mark.parametrize("op,kwargs", [("rotate", dict(angle=30.5, axis=[1, 1, 0])),
                                       ("rotate", dict(angle=-45.0, axis=[0, 0, 1], fill_value=3.0,
                                                       interp_type=types.INTERP_NN)),
                                       ("warp_affine", dict(arg_inputs=dict(matrix=random_matrices(2))))])
@pytest.mark.parametrize("layout", ["DHWC", "CDHW", "FDHWC"])
def test_gpu_equals_cpu(op, kwargs, layout):
    data = channel_first(VOLUMES) if layout == "CDHW" else [v[None] for v in VOLUMES] if layout == "FDHWC" else VOLUMES
    cpu, _ = run(torchdali, op, data, layout=layout, **kwargs)
    gpu, _ = run(torchdali, op, data, layout=layout, device="gpu", **kwargs)
    assert_batches_equal(gpu, cpu)
