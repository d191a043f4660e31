"""torchdali.auto_aug against DALI 2.4's nvidia.dali.auto_aug on the CPU: every augmentation
at given magnitude bins and signs, the suites and policies (structure, magnitudes and
parameters), the random choices (distributions with fixed seeds), whole AutoAugment /
RandAugment / TrivialAugment pipelines, and the errors.

The warps (shear, translate, rotate) and sharpness may differ from DALI by 1 in a few pixels: the
warp kernels compute each source coordinate directly where DALI's CPU kernel accumulates
it along a row (see tests/test_warp.py), and the filter accumulates in another order; all
the other augmentations are exact."""
import importlib
import os
import re
import runpy
import warnings

import numpy as np
import pytest

import torchdali
from torchdali import types
from torchdali.auto_aug import augmentations, auto_augment, core, rand_augment, trivial_augment

from conftest import as_numpy_batch, constant_source, dali_or_skip, requires_cuda

NAMES = ["shear_x", "shear_y", "translate_x", "translate_y", "translate_x_no_shape", "translate_y_no_shape",
         "rotate", "brightness", "contrast", "color", "sharpness", "posterize", "solarize", "solarize_add", "invert",
         "equalize", "auto_contrast", "identity"]
# within 1 of DALI (see the module): the warps and the filter
NEAR = {"shear_x", "shear_y", "translate_x", "translate_y", "translate_x_no_shape", "translate_y_no_shape", "rotate",
        "sharpness"}
SIZES = [(31, 45, 3), (17, 23, 3), (40, 33, 3), (9, 11, 3), (1, 1, 3), (5, 70, 3)]
SIGNS = [0, 1, 1, 0, 1, 0]


def images(sizes=SIZES, seed=0):
    g = np.random.default_rng(seed)
    return [g.integers(0, 256, s, dtype=np.uint8) for s in sizes]


def modules(lib):
    """(augmentations, core, auto_augment, rand_augment, trivial_augment) of torchdali or DALI."""
    return tuple(importlib.import_module(f"{lib.__name__}.auto_aug.{m}")
                 for m in ("augmentations", "core", "auto_augment", "rand_augment", "trivial_augment"))


def run(lib, define, batch, layout="HWC", conditionals=True, seed=1, iterations=1, device="cpu"):
    """Outputs (NumPy, per iteration) and layout of `define(lib, x)` over the constant `batch`."""
    @lib.pipeline_def(batch_size=len(batch), num_threads=1, device_id=None if device == "cpu" else 0, seed=seed,
                      enable_conditionals=conditionals)
    def pipe():
        x = lib.fn.external_source(constant_source(batch), layout=layout)
        return define(lib, x.gpu() if device == "gpu" else x)

    p = pipe()
    p.build()
    outs = [p.run()[0] for _ in range(iterations)]
    return [as_numpy_batch(o) for o in outs], outs[0].layout()


def per_sample(lib, values, dtype=np.int32):
    return lib.fn.external_source(constant_source([np.array(v, dtype) for v in values]))


def call_augmentation(lib, x, name, bins, signs, num_bins, setup=None, **kwargs):
    """Augmentation `name` (of `lib`, reconfigured by `setup`) with per-sample bins and signs."""
    a, c = modules(lib)[:2]
    aug = getattr(a, name) if isinstance(name, str) else name(lib)
    if setup:
        aug = aug.augmentation(**setup)
    b = bins if isinstance(bins, int) else per_sample(lib, bins)
    mag_bin = c.signed_bin(b, random_sign=per_sample(lib, signs)) if aug.randomly_negate else b
    if kwargs.get("shape") == "of the images":
        kwargs["shape"] = x.shape()
    return aug(x, magnitude_bin=mag_bin, num_magnitude_bins=num_bins, **kwargs)


def assert_matches(ours, theirs, near):
    """Equal to DALI's batch, or within 1 (mean difference below 0.05) where `near`."""
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs):
        assert o.shape == t.shape and o.dtype == t.dtype
        if near:
            d = np.abs(o.astype(np.int64) - t.astype(np.int64))
            assert d.max(initial=0) <= 1 and d.mean() < 0.05
        else:
            np.testing.assert_array_equal(o, t)


def both(define, batch, near, layout="HWC"):
    dali = dali_or_skip()
    (ours,), our_layout = run(torchdali, define, batch, layout)
    (theirs,), their_layout = run(dali, define, batch, layout)
    assert_matches(ours, theirs, near)
    assert our_layout == their_layout
    return ours


def translations_kwargs(name):
    return {"shape": "of the images"} if name in ("translate_x", "translate_y") else {}


# --- 1. each augmentation against DALI's ---

