"""transforms.*: the matrices against what they mean (points moved as the transform says)
and against DALI on the CPU (skipped without it), with constant and per-sample arguments,
composed with an input transform in both orders; bad arguments named."""
import numpy as np
import pytest

import torchdali
from torchdali import fn

from conftest import dali_or_skip

BATCH = 4
RNG = np.random.default_rng(5)


def run(lib, body, feeds=()):
    """The outputs of one iteration of a CPU pipeline of `lib` whose graph is body(lib.fn,
    *external sources fed `feeds`, lists of sample arrays)."""
    @lib.pipeline_def(batch_size=BATCH, num_threads=1, device_id=None)
    def pipe():
        sources = [lib.fn.external_source(source=(lambda f: lambda: f)(f), batch=True) for f in feeds]
        out = body(lib.fn, *sources)
        return out if isinstance(out, tuple) else (out,)

    p = pipe()
    p.build()
    return [np.stack([np.array(o[i]) for i in range(BATCH)]) for o in p.run()]


def samples(*shape, lo=-3.0, hi=3.0):
    return [RNG.uniform(lo, hi, shape).astype(np.float32) for _ in range(BATCH)]


def apply(m, points):
    """Points [k, d] moved by the affine [d, d + 1] matrix m."""
    return points @ m[:, :-1].T + m[:, -1]


CASES = {
    "translation": (lambda f: f.transforms.translation(offset=[3.0, -4.0, 0.5]), ()),
    "translation per sample": (lambda f, o: f.transforms.translation(offset=o), (samples(2),)),
    "scale about a center": (lambda f: f.transforms.scale(scale=[2.0, 0.5], center=[1.0, -2.0]), ()),
    "scale one value": (lambda f: f.transforms.scale(scale=1.5, ndim=3), ()),
    "scale per sample": (lambda f, s, c: f.transforms.scale(scale=s, center=c), (samples(3), samples(3))),
    "rotation 2-D": (lambda f: f.transforms.rotation(angle=33.0, center=[4.0, 1.0]), ()),
    "rotation per sample": (lambda f, a: f.transforms.rotation(angle=a), (samples(lo=-180, hi=180),)),
    "rotation 3-D": (lambda f, a, ax: f.transforms.rotation(angle=a, axis=ax, center=[1.0, 2.0, 3.0]),
                     (samples(lo=-180, hi=180), samples(3, lo=0.5))),
    "shear factors": (lambda f: f.transforms.shear(shear=[0.5, -0.25], center=[2.0, 3.0]), ()),
    "shear angles 3-D": (lambda f, a: f.transforms.shear(angles=a), (samples(3, 2, lo=-60, hi=60),)),  # per sample: a [3, 2] matrix
    "crop": (lambda f: f.transforms.crop(from_start=[10.0, 20.0], from_end=[50.0, 30.0], to_start=[0.0],
                                         to_end=[1.0]), ()),
    "crop absolute per sample": (lambda f, a, b: f.transforms.crop(from_start=a, from_end=b, absolute=True),
                                 (samples(2), samples(2))),
    "after an input": (lambda f: f.transforms.rotation(f.transforms.scale(scale=[2.0, 3.0]), angle=90.0), ()),
    "before an input": (lambda f: f.transforms.translation(f.transforms.scale(scale=[2.0, 3.0]), offset=[1.0, 1.0],
                                                           reverse_order=True), ()),
    "combine": (lambda f: f.transforms.combine(f.transforms.scale(scale=[2.0, 3.0]),
                                               f.transforms.translation(offset=[3.0, 4.0]),
                                               f.transforms.rotation(angle=90.0)), ()),
    "combine reversed": (lambda f, o: f.transforms.combine(f.transforms.shear(shear=[0.5, 0.0]),
                                                           f.transforms.translation(offset=o), reverse_order=True),
                         (samples(2),)),
}


