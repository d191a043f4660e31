"""fn.per_frame and the arguments it marks: rotate's angle and axis, warp_affine's matrix (and
its matrix input as a sequence) and the transforms.* arguments read a row per frame of a
sequence, one row serving every frame. Against the frames run one by one and, where installed,
NVIDIA DALI (CPU) on the same pipelines."""
import numpy as np
import pytest

import torchdali

from conftest import as_numpy_batch, assert_batches_equal, constant_source, dali_or_skip, requires_cuda

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(11)
SEQUENCES = [RNG.integers(0, 256, (3, 8, 10, 3), dtype=np.uint8), RNG.integers(0, 256, (2, 6, 7, 3), dtype=np.uint8)]
ANGLES = [np.array([10, 20, 30], np.float32), np.array([5, -5], np.float32)]
OFFSETS = [np.arange(6, dtype=np.float32).reshape(3, 2), np.ones((2, 2), np.float32)]
POINTS = [np.arange(8, dtype=np.float32).reshape(4, 2), np.ones((3, 2), np.float32)]
MATRICES = [np.stack([np.array([[1, 0.1 * k, k], [0.05, 1, -k]], np.float32) for k in range(len(a))]) for a in ANGLES]


def run(lib, build, data=SEQUENCES, layout="FHWC", device="cpu"):
    """The outputs of `build(lib, node)` on `data` as (layout, NumPy samples) pairs."""
    @lib.pipeline_def(batch_size=len(data), num_threads=1, device_id=None if device == "cpu" else 0, seed=1)
    def pipe():
        x = lib.fn.external_source(constant_source(data), layout=layout)
        return build(lib, x.gpu() if device == "gpu" else x)

    p = pipe()
    p.build()
    return [(out.layout(), as_numpy_batch(out)) for out in p.run()]


def given(lib, values):
    return lib.fn.external_source(constant_source(values))


def per_frame(lib, values):
    return lib.fn.per_frame(given(lib, values))


PIPELINES = {
    "rotate": lambda lib, x: lib.fn.rotate(x, angle=per_frame(lib, ANGLES), interp_type=lib.types.INTERP_NN),
    "rotate, one row for all frames": lambda lib, x: lib.fn.rotate(x, angle=per_frame(lib, [a[:1] for a in ANGLES]),
                                                                  interp_type=lib.types.INTERP_NN),
    "warp_affine": lambda lib, x: lib.fn.warp_affine(x, matrix=per_frame(lib, MATRICES),
                                                     interp_type=lib.types.INTERP_NN),
    "warp_affine, transforms per frame": lambda lib, x: lib.fn.warp_affine(
        x, lib.fn.transforms.rotation(angle=per_frame(lib, ANGLES), center=[5.0, 4.0]), interp_type=lib.types.INTERP_NN),
    "transforms.rotation": lambda lib, x: lib.fn.transforms.rotation(angle=per_frame(lib, ANGLES)),
    "transforms.translation": lambda lib, x: lib.fn.transforms.translation(offset=per_frame(lib, OFFSETS)),
    "transforms.scale, about centres": lambda lib, x: lib.fn.transforms.scale(
        scale=per_frame(lib, [o + 1 for o in OFFSETS]), center=per_frame(lib, OFFSETS)),
    "transforms.shear": lambda lib, x: lib.fn.transforms.shear(angles=per_frame(lib, [o * 5 for o in OFFSETS])),
    "transforms.crop": lambda lib, x: lib.fn.transforms.crop(from_start=per_frame(lib, OFFSETS), from_end=[9.0, 9.0]),
    "transforms chained": lambda lib, x: lib.fn.transforms.rotation(lib.fn.transforms.scale(scale=[2.0, 3.0]),
                                                                    angle=per_frame(lib, ANGLES)),
    "transforms on a sequence": lambda lib, x: lib.fn.transforms.translation(
        lib.fn.transforms.rotation(angle=per_frame(lib, ANGLES)), offset=[1.0, 2.0]),
    "transforms.combine": lambda lib, x: lib.fn.transforms.combine(
        lib.fn.transforms.rotation(angle=per_frame(lib, ANGLES)), lib.fn.transforms.scale(scale=[2.0, 2.0])),
    "coord_transform, matrices per frame": lambda lib, x: lib.fn.coord_transform(
        given(lib, POINTS), MT=lib.fn.transforms.rotation(angle=per_frame(lib, ANGLES), center=[1.0, 2.0])),
    "coord_transform, sequences of points": lambda lib, x: lib.fn.coord_transform(
        per_frame(lib, [np.stack([p + k for k in range(len(a))]) for p, a in zip(POINTS, ANGLES)]),
        MT=per_frame(lib, MATRICES)),
    "per_frame": lambda lib, x: per_frame(lib, OFFSETS),
    "per_frame, replace": lambda lib, x: lib.fn.per_frame(lib.fn.external_source(constant_source(OFFSETS), layout="XY"),
                                                          replace=True),
}


@pytest.mark.parametrize("name", list(PIPELINES))
def test_matches_dali(name):
    dali = dali_or_skip()
    ours, theirs = run(torchdali, PIPELINES[name]), run(dali, PIPELINES[name])
    for (layout, got), (dali_layout, expected) in zip(ours, theirs):
        assert layout == dali_layout
        for a, b in zip(got, expected):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(a, b, atol=1e-5)