@pytest.mark.parametrize("num_bins,bins", [(11, [0, 3, 10, 7, 5, 1]), (31, [30, 0, 15, 29, 2, 8])])
@pytest.mark.parametrize("name", NAMES)
def test_augmentation_matches_dali(name, num_bins, bins):
    out = both(lambda lib, x: call_augmentation(lib, x, name, bins, SIGNS, num_bins, **translations_kwargs(name)),
               images(), name in NEAR)
    assert [o.shape for o in out] == SIZES or name == "rotate"


@pytest.mark.parametrize("bin_", [0, 4, 10])
@pytest.mark.parametrize("name", [n for n in NAMES if getattr(augmentations, n).mag_range is not None])
def test_augmentation_with_an_int_bin_matches_dali(name, bin_):
    both(lambda lib, x: call_augmentation(lib, x, name, bin_, SIGNS, 11, **translations_kwargs(name)), images(),
         name in NEAR)


@pytest.mark.parametrize("name,kwargs", [
    ("shear_x", dict(interp_type="INTERP_NN")), ("rotate", dict(interp_type="INTERP_NN")),
    ("shear_y", dict(fill_value=None)), ("rotate", dict(fill_value=None)), ("rotate", dict(rotate_keep_size=False)),
    ("translate_x_no_shape", dict(fill_value=7, interp_type="INTERP_NN")), ("translate_y", dict(shape=(13, 17))),
    ("translate_x", dict(shape=(13, 17), fill_value=0)),
])
def test_warp_options_match_dali(name, kwargs):
    def define(lib, x):
        given = {k: getattr(lib.types, v) if k == "interp_type" else v for k, v in kwargs.items()}
        return call_augmentation(lib, x, name, [2, 9, 10, 4, 1, 6], SIGNS, 11, **given)
    both(define, images(seed=3), name in NEAR)


@pytest.mark.parametrize("name,setup", [
    ("shear_x", dict(mag_range=(0, 0.99))), ("rotate", dict(mag_range=(0, 135))),
    ("translate_y_no_shape", dict(mag_range=(0, 7))), ("brightness", dict(mag_range=(0.1, 1.9), randomly_negate=False,
                                                                           mag_to_param=None)),
    ("posterize", dict(mag_range=(8, 2))), ("solarize", dict(mag_range=np.array([0, 30, 128, 200, 250, 256]))),
    ("sharpness", dict(mag_to_param="sharpness_kernel_shifted", mag_range=(0.1, 1.9), randomly_negate=False)),
])
def test_reconfigured_augmentation_matches_dali(name, setup):
    bins, num_bins = [0, 5, 3, 2, 4, 1], 6

    def define(lib, x):
        given = {k: getattr(modules(lib)[0], v) if k == "mag_to_param" and isinstance(v, str) else v
                 for k, v in setup.items()}
        return call_augmentation(lib, x, name, bins, SIGNS, num_bins, setup=given)
    both(define, images(seed=4), name in NEAR)


@pytest.mark.parametrize("name", [n for n in NAMES if n not in ("translate_x", "translate_y")])
def test_videos_match_dali(name):
    g = np.random.default_rng(5)
    videos = [g.integers(0, 256, s, dtype=np.uint8) for s in [(3, 13, 17, 3), (2, 9, 5, 3), (1, 20, 11, 3)]]
    out = both(lambda lib, x: call_augmentation(lib, x, name, [2, 9, 5], [1, 0, 1], 11), videos, name in NEAR,
               layout="FHWC")
    assert out[0].shape[0] == 3


def _suites(lib):
    """The named suites and policies of `lib`, as name -> augmentations."""
    _, _, aa, ra, ta = modules(lib)
    suites = {"rand": ra.get_rand_augment_suite(), "rand_shape": ra.get_rand_augment_suite(use_shape=True),
              "rand_non_monotonic": ra.get_rand_augment_non_monotonic_suite(max_translate_abs=(20, 40)),
              "trivial": ta.get_trivial_augment_wide_suite(), "trivial_shape": ta.get_trivial_augment_wide_suite(True)}
    for policy in ("image_net", "reduced_cifar10", "svhn"):
        suites[policy] = list(getattr(aa, f"get_{policy}_policy")(use_shape=True).augmentations.values())
    suites["reduced_image_net"] = list(aa.get_reduced_image_net_policy().augmentations.values())
    return suites


SUITE_CASES = [(suite, i) for suite, augs in _suites(torchdali).items() for i in range(len(augs))]


@pytest.mark.parametrize("suite,index", SUITE_CASES)
def test_suite_augmentations_match_dali(suite, index):
    """Each augmentation as configured in the suites and policies, at bins of 11 from both ends."""
    aug = _suites(torchdali)[suite][index]

    def define(lib, x):
        return call_augmentation(lib, x, lambda lib: _suites(lib)[suite][index], [0, 10, 5, 3, 8, 1], SIGNS, 11,
                                 **({"shape": "of the images"} if suite.endswith("shape") or suite in
                                    ("image_net", "reduced_cifar10", "svhn") else {}))
    both(define, images(seed=6), aug.op.__name__ in NEAR)


