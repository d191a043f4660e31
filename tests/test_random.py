"""Random operators: distributions, shapes, types and per-sample arguments."""
import numpy as np
import pytest

from torchdali import fn, types

from conftest import dali_or_skip


def run_one(make, batch_size=64, seed=3, lib=None):
    import torchdali
    lib = lib or torchdali

    @lib.pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, seed=seed)
    def pipe():
        return make(lib.fn)

    p = pipe()
    p.build()
    return p.run()


def values(batch):
    return np.stack([np.array(batch.at(i)) for i in range(len(batch))])


def test_uniform_range_shape_and_values():
    (u,) = run_one(lambda fn: fn.random.uniform(range=(2.0, 3.0), shape=(10,)))
    v = values(u)
    assert v.shape == (64, 10) and u.dtype == types.FLOAT and v.min() >= 2.0 and v.max() < 3.0
    assert abs(v.mean() - 2.5) < 0.02
    (d,) = run_one(lambda fn: fn.random.uniform(values=[1.0, 5.0]))
    assert set(values(d).tolist()) == {1.0, 5.0}


def test_normal_moments_and_dtype():
    (n,) = run_one(lambda fn: fn.random.normal(mean=4.0, stddev=2.0, shape=(100,), dtype=types.FLOAT64))
    v = values(n)
    assert n.dtype == types.FLOAT64 and abs(v.mean() - 4.0) < 0.1 and abs(v.std() - 2.0) < 0.1


def test_beta_moments_range_and_per_sample_parameters():
    (b,) = run_one(lambda fn: fn.random.beta(alpha=2.0, beta=5.0, shape=(200,)))
    v = values(b)
    assert b.dtype == types.FLOAT and v.min() >= 0.0 and v.max() <= 1.0
    assert abs(v.mean() - 2 / 7) < 0.01 and abs(v.var() - 10 / (49 * 8)) < 0.003

    def make(fn):
        a = fn.external_source(lambda: [np.float32(k) for k in (0.5, 50.0)])
        return fn.random.beta(alpha=a, beta=50.0, shape=(400,), dtype=types.FLOAT64)

    (p,) = run_one(make, batch_size=2)
    assert p.dtype == types.FLOAT64
    assert abs(np.array(p.at(0)).mean() - 0.5 / 50.5) < 0.005 and abs(np.array(p.at(1)).mean() - 0.5) < 0.02
    with pytest.raises(ValueError, match="random.beta: argument 'alpha'.*must be positive"):
        fn.random.beta(alpha=0.0)


def test_coin_flip_probability_and_default_type():
    (c,) = run_one(lambda fn: fn.random.coin_flip(probability=0.25, shape=(200,)))
    v = values(c)
    assert c.dtype == types.INT32 and set(np.unique(v)) <= {0, 1} and abs(v.mean() - 0.25) < 0.02
    (b,) = run_one(lambda fn: fn.random.coin_flip(dtype=types.BOOL))
    assert b.dtype == types.BOOL


def test_choice_of_int_values_and_probabilities():
    (c,) = run_one(lambda fn: fn.random.choice(5, shape=(50,)))
    v = values(c)
    assert c.dtype == types.INT32 and set(np.unique(v)) == set(range(5))
    (w,) = run_one(lambda fn: fn.random.choice(np.array([10, 20], np.int16), p=[0.0, 1.0]))
    assert w.dtype == types.INT16 and set(values(w).tolist()) == {20}
    with pytest.raises(ValueError, match="p has 3 entries for 2 choices"):
        run_one(lambda fn: fn.random.choice(np.array([1, 2]), p=[0.2, 0.3, 0.5]))


def test_shape_like_input():
    def make(fn):
        x = fn.external_source(lambda: [np.zeros((2, 3)), np.zeros((4, 1))], batch=True)
        return fn.random.uniform(x)

    (u,) = run_one(make, batch_size=2)
    assert u.shape() == [[2, 3], [4, 1]]


def test_per_sample_range_argument_input():
    def make(fn):
        lo = fn.external_source(lambda: [np.float32([k, k + 0.5]) for k in range(4)])
        return fn.random.uniform(range=lo, shape=(20,))

    (u,) = run_one(make, batch_size=4)
    for k in range(4):
        v = np.array(u.at(k))
        assert v.min() >= k and v.max() < k + 0.5


@pytest.mark.parametrize("make", [
    lambda fn: fn.random.uniform(), lambda fn: fn.random.normal(), lambda fn: fn.random.coin_flip(),
    lambda fn: fn.random.choice(3), lambda fn: fn.random.uniform(shape=(2, 3)),
    lambda fn: fn.random.coin_flip(dtype=0), lambda fn: fn.random.beta(shape=(3,)),
])
def test_types_and_shapes_match_dali(make):
    nvidia_dali = dali_or_skip()
    import nvidia.dali.fn  # noqa: F401
    (ours,) = run_one(make, batch_size=4)
    (theirs,) = run_one(make, batch_size=4, lib=nvidia_dali)
    assert int(ours.dtype) == int(theirs.dtype)
    assert ours.shape() == [list(s) for s in theirs.shape()]


def test_unsupported_output_types_are_definition_errors():
    with pytest.raises(ValueError, match="random.coin_flip: argument 'dtype'"):
        fn.random.coin_flip(dtype=types.FLOAT16)
    with pytest.raises(ValueError, match="random.normal: argument 'dtype'"):
        fn.random.normal(dtype=types.INT8)


def test_integer_uniform():
    (u,) = run_one(lambda fn: fn.random.uniform(range=(0, 10), dtype=types.INT32, shape=(100,)))
    v = values(u)
    assert u.dtype == types.INT32 and v.min() == 0 and v.max() == 9