def test_volume_sequences_rotate_per_frame_as_dali():
    dali = dali_or_skip()
    volumes = [RNG.integers(0, 256, (3, 4, 5, 6, 1), dtype=np.uint8), RNG.integers(0, 256, (2, 3, 5, 4, 1), dtype=np.uint8)]

    def build(lib, x):
        return lib.fn.rotate(x, angle=per_frame(lib, ANGLES), axis=[0.0, 1.0, 1.0], interp_type=lib.types.INTERP_NN)

    (layout, ours), = run(torchdali, build, volumes, "FDHWC")
    (_, theirs), = run(dali, build, volumes, "FDHWC")
    assert layout == "FDHWC" and [o.shape for o in ours] == [t.shape for t in theirs]
    assert sum(int((a != b).sum()) for a, b in zip(ours, theirs)) <= 0.01 * sum(a.size for a in ours)


def test_rotated_frames_share_a_canvas_and_keep_their_angle():
    """Each frame turns by its own angle onto its sequence's one canvas: with keep_size, the
    frames equal each frame rotated alone."""
    def build(lib, x):
        return lib.fn.rotate(x, angle=per_frame(lib, ANGLES), keep_size=True)

    (layout, got), = run(torchdali, build)
    assert layout == "FHWC"
    for seq, angles, out in zip(SEQUENCES, ANGLES, got):
        for frame, angle, o in zip(seq, angles, out):
            (_, alone), = run(torchdali, lambda lib, x: lib.fn.rotate(x, angle=float(angle), keep_size=True),
                              [frame], "HWC")
            np.testing.assert_array_equal(o, alone[0])


def test_warp_affine_frames_equal_each_frame_alone():
    (_, got), = run(torchdali, PIPELINES["warp_affine"])
    for seq, mats, out in zip(SEQUENCES, MATRICES, got):
        for frame, m, o in zip(seq, mats, out):
            (_, alone), = run(torchdali, lambda lib, x: lib.fn.warp_affine(x, matrix=m.ravel().tolist(),
                                                                           interp_type=lib.types.INTERP_NN),
                              [frame], "HWC")
            np.testing.assert_array_equal(o, alone[0])


def test_one_row_per_sample_serves_images():
    images = [s[0] for s in SEQUENCES]
    (layout, got), = run(torchdali, PIPELINES["rotate, one row for all frames"], images, "HWC")
    (_, expected), = run(torchdali, lambda lib, x: lib.fn.rotate(x, angle=given(lib, [a[:1] for a in ANGLES]),
                                                                interp_type=lib.types.INTERP_NN), images, "HWC")
    assert layout == "HWC"
    assert_batches_equal(got, expected)


def test_transform_sequences_hold_one_matrix_per_frame():
    (layout, got), = run(torchdali, PIPELINES["transforms.rotation"])
    assert layout == "F**"
    for angles, out in zip(ANGLES, got):
        for angle, m in zip(angles, out):
            (_, alone), = run(torchdali, lambda lib, x: lib.fn.transforms.rotation(angle=float(angle)), [m], "")
            np.testing.assert_array_equal(m, alone[0])


ERRORS = [
    ("rows differ from frames", lambda lib, x: lib.fn.rotate(x, angle=per_frame(lib, ANGLES[::-1])),
     r"rotate \('.*'\): argument input 'angle' sample 0 has 2 per-frame values, but the input's sample 0 has 3 "
     r"frames; give 1 or 3"),
    ("an argument not taken per frame", lambda lib, x: lib.fn.crop(x, crop=(4, 4), crop_pos_x=per_frame(lib, ANGLES)),
     r"crop \('.*'\): argument input 'crop_pos_x' is given per frame \(layout 'F'\), which this argument does not "
     r"take"),
    ("a layout without frames", lambda lib, x: lib.fn.per_frame(lib.fn.external_source(constant_source(OFFSETS),
                                                                                       layout="XY")),
     r"per_frame \('.*'\): the input layout 'XY' does not start with 'F'"),
    ("per-frame counts that differ", lambda lib, x: lib.fn.transforms.translation(
        lib.fn.transforms.rotation(angle=per_frame(lib, ANGLES)), offset=per_frame(lib, OFFSETS[::-1])),
     r"transforms.translation \('.*'\): input 0 sample 0 has 3 frames, the other per-frame values of that sample 2"),
]


@pytest.mark.parametrize("build,match", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors_name_operator_and_argument(build, match):
    with pytest.raises(ValueError, match=match):
        run(torchdali, build)


def test_several_rows_for_an_image_are_refused():
    with pytest.raises(ValueError, match=r"rotate \('.*'\): sample 0 of a per-frame argument has 3 values, but input "
                                         r"sample 0 is not a sequence"):
        run(torchdali, PIPELINES["rotate"], [s[0] for s in SEQUENCES], "HWC")


@requires_cuda
@pytest.mark.parametrize("name", ["rotate", "warp_affine", "warp_affine, transforms per frame"])
def test_gpu_equals_cpu(name):
    (_, cpu), = run(torchdali, PIPELINES[name])
    (_, gpu), = run(torchdali, PIPELINES[name], device="gpu")
    assert_batches_equal(gpu, cpu)