def _applied(lib, scheme, name, x):
    """`name` of the RandAugment suite, alone, through one of the apply_* functions."""
    _, c, aa, ra, ta = modules(lib)
    aug = next(a for a in ra.get_rand_augment_suite(use_shape=True) if a.name == name)
    shape = {"shape": x.shape()} if name.startswith("translate") else {}
    if scheme == "rand":
        return ra.apply_rand_augment([aug], x, 1, 7, **shape)
    if scheme == "trivial":
        return ta.apply_trivial_augment([aug], x, num_magnitude_bins=1, **shape)
    policy = c.Policy("one", 11, [[(aug, 1.0, None if aug.mag_range is None else 7)]])
    return aa.apply_auto_augment(policy, x, **shape)


@pytest.mark.parametrize("scheme", ["rand", "trivial", "auto"])
@pytest.mark.parametrize("name", [a.name for a in rand_augment.get_rand_augment_suite()])
def test_apply_one_augmentation_matches_dali(scheme, name):
    """Through apply_*: the output of each sample is DALI's with the magnitude drawn either
    way (the signs are random; both occur)."""
    dali = dali_or_skip()
    batch = images(SIZES * 2, seed=7)
    (ours,), _ = run(torchdali, lambda lib, x: _applied(lib, scheme, name, x), batch)
    aug = next(a for a in rand_augment.get_rand_augment_suite(use_shape=True) if a.name == name)
    bin_ = 0 if scheme == "trivial" else 7
    num_bins = 1 if scheme == "trivial" else (31 if scheme == "rand" else 11)
    candidates = []
    for sign in (0, 1) if aug.randomly_negate else (0,):
        def define(lib, x, sign=sign):
            suite = modules(lib)[3].get_rand_augment_suite(use_shape=True)
            return call_augmentation(lib, x, lambda lib: next(a for a in suite if a.name == name), bin_,
                                     [sign] * len(batch), num_bins, **translations_kwargs(name))
        candidates.append(run(dali, define, batch)[0][0])
    near = aug.op.__name__ in NEAR
    used = set()
    for i, o in enumerate(ours):
        fits = [s for s, c in enumerate(candidates) if o.shape == c[i].shape and
                np.abs(o.astype(int) - c[i].astype(int)).max(initial=0) <= (1 if near else 0)]
        assert fits, f"sample {i} matches no sign of DALI's {name}"
        used.update(fits)
    assert len(used) == len(candidates)


# --- 2. suites and policies, structurally ---

def _function_names(text):
    return re.sub(r"<function ([\w.<>]+) at 0x[0-9a-f]+>", r"\1", text)


def _description(aug, num_bins):
    """What an augmentation is: its name, operation, settings and the parameter of every
    (signed) magnitude of `num_bins` bins."""
    mags = aug._get_magnitudes(num_bins)
    params = None if mags is None else aug._map_mags_to_params(mags)
    signed = None if mags is None or not aug.randomly_negate else aug._map_mags_to_params(-np.asarray(mags))
    return (aug.name, aug.op.__name__, None if aug.mag_range is None else np.asarray(aug.mag_range).tolist(),
            aug.randomly_negate, aug.param_device, getattr(aug._mag_to_param, "__name__", None),
            None if params is None else (params.dtype, params.tolist()),
            None if signed is None else signed.tolist())


@pytest.mark.parametrize("suite", sorted(_suites(torchdali)))
@pytest.mark.parametrize("num_bins", [11, 31])
def test_suites_equal_dali(suite, num_bins):
    dali = dali_or_skip()
    ours, theirs = _suites(torchdali)[suite], _suites(dali)[suite]
    assert [_description(a, num_bins) for a in ours] == [_description(a, num_bins) for a in theirs]


POLICY_CALLS = [("image_net", {}), ("image_net", dict(use_shape=True, max_translate_rel=(0.3, 0.6))),
                ("reduced_cifar10", dict(max_translate_abs=17)), ("svhn", dict(use_shape=True)),
                ("reduced_image_net", None)]


