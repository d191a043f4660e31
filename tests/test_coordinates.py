"""Operators on coordinates (coord_transform, coord_flip, bb_flip, bbox_paste) against a
NumPy reference and DALI on the CPU (skipped without it), on the GPU against the CPU; bad
arguments named."""
import numpy as np
import pytest

import torchdali
from torchdali import types

from conftest import dali_or_skip, requires_cuda

BATCH = 3
RNG = np.random.default_rng(11)
POINTS = [RNG.uniform(-50, 50, (k, 2)).astype(np.float32) for k in (5, 1, 8)]
POINTS3 = [RNG.uniform(-50, 50, (k, 3)).astype(np.float32) for k in (2, 7, 4)]
INTS = [RNG.integers(-1000, 1000, (k, 3)).astype(np.int32) for k in (3, 2, 6)]
ANGLES = [np.float32(a) for a in RNG.uniform(-180, 180, BATCH)]
UNIT = [RNG.uniform(0, 1, (k, 2)).astype(np.float32) for k in (4, 0, 3)]  # sample 1 without points
UNIT3 = [RNG.uniform(0, 1, (k, 3)).astype(np.float32) for k in (2, 5, 1)]
XYWH = [np.concatenate([RNG.uniform(0, 0.5, (k, 2)), RNG.uniform(0, 0.5, (k, 2))], 1).astype(np.float32)
        for k in (3, 0, 6)]
LTRB = [np.concatenate([b[:, :2], b[:, :2] + b[:, 2:]], 1) for b in XYWH]
FLAGS = [np.int32(v) for v in (1, 0, 1)]
RATIOS = [np.float32(v) for v in (1.0, 2.5, 4.0)]


def run(lib, body, feeds, device="cpu"):
    @lib.pipeline_def(batch_size=BATCH, num_threads=1, device_id=0 if device == "gpu" else None)
    def pipe():
        sources = [lib.fn.external_source(source=(lambda f: lambda: f)(f), batch=True) for f in feeds]
        if device == "gpu":
            sources[0] = sources[0].gpu()
        return body(lib.fn, *sources)

    p = pipe()
    p.build()
    (out,) = p.run()
    if device == "gpu":
        out = out.as_cpu()
    return [np.array(out[i]) for i in range(BATCH)]


CASES = {
    "identity": (lambda f, x: f.coord_transform(x), [POINTS]),
    "M and T": (lambda f, x: f.coord_transform(x, M=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], T=[1.0, 2.0, 3.0]), [POINTS]),
    "projection": (lambda f, x: f.coord_transform(x, M=[0.5, -1.0, 2.0], T=7.0), [POINTS3]),
    "scalars": (lambda f, x: f.coord_transform(x, M=2.0, T=-1.5), [POINTS]),
    "MT": (lambda f, x: f.coord_transform(x, MT=[1, 2, 3, 4, 5, 6.0]), [POINTS]),
    "MT scalar": (lambda f, x: f.coord_transform(x, MT=3.0), [POINTS3]),
    "MT from transforms per sample": (lambda f, x, a: f.coord_transform(
        x, MT=f.transforms.rotation(angle=a, center=[10.0, -5.0])), [POINTS, ANGLES]),
    "integers to float": (lambda f, x: f.coord_transform(x, MT=[0.5, 0, 0, 0.25, 0, 2, 0, 0, 0, 0, -1.5, 3]), [INTS]),
    "integers kept": (lambda f, x: f.coord_transform(x, M=[0.37, 1.1, 0, 0, 2.5, 0, 1e7, 0, 0], dtype=types.INT32),
                      [INTS]),
    "coord_flip x": (lambda f, x: f.coord_flip(x), [UNIT]),
    "coord_flip yx about centers": (lambda f, x: f.coord_flip(x, layout="yx", flip_x=0, flip_y=1, center_y=0.25),
                                    [UNIT]),
    "coord_flip xyz per sample": (lambda f, x, k: f.coord_flip(x, flip_x=k, flip_z=1, center_z=2.0), [UNIT3, FLAGS]),
    "bb_flip xywh": (lambda f, b: f.bb_flip(b), [XYWH]),
    "bb_flip xywh both per sample": (lambda f, b, k: f.bb_flip(b, horizontal=k, vertical=1), [XYWH, FLAGS]),
    "bb_flip ltrb vertical": (lambda f, b: f.bb_flip(b, ltrb=True, horizontal=0, vertical=1), [LTRB]),
    "bbox_paste xywh": (lambda f, b: f.bbox_paste(b, ratio=2.0, paste_x=0.25, paste_y=1.0), [XYWH]),
    "bbox_paste ltrb per sample": (lambda f, b, r: f.bbox_paste(b, ltrb=True, ratio=r, paste_x=0.75), [LTRB, RATIOS]),
}
CPU_ONLY = {"bbox_paste xywh", "bbox_paste ltrb per sample"}  # as in DALI


