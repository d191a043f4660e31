"""segmentation.random_mask_pixel: foreground pixels only (by threshold or value), uniformly,
any pixel where asked or where a mask has no foreground; types and shapes as DALI's."""
import collections

import numpy as np
import pytest

import torchdali

from conftest import dali_or_skip

RNG = np.random.default_rng(4)


def draws(lib, masks, iterations=1, **kwargs):
    """[iterations][sample] coordinates chosen in `masks`."""
    @lib.pipeline_def(batch_size=len(masks), num_threads=1, device_id=None, seed=9)
    def pipe():
        x = lib.fn.external_source(source=lambda: masks, batch=True)
        return lib.fn.segmentation.random_mask_pixel(x, **kwargs)

    p = pipe()
    p.build()
    out = []
    for _ in range(iterations):
        (c,) = p.run()
        out.append([np.array(c[i]) for i in range(len(masks))])
    return out


MASKS = [(RNG.random((13, 17, 1)) < 0.05).astype(np.uint8) * RNG.integers(1, 4, (13, 17, 1)).astype(np.uint8),
         np.zeros((6, 5, 1), np.uint8),  # no foreground
         (RNG.random((20, 9, 1)) < 0.5).astype(np.uint8) * 2]


@pytest.mark.parametrize("kwargs,is_foreground", [
    (dict(foreground=1), lambda v: v > 0),
    (dict(foreground=1, threshold=1.5), lambda v: v > 1.5),
    (dict(foreground=1, value=2), lambda v: v == 2),
])
def test_foreground_pixels_only_and_any_pixel_without_foreground(kwargs, is_foreground):
    for batch in draws(torchdali, MASKS, iterations=20, **kwargs):
        for mask, c in zip(MASKS, batch):
            assert c.dtype == np.int64 and c.shape == (3,) and (c >= 0).all() and (c < mask.shape).all()
            if is_foreground(mask).any():
                assert is_foreground(mask[tuple(c)])


def test_choices_are_uniform_and_per_sample_foreground_flags_hold():
    mask = np.zeros((4, 6, 1), np.uint8)
    mask[1, 2], mask[3, 5], mask[0, 0] = 1, 1, 1
    masks = [mask, mask]
    seen = collections.Counter()
    anywhere = set()
    flags = [np.int32(1), np.int32(0)]

    @torchdali.pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=3)
    def pipe():
        x = torchdali.fn.external_source(source=lambda: masks, batch=True)
        f = torchdali.fn.external_source(source=lambda: flags, batch=True)
        return torchdali.fn.segmentation.random_mask_pixel(x, foreground=f)

    p = pipe()
    p.build()
    for _ in range(600):
        (c,) = p.run()
        seen[tuple(np.array(c[0]))] += 1
        anywhere.add(tuple(np.array(c[1])))
    assert set(seen) == {(1, 2, 0), (3, 5, 0), (0, 0, 0)} and min(seen.values()) > 150
    assert len(anywhere) > 12  # sample 1 draws from all 24 pixels


def test_types_and_shapes_match_dali():
    dali = dali_or_skip()
    ours, theirs = draws(torchdali, MASKS, foreground=1)[0], draws(dali, MASKS, foreground=1)[0]
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape


def test_an_empty_mask_is_named():
    with pytest.raises(ValueError, match=r"random_mask_pixel.*sample 1 is empty \(0, 5, 1\)"):
        draws(torchdali, [MASKS[0], np.zeros((0, 5, 1), np.uint8)], foreground=1)