@pytest.mark.parametrize("policy,kwargs", POLICY_CALLS)
def test_policies_equal_dali(policy, kwargs):
    dali = dali_or_skip()
    ours, theirs = (getattr(modules(lib)[2], f"get_{policy}_policy")(**(kwargs or {})) for lib in (torchdali, dali))
    assert (ours.name, ours.num_magnitude_bins) == (theirs.name, theirs.num_magnitude_bins)
    assert [[(a.name, p, m) for a, p, m in sub] for sub in ours.sub_policies] == \
        [[(a.name, p, m) for a, p, m in sub] for sub in theirs.sub_policies]
    assert [_description(a, 11) for a in ours.augmentations.values()] == \
        [_description(a, 11) for a in theirs.augmentations.values()]
    assert _function_names(repr(ours)).replace("torchdali", "nvidia.dali") == _function_names(repr(theirs))
    # the per-step tables that apply_auto_augment indexes by sub-policy
    steps = max(len(sub) for sub in theirs.sub_policies)
    probabilities, bins, ids, stages = auto_augment._tables(ours, steps)
    for i, sub in enumerate(theirs.sub_policies):
        assert probabilities[i].tolist() == pytest.approx([p for _, p, _ in sub] + [0] * (steps - len(sub)))
        assert bins[i].tolist() == [-999 if m is None else m for _, _, m in sub] + [0] * (steps - len(sub))
    their_ids, their_stages = modules(dali)[2]._sub_policy_to_augmentation_matrix_map(theirs)
    np.testing.assert_array_equal(ids, their_ids)
    assert [[a.name for a in s] for s in stages] == [[a.name for a in s] for s in their_stages]


def test_policy_renames_different_augmentations_of_one_name():
    dali = dali_or_skip()

    def policy(lib):
        a, c = modules(lib)[:2]
        return c.Policy("p", 5, [[(a.rotate, 0.5, 1), (a.rotate.augmentation(mag_range=(0, 5)), 0.2, 3)],
                                 [(a.invert, 1, None)]])
    ours, theirs = policy(torchdali), policy(dali)
    assert list(ours.augmentations) == list(theirs.augmentations) == ["0__rotate", "1__rotate", "2__invert"]
    assert _function_names(repr(ours)) == _function_names(repr(theirs))


def test_augmentation_settings_and_repr():
    dali = dali_or_skip()
    for name in NAMES:
        ours, theirs = getattr(augmentations, name), getattr(modules(dali)[0], name)
        assert _description(ours, 11) == _description(theirs, 11)
        assert _function_names(repr(ours)) == _function_names(repr(theirs))
    changed = augmentations.rotate.augmentation(mag_range=(0, 5), name="small")
    assert (changed.op, changed.mag_range, changed.name, changed.randomly_negate) == \
        (augmentations.rotate.op, (0, 5), "small", True)


# --- 3. the random choices ---

def recorders(lib, negated, num_bins):
    """Augmentations k that record themselves: data * 1000 + 100 k + 50 + their parameter,
    the parameter being the magnitude (bin + 1), negated or not."""
    c = modules(lib)[1]

    def make(k, negate):
        def record(data, param):
            return data * 1000 + (param + (100 * k + 50))
        return c.augmentation(record, mag_range=(1, num_bins), randomly_negate=negate, name=f"op{k}",
                              mag_to_param=lambda m: np.int32(np.round(m)))
    return [make(k, negate) for k, negate in enumerate(negated)]


def recorded(define, batch_size=128, iterations=12, seed=11):
    """The codes (one list per sample, in order) that the recorders left."""
    zeros = [np.int32(0)] * batch_size
    outs, _ = run(torchdali, define, zeros, layout="", seed=seed, iterations=iterations)
    codes = []
    for batch in outs:
        for v in batch:
            v, seq = int(v), []
            while v:
                seq.insert(0, v % 1000)
                v //= 1000
            codes.append(tuple(seq))
    return codes


def decode(code):
    """(augmentation index, signed magnitude) of a recorded code."""
    return code // 100, code % 100 - 50


def assert_frequencies(observed, expected, n):
    """Counts within 4.5 standard deviations of their binomial expectation (a fixed seed:
    either always passes or always fails); no outcome outside `expected`."""
    assert set(observed) <= set(expected), set(observed) - set(expected)
    for outcome, p in expected.items():
        count = observed.get(outcome, 0)
        sigma = max(np.sqrt(n * p * (1 - p)), 1.0)
        assert abs(count - n * p) <= 4.5 * sigma, (outcome, count, n * p)


def counts(values):
    out = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


NEGATE = [True, False, True, False, True]


# An explicit seed too: DALI gives it to every random choice, which makes them depend on each
# other (with seed=5 its TrivialAugment makes 10 of the 48 combinations); torchdali's are independent.
SEEDS = [None, 5]


