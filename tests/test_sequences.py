"""Sequences of images (FHWC, FCHW) through the geometric operators that DALI applies frame by
frame: every frame cut, resized, rotated or warped as an image with its sample's arguments,
against the same operator on the frames one by one and, where installed, DALI."""
import numpy as np
import pytest

import torchdali
from torchdali import types

from conftest import assert_batches_equal, dali_or_skip, requires_cuda, run_operator

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(5)
# Two samples of 3 and 2 frames (different sizes: no dense batch) and a dense pair.
RAGGED = [RNG.integers(0, 256, (3, 11, 13, 3), dtype=np.uint8), RNG.integers(0, 256, (2, 9, 16, 3), dtype=np.uint8)]
DENSE = [RNG.integers(0, 256, (2, 10, 12, 3), dtype=np.uint8) for _ in range(2)]
CASES = {
    "crop": dict(crop=(5, 7), crop_pos_x=0.2),
    "resize": dict(resize_x=17, resize_y=6),
    "rotate": dict(angle=30.0, fill_value=0),
    "warp_affine": dict(matrix=[1.0, 0.3, -2.0, 0.1, 0.9, 1.0], fill_value=0),
}
ANGLES = [np.float32(15.0), np.float32(-40.0)]


def frame_by_frame(op, sequences, layout="FHWC", arg_inputs=None, **kwargs):
    """The operator on every frame as an image, each with its sample's argument inputs."""
    out = []
    for i, seq in enumerate(sequences):
        named = {k: [v[i]] * len(seq) for k, v in (arg_inputs or {}).items()}
        frames, _ = run_operator(torchdali, op, list(seq), layout=layout[1:], arg_inputs=named, **kwargs)
        out.append(np.stack(frames))
    return out


@pytest.mark.parametrize("op", list(CASES))
@pytest.mark.parametrize("batch", ["ragged", "dense"])
def test_every_frame_as_an_image(op, batch):
    sequences = RAGGED if batch == "ragged" else DENSE
    got, layout = run_operator(torchdali, op, sequences, layout="FHWC", **CASES[op])
    assert layout == "FHWC"
    assert_batches_equal(got, frame_by_frame(op, sequences, **CASES[op]))


def test_channel_first_sequences_and_per_sample_arguments():
    chw = [np.ascontiguousarray(s.transpose(0, 3, 1, 2)) for s in RAGGED]
    got, layout = run_operator(torchdali, "rotate", chw, layout="FCHW", arg_inputs=dict(angle=ANGLES))
    assert layout == "FCHW"
    assert_batches_equal(got, frame_by_frame("rotate", chw, layout="FCHW", arg_inputs=dict(angle=ANGLES)))


def test_a_sequence_without_frames_and_volumes_are_named():
    with pytest.raises(ValueError, match="sample 1 is a sequence of no frames"):
        run_operator(torchdali, "crop", [RAGGED[0], np.zeros((0, 9, 16, 3), np.uint8)], layout="FHWC", crop=(2, 2))
    with pytest.raises(ValueError, match=r"crop_mirror_normalize.*'FHWC' is not supported; give HWC or CHW images, or "
                                         r"DHWC or CDHW volumes \(sequences are not supported\)"):
        run_operator(torchdali, "crop_mirror_normalize", RAGGED, layout="FHWC")


@pytest.mark.parametrize("op", list(CASES))
def test_sequences_match_dali(op):
    dali = dali_or_skip()
    kwargs = dict(CASES[op])
    if op == "rotate":
        kwargs["interp_type"] = types.INTERP_NN  # the frames' pixels exactly, without filter rounding
    ours, _ = run_operator(torchdali, op, RAGGED, layout="FHWC", **kwargs)
    theirs, _ = run_operator(dali, op, RAGGED, layout="FHWC", **kwargs)
    if op in ("crop", "rotate"):
        assert_batches_equal(ours, theirs)
    else:  # filtered: within a level, as the images' own tests allow
        for a, b in zip(ours, theirs):
            assert a.shape == b.shape and np.abs(a.astype(int) - b.astype(int)).max() <= 1


@requires_cuda
@pytest.mark.parametrize("op", list(CASES))
def test_sequences_on_the_gpu_equal_the_cpu(op):
    gpu, _ = run_operator(torchdali, op, RAGGED, layout="FHWC", device="gpu", **CASES[op])
    cpu, _ = run_operator(torchdali, op, RAGGED, layout="FHWC", **CASES[op])
    for a, b in zip(gpu, cpu):
        assert a.shape == b.shape and np.abs(a.astype(int) - b.astype(int)).max() <= 1