def reference(body_name, feeds):
    """NumPy: the matrix of the case applied to each sample."""
    mt = {"identity": np.hstack([np.eye(2), np.zeros((2, 1))]),
          "M and T": np.array([[1, 2, 1], [3, 4, 2], [5, 6, 3.0]]),
          "projection": np.array([[0.5, -1.0, 2.0, 7.0]]),
          "scalars": np.array([[2, 0, -1.5], [0, 2, -1.5]]),
          "MT": np.array([[1, 2, 3], [4, 5, 6.0]]),
          "MT scalar": np.hstack([3 * np.eye(3), np.zeros((3, 1))])}[body_name]
    return [x.astype(np.float64) @ mt[:, :-1].T + mt[:, -1] for x in feeds[0]]


@pytest.mark.parametrize("case", ["identity", "M and T", "projection", "scalars", "MT", "MT scalar"])
def test_matches_numpy(case):
    body, feeds = CASES[case]
    for ours, expected in zip(run(torchdali, body, feeds), reference(case, feeds)):
        assert ours.dtype == np.float32
        np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("case", CASES)
def test_matches_dali(case):
    dali = dali_or_skip()
    body, feeds = CASES[case]
    for ours, theirs in zip(run(torchdali, body, feeds), run(dali, body, feeds)):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-3)


@requires_cuda
@pytest.mark.parametrize("case", sorted(set(CASES) - CPU_ONLY))
def test_gpu_matches_cpu(case):
    body, feeds = CASES[case]
    for gpu, cpu in zip(run(torchdali, body, feeds, "gpu"), run(torchdali, body, feeds)):
        assert gpu.dtype == cpu.dtype
        np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("body,feeds,match", [
    (lambda f, x: f.coord_transform(x, M=[1.0, 2.0, 3.0]), [POINTS], r"coord_transform.*'M' has 3 values; expected m x 2"),
    (lambda f, x: f.coord_transform(x, M=[1.0, 2.0], T=[1.0, 2.0]), [POINTS], r"coord_transform.*'T' has 2 values; M has 1"),
    (lambda f, x: f.coord_transform(x, MT=[1.0, 2.0], T=1.0), [POINTS], r"coord_transform.*`MT`, or `M` and `T`"),
    (lambda f, x: f.coord_transform(x, MT=[1.0, 2.0]), [POINTS], r"coord_transform.*'MT' has 2 values; expected m x 3"),
    (lambda f, x: f.coord_transform(x, dtype=types.INT16), [POINTS], r"coord_transform.*'dtype'.*FLOAT or the input's"),
    (lambda f, x: f.coord_transform(x), [[POINTS[0], POINTS3[0], POINTS[2]]], r"coord_transform.*sample 1 has 3 components"),
])
def test_bad_arguments_are_named(body, feeds, match):
    with pytest.raises(ValueError, match=match):
        run(torchdali, body, feeds)


def test_flips_and_paste_move_boxes_as_their_image_moves():
    box = [np.array([[0.1, 0.2, 0.3, 0.4]], np.float32)] * BATCH  # xywh: x 0.1-0.4, y 0.2-0.6
    flipped, both, pasted, point = (run(torchdali, body, [box])[0] for body in (
        lambda f, b: f.bb_flip(b), lambda f, b: f.bb_flip(b, ltrb=True, vertical=1),
        lambda f, b: f.bbox_paste(b, ratio=2.0, paste_x=0.0, paste_y=1.0), lambda f, b: f.coord_flip(b[:, 0:2])))
    np.testing.assert_allclose(flipped, [[0.6, 0.2, 0.3, 0.4]], atol=1e-6)  # x 0.6-0.9
    np.testing.assert_allclose(both, [[0.7, 0.6, 0.9, 0.8]], atol=1e-6)  # ltrb (0.1, 0.2, 0.3, 0.4) mirrored
    np.testing.assert_allclose(pasted, [[0.05, 0.6, 0.15, 0.2]], atol=1e-6)  # left half, bottom half of the canvas
    np.testing.assert_allclose(point, [[0.9, 0.2]], atol=1e-6)


@pytest.mark.parametrize("body,feeds,match", [
    (lambda f, b: f.bb_flip(b), [POINTS3], r"bb_flip.*sample 0 has 3 components, expected 4"),
    (lambda f, x: f.coord_flip(x, layout="xx"), [POINTS], r"coord_flip.*'layout' is 'xx' for points of 2"),
    (lambda f, x: f.coord_flip(x, layout="xyz"), [POINTS], r"coord_flip.*'layout' is 'xyz' for points of 2"),
    (lambda f, b: f.bbox_paste(b, ratio=0.5), [XYWH], r"bbox_paste.*'ratio'.*at least 1"),
])
def test_bad_box_and_point_arguments_are_named(body, feeds, match):
    with pytest.raises(ValueError, match=match):
        run(torchdali, body, feeds)


def test_integer_outputs_are_rounded_and_clamped():
    (out, *_) = run(torchdali, lambda f, x: f.coord_transform(x, M=[0.5, 0, 0, 0, 1e10, 0, 0, 0, -1e10],
                                                              dtype=types.INT32), [INTS])
    x = INTS[0].astype(np.float64)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out[:, 0], np.sign(x[:, 0]) * np.floor(np.abs(x[:, 0] * 0.5) + 0.5))  # halves out
    info = np.iinfo(np.int32)
    np.testing.assert_array_equal(out[:, 1], np.clip(x[:, 1] * 1e10, info.min, info.max))
    np.testing.assert_array_equal(out[:, 2], np.clip(x[:, 2] * -1e10, info.min, info.max))