@pytest.mark.parametrize("seed", SEEDS)
def test_rand_augment_chooses_uniformly_and_signs_evenly(seed):
    codes = recorded(lambda lib, x: rand_augment.apply_rand_augment(recorders(lib, NEGATE, 8), x, n=2, m=5,
                                                                    num_magnitude_bins=8, seed=seed))
    n = len(codes)
    assert all(len(c) == 2 for c in codes)
    steps = [[decode(c[i]) for c in codes] for i in range(2)]
    expected = {(k, s * 6): 1 / len(NEGATE) / (2 if NEGATE[k] else 1)
                for k in range(len(NEGATE)) for s in ((1, -1) if NEGATE[k] else (1,))}
    for step in steps:
        assert_frequencies(counts(step), expected, n)
    # the two steps are independent
    pairs = counts((a[0], b[0]) for a, b in zip(*steps))
    assert_frequencies(pairs, {(i, j): 1 / 25 for i in range(5) for j in range(5)}, n)


@pytest.mark.parametrize("seed", SEEDS)
def test_trivial_augment_chooses_augmentation_bin_and_sign_uniformly(seed):
    codes = recorded(lambda lib, x: trivial_augment.apply_trivial_augment(recorders(lib, NEGATE, 6), x,
                                                                          num_magnitude_bins=6, seed=seed))
    assert all(len(c) == 1 for c in codes)
    expected = {(k, s * (b + 1)): 1 / 5 / 6 / (2 if NEGATE[k] else 1)
                for k in range(5) for b in range(6) for s in ((1, -1) if NEGATE[k] else (1,))}
    assert_frequencies(counts(decode(c[0]) for c in codes), expected, len(codes))


@pytest.mark.parametrize("seed", SEEDS)
def test_auto_augment_follows_the_policy_probabilities(seed):
    def define(lib, x):
        op0, op1, op2 = recorders(lib, [True, False, True], 11)
        policy = modules(lib)[1].Policy("test", 11, [[(op0, 0.3, 2), (op1, 0.7, 5)], [(op2, 1.0, 0)],
                                                     [(op1, 0.5, 9), (op0, 1.0, 4)]])
        return auto_augment.apply_auto_augment(policy, x, seed=seed)
    codes = recorded(define, iterations=16)
    expected = {}

    def add(seq, p):
        expected[seq] = expected.get(seq, 0) + p / 3
    for sign0 in (1, -1):  # sub-policy 0: op0 (bin 2, negated half the time), then op1 (bin 5)
        add(((0, sign0 * 3), (1, 6)), 0.3 * 0.7 / 2)
        add(((0, sign0 * 3),), 0.3 * 0.3 / 2)
    add(((1, 6),), 0.7 * 0.7)
    add((), 0.7 * 0.3)
    for sign2 in (1, -1):  # sub-policy 1: op2 (bin 0) always
        add(((2, sign2 * 1),), 1 / 2)
    for sign0 in (1, -1):  # sub-policy 2: op1 (bin 9) half the time, then op0 (bin 4) always
        add(((1, 10), (0, sign0 * 5)), 0.5 / 2)
        add(((0, sign0 * 5),), 0.5 / 2)
    observed = counts(tuple(decode(c) for c in seq) for seq in codes)
    assert_frequencies(observed, expected, len(codes))


def test_seed_repeats_the_choices():
    def define(lib, x):
        return rand_augment.apply_rand_augment(recorders(lib, NEGATE, 8), x, n=3, m=2, num_magnitude_bins=8, seed=5)
    first, again = recorded(define, iterations=2, seed=1), recorded(define, iterations=2, seed=99)
    assert first == again and len(set(first)) > 20


def test_select_applies_the_indexed_augmentation():
    indices = [3, 0, 4, 1, 2, 2, 0]

    def define(lib, x):
        return core.select(recorders(lib, [False] * 5, 4), per_sample(lib, indices), x, magnitude_bin=1,
                           num_magnitude_bins=4)
    (out,), _ = run(torchdali, define, [np.int32(0)] * len(indices), layout="")
    assert [decode(int(v)) for v in out] == [(k, 2) for k in indices]


def test_custom_augmentation_with_a_per_sample_if_is_converted():
    @core.augmentation(mag_range=(0, 10))
    def invert_if_large(data, threshold):
        if threshold > 5:
            out = types.Constant(255, dtype=types.UINT8) - data
        else:
            out = data
        return out

    batch = images(seed=8)

    def define(lib, x):
        return core.select([invert_if_large, augmentations.identity], per_sample(lib, [0, 0, 1, 0, 1, 0]), x,
                           magnitude_bin=per_sample(lib, [9, 2, 0, 6, 0, 5]), num_magnitude_bins=11)
    (out,), _ = run(torchdali, define, batch)
    expected = [255 - batch[0], batch[1], batch[2], 255 - batch[3], batch[4], batch[5]]
    for o, e in zip(out, expected):
        np.testing.assert_array_equal(o, e)


# --- 4. whole pipelines ---