@pytest.mark.parametrize("case", CASES)
def test_matches_dali(case):
    dali = dali_or_skip()
    body, feeds = CASES[case]
    ours, theirs = run(torchdali, body, feeds), run(dali, body, feeds)
    for a, b in zip(ours, theirs):
        assert a.dtype == np.float32 and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_rotation_scale_and_translation_move_points_as_they_say():
    rot, scaled, moved = run(torchdali, lambda f: (f.transforms.rotation(angle=90.0, center=[1.0, 1.0]),
                                                   f.transforms.scale(scale=[2.0, 4.0], center=[1.0, 1.0]),
                                                   f.transforms.translation(offset=[5.0, -1.0])))
    points = np.array([[1.0, 1.0], [2.0, 1.0], [0.0, 3.0]])
    np.testing.assert_allclose(apply(rot[0], points), [[1, 1], [1, 2], [-1, 0]], atol=1e-6)  # counter-clockwise
    np.testing.assert_allclose(apply(scaled[0], points), [[1, 1], [3, 1], [-1, 9]], atol=1e-6)  # center stays
    np.testing.assert_allclose(apply(moved[0], points), points + [5, -1], atol=1e-6)


def test_crop_maps_the_source_box_onto_the_destination_box():
    (m,) = run(torchdali, lambda f: f.transforms.crop(from_start=[10.0, 20.0], from_end=[50.0, 30.0],
                                                      to_start=[-1.0, 0.0], to_end=[1.0, 5.0]))
    np.testing.assert_allclose(apply(m[0], np.array([[10.0, 20.0], [50.0, 30.0], [30.0, 25.0]])),
                               [[-1, 0], [1, 5], [0, 2.5]], atol=1e-6)


def test_composition_applies_the_transforms_in_order():
    a, b, combined, chained = run(torchdali, lambda f: (
        f.transforms.shear(shear=[0.5, 0.25]), f.transforms.rotation(angle=30.0, center=[1.0, 2.0]),
        f.transforms.combine(f.transforms.shear(shear=[0.5, 0.25]),
                             f.transforms.rotation(angle=30.0, center=[1.0, 2.0])),
        f.transforms.rotation(f.transforms.shear(shear=[0.5, 0.25]), angle=30.0, center=[1.0, 2.0])))
    points = RNG.uniform(-5, 5, (7, 2))
    expected = apply(b[0], apply(a[0], points))
    np.testing.assert_allclose(apply(combined[0], points), expected, atol=1e-5)
    np.testing.assert_allclose(apply(chained[0], points), expected, atol=1e-5)


@pytest.mark.parametrize("body,match", [
    (lambda f: f.transforms.rotation(f.transforms.translation(offset=[1.0, 2.0, 3.0]), angle=5.0),
     r"transforms.rotation.*input transforms are 3-D, this operator's are 2-D"),
    (lambda f: f.transforms.shear(shear=[0.1, 0.2], angles=[1.0, 2.0]), r"transforms.shear.*exactly one of `shear`"),
    (lambda f: f.transforms.shear(shear=[0.1, 0.2, 0.3]), r"transforms.shear.*'shear' has 3 values"),
    (lambda f: f.transforms.shear(angles=[90.0, 0.0]), r"transforms.shear.*'angles' must lie between -90 and 90"),
    (lambda f: f.transforms.scale(scale=2.0), r"transforms.scale.*give `ndim`"),
    (lambda f: f.transforms.scale(scale=[2.0, 3.0], center=[1.0, 1.0, 1.0]), r"transforms.scale.*'center' has 3"),
    (lambda f: f.transforms.rotation(angle=5.0, axis=[0.0, 0.0, 0.0]), r"transforms.rotation.*'axis'.*non-zero"),
    (lambda f: f.transforms.crop(from_start=[1.0, 2.0, 3.0], to_end=[1.0, 2.0]), r"transforms.crop.*'to_end' has 2"),
    (lambda f: f.transforms.combine(f.transforms.translation(offset=[1.0]), f.transforms.translation(offset=[1.0, 2.0])),
     r"transforms.combine.*input 0 is 1-D, input 1 is 2-D"),
])
def test_bad_arguments_are_named(body, match):
    with pytest.raises(Exception, match=match):
        run(torchdali, body)


def test_an_input_that_is_no_transform_is_named():
    with pytest.raises(ValueError, match=r"transforms.scale.*input sample 0 has shape \(2, 2\); expected affine"):
        run(torchdali, lambda f, m: f.transforms.scale(m, scale=2.0), (samples(2, 2),))
    mixed = samples(2, 3)[:3] + samples(3, 4)[:1]
    with pytest.raises(ValueError, match=r"transforms.scale.*input sample 3 has shape \(3, 4\); expected affine"):
        run(torchdali, lambda f, m: f.transforms.scale(m, scale=2.0), (mixed,))


def test_angle_is_required():
    with pytest.raises(Exception, match=r"transforms.rotation.*angle"):
        run(torchdali, lambda f: f.transforms.rotation())
