"""fn.jitter: every output component comes from within the allowed window of its own
position (clamped to the image), the batch changes, mask=0 copies, and a seed repeats."""
import numpy as np
import pytest

import torchdali
from torchdali import fn

from conftest import as_numpy_batch, assert_one_buffer, constant_source, requires_cuda, run_operator

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(0)
SIZES = ((17, 23), (1, 1), (31, 5), (12, 12))
# Every component distinct, so an output value tells where it was read from.
IMAGES = [np.arange(h * w * 3, dtype=np.int32).reshape(h, w, 3) for h, w in SIZES]


def source_positions(out, h, w):
    """(dy, dx) of every output component relative to its own position."""
    flat = out.astype(np.int64)
    y, x = flat // (w * 3), flat // 3 % w
    assert (flat % 3 == np.arange(3)).all()  # components stay in their channel
    return y - np.arange(h)[:, None, None], x - np.arange(w)[None, :, None]


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=requires_cuda)])
@pytest.mark.parametrize("n_degree", [1, 2, 5])
def test_offsets_stay_in_the_window(n_degree, device):
    got, layout = run_operator(torchdali, "jitter", IMAGES, device=device, nDegree=n_degree)
    assert layout == "HWC"
    lo = -(n_degree // 2)
    moved = 0
    for out, im, (h, w) in zip(got, IMAGES, SIZES):
        assert out.shape == im.shape and out.dtype == im.dtype
        dy, dx = source_positions(out, h, w)
        ys, xs = np.arange(h)[:, None, None], np.arange(w)[None, :, None]
        # A clamped offset lies at the image's edge; any other lies in [lo, lo + nDegree].
        for d, pos, size in ((dy, ys, h), (dx, xs, w)):
            src = pos + d
            inside = (d >= lo) & (d <= lo + n_degree)
            assert (inside | (src == 0) | (src == size - 1)).all()
        moved += int((dy != 0).sum() + (dx != 0).sum())
    assert moved > 0


def test_large_batch_gathered_in_runs_stays_in_the_window():
    # ~2.4 million components: more than one gather's run.
    sizes = ((400, 401), (399, 400), (5, 7), (402, 398), (401, 403), (397, 399))
    images = [np.arange(h * w * 3, dtype=np.int32).reshape(h, w, 3) for h, w in sizes]
    got, _ = run_operator(torchdali, "jitter", images, nDegree=3)
    for out, im, (h, w) in zip(got, images, sizes):
        assert out.shape == im.shape
        dy, dx = source_positions(out, h, w)
        assert (np.abs(dy) <= 2).all() and (np.abs(dx) <= 2).all()
        assert (dy != 0).mean() > 0.5 and (dx != 0).mean() > 0.5


def test_mask_copies_and_seed_repeats():
    masks = [np.int32(k % 2) for k in range(len(IMAGES))]
    first, _ = run_operator(torchdali, "jitter", IMAGES, arg_inputs=dict(mask=masks), nDegree=3)
    again, _ = run_operator(torchdali, "jitter", IMAGES, arg_inputs=dict(mask=masks), nDegree=3)
    for k, (a, b, im) in enumerate(zip(first, again, IMAGES)):
        np.testing.assert_array_equal(a, b)
        if masks[k] == 0:
            np.testing.assert_array_equal(a, im)
    assert not np.array_equal(first[3], IMAGES[3])  # jittered (sample 1 is 1x1)


def test_dense_batch_and_checkpoint_resume():
    dense = RNG.integers(0, 256, (4, 9, 14, 3), dtype=np.uint8)

    @torchdali.pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=5,
                            enable_checkpointing=True)
    def pipe():
        return fn.jitter(fn.external_source(constant_source(dense), layout="HWC"), nDegree=4)

    p = pipe()
    p.build()
    out = p.run()[0]
    assert_one_buffer(out)
    state = p.checkpoint()
    expected = [as_numpy_batch(p.run()[0]) for _ in range(2)]
    resumed = pipe(checkpoint=state)
    resumed.build()
    for exp in expected:
        for a, b in zip(as_numpy_batch(resumed.run()[0]), exp):
            np.testing.assert_array_equal(a, b)


def test_bad_input():
    with pytest.raises(ValueError, match="jitter.*nDegree.*must be positive"):
        fn.jitter(fn.random.uniform(), nDegree=0)
    with pytest.raises(ValueError, match="jitter.*layout 'CHW' is not supported"):
        run_operator(torchdali, "jitter", [im.transpose(2, 0, 1) for im in IMAGES], layout="CHW")
    with pytest.raises(ValueError, match="jitter.*expected HWC"):
        run_operator(torchdali, "jitter", [np.zeros((4, 4), np.uint8)], layout="")


@requires_cuda
def test_gpu_generator_on_the_device_repeats():
    got, _ = run_operator(torchdali, "jitter", IMAGES, device="gpu", nDegree=2)
    again, _ = run_operator(torchdali, "jitter", IMAGES, device="gpu", nDegree=2)
    for a, b in zip(got, again):
        np.testing.assert_array_equal(a, b)