FULL = {
    "auto_augment_image_net": lambda lib, x: modules(lib)[2].auto_augment_image_net(x),
    "auto_augment_svhn_shape": lambda lib, x: modules(lib)[2].auto_augment(x, "svhn", shape=x.shape()[:2]),
    "auto_augment_reduced_cifar10": lambda lib, x: modules(lib)[2].auto_augment(x, "reduced_cifar10",
                                                                                max_translate_abs=(5, 9)),
    "auto_augment_reduced_image_net": lambda lib, x: modules(lib)[2].auto_augment(x, "reduced_image_net",
                                                                                  fill_value=None),
    "rand_augment": lambda lib, x: modules(lib)[3].rand_augment(x, n=2, m=9),
    "rand_augment_shape_nn": lambda lib, x: modules(lib)[3].rand_augment(
        x, n=3, m=30, shape=x.shape()[:2], interp_type=lib.types.INTERP_NN, monotonic_mag=False,
        excluded=["rotate", "equalize"]),
    "trivial_augment_wide": lambda lib, x: modules(lib)[4].trivial_augment_wide(x),
    "trivial_augment_wide_shape": lambda lib, x: modules(lib)[4].trivial_augment_wide(
        x, num_magnitude_bins=11, shape=x.shape()[:2], max_translate_rel=0.3, seed=3),
}
FULL_SIZES = [(31, 45, 3), (17, 23, 3), (40, 33, 3), (9, 11, 3), (1, 1, 3), (5, 70, 3), (64, 63, 3), (2, 3, 3)]


@pytest.mark.parametrize("name", sorted(FULL))
def test_full_pipelines_run(name):
    batch = images(FULL_SIZES, seed=9)
    outs, layout = run(torchdali, FULL[name], batch, iterations=3)
    assert layout == "HWC"
    for out in outs:
        assert [o.shape for o in out] == FULL_SIZES and all(o.dtype == np.uint8 for o in out)
    changed = sum(not np.array_equal(o, b) for out in outs for o, b in zip(out, batch))
    assert changed >= len(batch)  # most samples are augmented
    assert any(not np.array_equal(a, b) for a, b in zip(outs[0], outs[1]))  # new choices every iteration


def test_full_pipeline_on_videos():
    g = np.random.default_rng(10)
    videos = [g.integers(0, 256, s, dtype=np.uint8) for s in [(3, 13, 17, 3), (2, 9, 5, 3), (1, 20, 11, 3)]]
    (out,), layout = run(torchdali, lambda lib, x: rand_augment.rand_augment(x, 2, 9, shape=(20, 20)), videos,
                         layout="FHWC")
    assert layout == "FHWC" and [o.shape for o in out] == [v.shape for v in videos]


@requires_cuda
@pytest.mark.parametrize("name", sorted(FULL))
def test_full_pipelines_on_the_gpu_match_the_cpu(name):
    """The random choices are CPU operators seeded alike, so GPU data takes the same ones."""
    batch = images(FULL_SIZES, seed=9)
    (cpu,), _ = run(torchdali, FULL[name], batch)
    (gpu,), layout = run(torchdali, FULL[name], batch, device="gpu")
    assert layout == "HWC"
    for c, g in zip(cpu, gpu):
        assert c.shape == g.shape and g.dtype == np.uint8
        assert np.abs(c.astype(int) - g.astype(int)).mean() < 0.5


@requires_cuda
@pytest.mark.parametrize("name", NAMES)
def test_augmentations_on_the_gpu_match_the_cpu(name):
    batch = images(seed=12)

    def define(lib, x):
        return call_augmentation(lib, x, name, [0, 3, 10, 7, 5, 1], SIGNS, 11, **translations_kwargs(name))
    (cpu,), _ = run(torchdali, define, batch)
    (gpu,), _ = run(torchdali, define, batch, device="gpu")
    assert_matches(gpu, cpu, near=name in NEAR)


# --- 5. errors ---

def x_shape(x):
    return x.shape()[:2]


ERRORS = [
    (lambda lib, x: modules(lib)[3].rand_augment(x, n=-1, m=9), "`n` must be a non-negative integer"),
    (lambda lib, x: modules(lib)[3].rand_augment(x, n=1.5, m=9), "`n` must be a non-negative integer"),
    (lambda lib, x: modules(lib)[3].rand_augment(x, n=2, m=31), r"`m` must be an integer from `\[0, 30\]`"),
    (lambda lib, x: modules(lib)[3].rand_augment(x, n=2, m=-1, num_magnitude_bins=5),
     r"`m` must be an integer from `\[0, 4\]`"),
    (lambda lib, x: modules(lib)[3].rand_augment(x, n=2, m=0, num_magnitude_bins=0), "must be a positive integer"),
    (lambda lib, x: modules(lib)[3].rand_augment(x, n=2, m=9, excluded=["rotate", "blur"]),
     "`blur` was specified in `excluded`, but the RandAugment suite"),
    (lambda lib, x: modules(lib)[4].trivial_augment_wide(x, excluded=["shear"]),
     "`shear` was specified in `excluded`, but the TrivialAugmentWide suite"),
    (lambda lib, x: modules(lib)[4].trivial_augment_wide(x, num_magnitude_bins=0), "must be a positive integer"),
    (lambda lib, x: modules(lib)[2].auto_augment(x, policy_name="cifar10"), "`policy_name` must be a string"),
    (lambda lib, x: modules(lib)[2].auto_augment(x, "reduced_image_net", shape=(10, 10)),
     "does not contain any augmentations that rely on the image shape. The `shape` argument"),
    (lambda lib, x: modules(lib)[2].auto_augment(x, "reduced_image_net", max_translate_abs=3),
     "The `max_translate_abs` argument must not be specified"),
    (lambda lib, x: modules(lib)[3].rand_augment(x, 2, 9, max_translate_rel=0.5),
     "`max_translate_rel` cannot be used without image shapes"),
    (lambda lib, x: modules(lib)[2].auto_augment_image_net(x, shape=x_shape(x), max_translate_abs=10),
     "`max_translate_abs` cannot be used with image shapes"),
    (lambda lib, x: modules(lib)[3].apply_rand_augment(modules(lib)[3].get_rand_augment_suite(use_shape=True),
                                                       x, 2, 9), "requires `shape` argument"),
    (lambda lib, x: modules(lib)[2].apply_auto_augment(modules(lib)[2].get_svhn_policy(use_shape=True), x),
     "requires `shape` argument"),
    (lambda lib, x: modules(lib)[4].apply_trivial_augment(modules(lib)[4].get_trivial_augment_wide_suite(True),
                                                          x), "requires `shape` argument"),
    (lambda lib, x: modules(lib)[3].apply_rand_augment(modules(lib)[3].get_rand_augment_suite(), x, 2, 9, foo=1,
                                                       bar=2), "kwargs `foo, bar` are not used"),
    (lambda lib, x: modules(lib)[3].apply_rand_augment([], x, 2, 9), "`augmentations` list cannot be empty"),
    (lambda lib, x: modules(lib)[4].apply_trivial_augment([], x), "`augmentations` list cannot be empty"),
    (lambda lib, x: modules(lib)[2].apply_auto_augment(modules(lib)[1].Policy("empty", 3, []), x),
     "Cannot run empty policy"),
    (lambda lib, x: modules(lib)[0].rotate(x, magnitude_bin=3), "`num_magnitude_bins` argument is missing"),
    (lambda lib, x: modules(lib)[0].posterize(x, num_magnitude_bins=3), "requires `magnitude_bin` parameter"),
    (lambda lib, x: modules(lib)[0].translate_y(x, magnitude_bin=1, num_magnitude_bins=3),
     "requires following named argument.*shape"),
    (lambda lib, x: modules(lib)[0].solarize_add.augmentation(mag_range=(0, 200))(x, magnitude_bin=1,
                                                                                  num_magnitude_bins=2),
     "accepts shifts from 0 to 128"),
    (lambda lib, x: modules(lib)[0].rotate.augmentation(mag_range=np.arange(5))(x, magnitude_bin=1,
                                                                                 num_magnitude_bins=4),
     "nd.array of length 5"),
    (lambda lib, x: modules(lib)[0].rotate.augmentation(mag_range=(1, 2, 3))(x, magnitude_bin=1,
                                                                              num_magnitude_bins=4),
     "must be a tuple of \\(low, high\\)"),
    (lambda lib, x: modules(lib)[0].rotate.augmentation(mag_to_param=lambda m: [0] * int(m))(
        x, magnitude_bin=1, num_magnitude_bins=4), "must return the arrays of the same type and shape"),
    (lambda lib, x: modules(lib)[1].signed_bin(1.5), "must be an int or"),
    (lambda lib, x: modules(lib)[1].signed_bin(1, random_sign=x, seed=3), "cannot be specified together"),
]


@pytest.mark.parametrize("define,match", ERRORS, ids=[m[:40] for _, m in ERRORS])
def test_errors(define, match):
    batch = images(SIZES[:2])
    with pytest.raises((ValueError, TypeError), match=match), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run(torchdali, define, batch)
    dali = pytest.importorskip("nvidia.dali")
    with pytest.raises(Exception, match=match), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run(dali, define, batch)


@pytest.mark.parametrize("define", [FULL["auto_augment_image_net"], FULL["rand_augment"],
                                    FULL["trivial_augment_wide"]])
def test_without_conditionals_is_an_error_as_in_dali(define):
    batch = images(SIZES[:2])
    with pytest.raises(TypeError, match=r"enable_conditionals=True"):
        run(torchdali, define, batch, conditionals=False)
    dali = pytest.importorskip("nvidia.dali")
    with pytest.raises(TypeError, match="enable_conditionals=True"):
        run(dali, define, batch, conditionals=False)


def test_one_augmentation_needs_no_conditionals():
    batch = images(SIZES[:3])
    (out,), _ = run(torchdali, lambda lib, x: rand_augment.apply_rand_augment([augmentations.invert], x, 2, 3),
                    batch, conditionals=False)
    for o, b in zip(out, batch):
        np.testing.assert_array_equal(o, b)  # inverted twice


def test_n_0_warns_and_returns_the_data():
    with pytest.warns(Warning, match="n=0"):
        (out,), _ = run(torchdali, lambda lib, x: rand_augment.rand_augment(x, 0, 3), images(SIZES[:2]))
    np.testing.assert_array_equal(out[0], images(SIZES[:2])[0])


def test_unsigned_bin_of_a_negated_augmentation_warns():
    with pytest.warns(Warning, match="unsigned `magnitude_bin`"):
        run(torchdali, lambda lib, x: augmentations.rotate(x, magnitude_bin=3, num_magnitude_bins=11),
            images(SIZES[:2]))


POLICY_ERRORS = [
    (lambda c, a: c.Policy("p", 0, [[(a.rotate, 0.5, 1)]]), "`num_magnitude_bins` must be a positive integer"),
    (lambda c, a: c.Policy("p", 11, [a.rotate]), "Each sub policy must be a list or tuple"),
    (lambda c, a: c.Policy("p", 11, "abc"), "must be a list or tuple of sub policies"),
    (lambda c, a: c.Policy("p", 11, [[(a.rotate, 0.5)]]), "must be specified as a triple"),
    (lambda c, a: c.Policy("p", 11, [[(a.rotate.op, 0.5, 1)]]), "must be an instance of Augmentation"),
    (lambda c, a: c.Policy("p", 11, [[(a.rotate, 1.5, 1)]]), r"Probability .* `\[0, 1\]` range. Got `1.5`"),
    (lambda c, a: c.Policy("p", 11, [[(a.rotate, 0.5, 11)]]), r"integer from `\[0, 10\]` range. Got `11`"),
    (lambda c, a: c.Policy("p", 11, [[(a.rotate, 0.5, None)]]), "so the magnitude bin is required"),
    (lambda c, a: c.augmentation(a.rotate), "applied to already decorated Augmentation"),
    (lambda c, a: c.augmentation(5), "is not callable"),
    (lambda c, a: c.augmentation(lambda data: data), "must accept at least two positional arguments"),
]


@pytest.mark.parametrize("make,match", POLICY_ERRORS, ids=[m[:40] for _, m in POLICY_ERRORS])
def test_policy_and_decorator_errors(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make(core, augmentations)
    dali = pytest.importorskip("nvidia.dali")
    a, c = modules(dali)[:2]
    with pytest.raises(Exception, match=match):
        make(c, a)


def test_policy_warnings():
    with pytest.warns(Warning, match="used with probability 0"):
        core.Policy("p", 11, [[(augmentations.rotate, 0, 1)]])
    with pytest.warns(Warning, match="will be ignored"):
        core.Policy("p", 11, [[(augmentations.invert, 0.5, 1)]])


def test_mag_to_param_returning_a_data_node_is_an_error():
    def define(lib, x):
        aug = modules(lib)[0].rotate.augmentation(mag_to_param=lambda m: lib.fn.random.uniform())
        return aug(x, magnitude_bin=1, num_magnitude_bins=3)
    with pytest.raises(TypeError, match="returned a DataNode"), pytest.warns(Warning, match="unsigned"):
        run(torchdali, define, images(SIZES[:2]))


def test_public_names_equal_dali():
    dali = dali_or_skip()
    for ours, theirs in zip(modules(torchdali), modules(dali)):
        public = {n for n in dir(theirs) if not n.startswith("_") and callable(getattr(theirs, n))
                  and getattr(getattr(theirs, n), "__module__", "").startswith("nvidia.dali.auto_aug")}
        assert public <= set(dir(ours)), public - set(dir(ours))
    assert set(core.__all__) == set(modules(dali)[1].__all__)


def test_docs_examples_run(tmp_path):
    """docs/auto_aug.md's code, run from a file (the conditionals read the definitions' source)."""
    doc = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "auto_aug.md")
    with open(doc) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 2
    script = tmp_path / "auto_aug_doc.py"
    script.write_text("\n".join(blocks))
    runpy.run_path(str(script))
