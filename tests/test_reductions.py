"""reductions.*: compared with DALI on the CPU (every input type, output type and axis choice),
edge cases (empty samples and reductions, scalars, overflow) and errors."""
import numpy as np
import pytest
import torch

import torchdali
from torchdali import types
from torchdali.operators.reductions import output_types

from conftest import as_numpy_batch, constant_source, dali_or_skip, requires_cuda

T = types.DALIDataType
NP_TYPES = {T.UINT8: np.uint8, T.INT8: np.int8, T.UINT16: np.uint16, T.INT16: np.int16, T.UINT32: np.uint32,
            T.INT32: np.int32, T.UINT64: np.uint64, T.INT64: np.int64, T.FLOAT: np.float32}
PLAIN = ("sum", "min", "max", "mean", "mean_square", "rms")
SPREADS = ("variance", "std_dev")
# (kwargs, the axes they reduce of an HWC sample): every way to name axes, and keep_dims
AXES = [({}, (0, 1, 2)), ({"axes": []}, ()), ({"axes": [1]}, (1,)), ({"axes": [2, 0]}, (0, 2)),
        ({"axes": -1}, (2,)), ({"axis_names": "HW", "keep_dims": True}, (0, 1)), ({"axis_names": ""}, ())]


def reductions(lib, samples, calls, layout="HWC", device="cpu", means=None):
    """One iteration of a pipeline giving, for each (op, kwargs) of `calls`, lib.fn.reductions.<op> of
    `samples` (and of `means[k]`, the k-th call's mean input, where given). Returns [(outputs, layout)]."""
    samples = [np.ascontiguousarray(s) for s in samples]

    @lib.pipeline_def(batch_size=len(samples), num_threads=2, device_id=None if device == "cpu" else 0, seed=1)
    def pipe():
        x = lib.fn.external_source(constant_source(samples), layout=layout)
        outs = []
        for k, (op, kwargs) in enumerate(calls):
            inputs = [x]
            if means is not None:
                inputs.append(lib.fn.external_source(constant_source([np.ascontiguousarray(m) for m in means[k]])))
            if device == "gpu":
                inputs = [i.gpu() for i in inputs]
            outs.append(getattr(lib.fn.reductions, op)(*inputs, **lib_kwargs(lib, kwargs)))
        return tuple(outs)

    p = pipe()
    p.build()
    return [(as_numpy_batch(o), o.layout()) for o in p.run()]


def lib_kwargs(lib, kwargs):
    """kwargs with `dtype` as lib's own DALIDataType."""
    if "dtype" not in kwargs:
        return kwargs
    return dict(kwargs, dtype=lib.types.DALIDataType(int(kwargs["dtype"])))


def random_batch(dtype, shapes, rng):
    """Samples of these shapes: the first's integers over the type's whole range (wrapping sums and
    squares), the others' of 0..99 (sums a float32 holds exactly); floats ~N(0, 100)."""
    np_type = NP_TYPES[dtype]
    if dtype == T.FLOAT:
        return [rng.normal(0, 100, s).astype(np.float32) for s in shapes]
    info = np.iinfo(np_type)
    return [rng.integers(*((info.min, info.max) if i == 0 else (0, 99)), s, dtype=np_type, endpoint=True)
            for i, s in enumerate(shapes)]


def term_bound(sample, op, mean=None):
    """The largest magnitude of the terms `op` accumulates over `sample`: |x|, x^2 (at most 2^63:
    DALI's integer squares wrap) or (x - mean)^2."""
    peak = float(np.abs(sample.astype(np.float64)).max()) if sample.size else 0.0
    if op in SPREADS:
        return (peak + float(np.abs(mean).max(initial=0.0))) ** 2
    return min(peak * peak, 2.0 ** 63) if op in ("mean_square", "rms") else peak


def assert_same(got, expected, op, samples, count, means=None, what=""):
    """Same layout, shapes and types; integers exactly. Float results accumulate in a different
    order (DALI: float32 in its kernel's order; here float64 for integer inputs, torch's float32 sum
    for floats), so they agree to 8 float32 epsilons of the sample's largest term (times the count
    for sums), the rooted ones squared."""
    (g, g_layout), (e, e_layout) = got, expected
    assert g_layout == e_layout, what
    assert len(g) == len(e), what
    for i, (a, b) in enumerate(zip(g, e)):
        assert (a.shape, a.dtype) == (b.shape, b.dtype), f"{what} sample {i}"
        if a.dtype != np.float32 or op in ("min", "max"):
            np.testing.assert_array_equal(a, b, err_msg=f"{what} sample {i}")
            continue
        bound = term_bound(samples[i], op, means[i] if means is not None else None)
        atol = 8 * float(np.finfo(np.float32).eps) * bound * (count if op == "sum" else 1)
        if op in ("rms", "std_dev"):
            a, b = a.astype(np.float64) ** 2, b.astype(np.float64) ** 2
        np.testing.assert_allclose(a, b, rtol=4e-6, atol=atol, equal_nan=True, err_msg=f"{what} sample {i}")


def dtype_choices(op, dtype):
    """Every `dtype` argument DALI accepts for `op` over `dtype` inputs ({} for the default)."""
    if op in ("min", "max"):
        return [{}]
    return [{}] + [{"dtype": t} for t in output_types(op, dtype)[1]]


@pytest.mark.parametrize("op", PLAIN)
def test_matches_dali(op):
    dali = dali_or_skip()
    rng = np.random.default_rng(sum(map(ord, op)))
    for k, dtype in enumerate(NP_TYPES):  # dense and ragged batches by turns
        shapes = [(5, 7, 3)] * 3 if k % 2 else [(5, 7, 3), (2, 9, 3), (1, 1, 3)]
        samples = random_batch(dtype, shapes, rng)
        reduced = [(dict(a, **d), ax) for a, ax in AXES for d in dtype_choices(op, dtype)]
        calls = [(op, kwargs) for kwargs, _ in reduced]
        ours, theirs = reductions(torchdali, samples, calls), reductions(dali, samples, calls)
        for (kwargs, axes), g, e in zip(reduced, ours, theirs):
            count = max(int(np.prod([s[a] for a in axes])) for s in shapes)
            assert_same(g, e, op, samples, count, what=f"{dtype.name} {kwargs} dense={k % 2 == 1}")


@pytest.mark.parametrize("op", SPREADS)
def test_spreads_match_dali(op):
    dali = dali_or_skip()
    rng = np.random.default_rng(7)
    shapes = [(5, 7, 3), (2, 9, 3), (4, 1, 3)]
    for dtype in NP_TYPES:
        samples = random_batch(dtype, shapes, rng)
        calls, means = [], []
        for kwargs, axes in AXES:
            for ddof in (0, 1, 5):
                calls.append((op, dict(kwargs, ddof=ddof)))
                means.append([s.astype(np.float64).mean(axis=axes, keepdims=kwargs.get("keep_dims", False))
                              .astype(np.float32) + rng.normal(0, 1) for s in samples])
        ours, theirs = reductions(torchdali, samples, calls, means=means), reductions(dali, samples, calls, means=means)
        for (_, kwargs), m, g, e in zip(calls, means, ours, theirs):
            assert_same(g, e, op, samples, 1, m, what=f"{dtype.name} {kwargs}")


def test_output_types_as_dali():
    """The default and accepted output types are DALI's, and DALI refuses the others."""
    dali = dali_or_skip()
    sample = [np.arange(6, dtype=np.uint8).reshape(2, 3)]
    for op in ("sum", "mean", "mean_square", "rms"):
        for dtype, np_type in NP_TYPES.items():
            data = [sample[0].astype(np_type)]
            default, accepted = output_types(op, dtype)
            (out, _), = reductions(dali, data, [(op, {})], layout="HW")
            assert out[0].dtype == NP_TYPES[default]
            refused = [t for t in NP_TYPES if t not in accepted]
            for t in refused[:3]:
                for lib in (dali, torchdali):
                    with pytest.raises(Exception):
                        reductions(lib, data, [(op, {"dtype": t})], layout="HW")


def test_documented_results():
    """DALI's conversions, by example: sums into 64 bits, wrapping in a narrow `dtype`; integer means
    summed in their type and truncated; squares of uint16 in int32."""
    u8 = [np.array([[250, 250, 250], [1, 2, 3]], np.uint8)]
    calls = [("sum", {}), ("sum", {"dtype": T.UINT8, "axes": 1}), ("mean", {"dtype": T.UINT8, "axes": 1}),
             ("mean", {"axes": 1}), ("rms", {"dtype": T.UINT8, "axes": 1})]
    got = [o[0][0] for o in reductions(torchdali, u8, calls, layout="HW")]
    assert got[0].dtype == np.uint64 and got[0] == 756
    np.testing.assert_array_equal(got[1], np.array([238, 6], np.uint8))  # 750 wraps to 238
    np.testing.assert_array_equal(got[2], np.array([79, 2], np.uint8))  # 238 / 3, truncated
    np.testing.assert_array_equal(got[3], np.array([250, 2], np.float32))
    np.testing.assert_array_equal(got[4], np.array([np.sqrt(np.float32((3 * 250 ** 2) % 256) / 3), 2], np.uint8))
    u16 = [np.array([65535, 3], np.uint16)]
    (out, _), = reductions(torchdali, u16, [("mean_square", {"axes": []})], layout="")
    np.testing.assert_array_equal(out[0], np.array([-131071, 9], np.float32))


def test_empty_samples_and_scalars_as_dali():
    dali = dali_or_skip()
    cases = [([np.zeros((0, 3), t) for t in (np.uint8,)] + [np.ones((2, 3), np.uint8)], "HW"),
             ([np.zeros((0, 3), np.float32), np.ones((2, 3), np.float32)], "HW"),
             ([np.zeros((0, 3), np.int32), np.ones((2, 3), np.int32)], "HW"),
             ([np.array(5, np.uint8), np.array(7, np.uint8)], ""),
             ([np.zeros((2, 0), np.uint64), np.zeros((1, 0), np.uint64)], "HW")]
    for samples, layout in cases:
        dtype = types.to_dali_type(torch.from_numpy(samples[0]).dtype)
        calls = [(op, dict(a, **d)) for op in PLAIN for a in ({}, {"axes": 0}, {"axes": []}, {"keep_dims": True})
                 for d in dtype_choices(op, dtype)]
        ours, theirs = reductions(torchdali, samples, calls, layout), reductions(dali, samples, calls, layout)
        for (op, kwargs), g, e in zip(calls, ours, theirs):
            assert_same(g, e, op, samples, 3, what=f"{samples[0].shape} {op} {kwargs}")
        means = [[np.float32(0), np.float32(1)]] * 2
        spread_calls = [("variance", {}), ("std_dev", {"ddof": 1})]
        if samples[0].ndim == 0:
            ours, theirs = (reductions(lib, samples, spread_calls, layout, means=means) for lib in (torchdali, dali))
            for (op, kwargs), g, e in zip(spread_calls, ours, theirs):
                assert_same(g, e, op, samples, 1, means[0], what=f"scalar {op}")


def test_nan_inf_results_of_ddof_as_dali():
    """count - ddof of 0 or less: inf, or a negative variance (and a NaN deviation), as DALI."""
    dali = dali_or_skip()
    samples = [np.array([[1, 2], [3, 5]], np.uint8), np.zeros((0, 2), np.uint8)]
    calls = [(op, {"axes": 0, "ddof": d}) for op in SPREADS for d in (-1, 1, 2, 3)]
    means = [[np.array([2, 3], np.float32), np.array([0, 0], np.float32)]] * len(calls)
    ours, theirs = (reductions(lib, samples, calls, "HW", means=means) for lib in (torchdali, dali))
    for (op, kwargs), g, e in zip(calls, ours, theirs):
        assert_same(g, e, op, samples, 2, means[0], what=f"{op} {kwargs}")
    assert np.isinf(ours[2][0][0]).all() and np.isnan(ours[7][0][0]).all()


def test_output_layouts():
    samples = [np.ones((2, 3, 4, 5), np.uint8)]
    for kwargs, layout in [({}, ""), ({"axes": [1, 3]}, "FW"), ({"axis_names": "WF"}, "HC"),
                           ({"axes": [0], "keep_dims": True}, "FHWC"), ({"axes": []}, "FHWC")]:
        (out, got), = reductions(torchdali, samples, [("max", kwargs)], layout="FHWC")
        assert got == layout, kwargs


def test_large_dense_batch_in_one_go():
    """A dense batch of many samples: sums of uint8 as DALI's (exact) through the batched path."""
    rng = np.random.default_rng(3)
    samples = list(rng.integers(0, 256, (64, 33, 17, 3), dtype=np.uint8))
    (out, _), = reductions(torchdali, samples, [("sum", {"axis_names": "HW"})])
    np.testing.assert_array_equal(np.stack(out), np.stack(samples).astype(np.uint64).sum((1, 2)))


@pytest.mark.parametrize("kwargs, layout, message", [
    ({"axes": [0], "axis_names": "H"}, "HW", "'axes' and 'axis_names'"),
    ({"axes": [2]}, "HW", "out of range [-2, 1]"),
    ({"axes": [-3]}, "HW", "out of range [-2, 1]"),
    ({"axes": [0, -2]}, "HW", "names an axis twice"),
    ({"axis_names": "HH"}, "HW", "names an axis twice"),
    ({"axis_names": "C"}, "HW", "axis 'C' is not in the input's layout 'HW'"),
    ({"axis_names": "H"}, "", "axis 'H' is not in the input's layout ''"),
    ({"dtype": T.UINT8}, "HW", "'dtype' = UINT8 is not accepted for input type INT16"),
    ({"dtype": T.FLOAT64}, "HW", "'dtype' = FLOAT64 is not accepted"),
])
def test_argument_errors(kwargs, layout, message):
    dali = dali_or_skip()
    samples = [np.ones((2, 3), np.int16)]
    with pytest.raises(Exception):  # DALI refuses them too
        reductions(dali, samples, [("sum", kwargs)], layout=layout)
    with pytest.raises((ValueError, TypeError), match="reductions.sum") as err:
        reductions(torchdali, samples, [("sum", kwargs)], layout=layout)
    assert message in str(err.value)


@pytest.mark.parametrize("np_type", [np.float16, np.float64, np.bool_])
def test_input_type_errors(np_type):
    dali = dali_or_skip()
    samples = [np.ones((2, 3), np_type)]
    for op in ("sum", "min", "mean"):
        with pytest.raises(Exception):
            reductions(dali, samples, [(op, {})], layout="HW")
        with pytest.raises(TypeError, match=f"reductions.{op} .*: input type .* is not supported"):
            reductions(torchdali, samples, [(op, {})], layout="HW")


def test_mean_input_errors():
    samples = [np.ones((2, 3), np.uint8)]
    with pytest.raises(TypeError, match="reductions.variance .*: input 'mean' has type FLOAT64; give FLOAT"):
        reductions(torchdali, samples, [("variance", {"axes": 1})], "HW", means=[[np.zeros(2, np.float64)]])
    with pytest.raises(ValueError, match="reductions.std_dev .*: input 'mean' sample 0 has 3 values"):
        reductions(torchdali, samples, [("std_dev", {"axes": 1})], "HW", means=[[np.zeros(3, np.float32)]])
    # any shape of the right size: DALI reads the values in order
    (out, _), = reductions(torchdali, samples, [("variance", {"axes": 1})], "HW", means=[[np.ones((1, 2), np.float32)]])
    np.testing.assert_array_equal(out[0], np.zeros(2, np.float32))


def test_ops_classes():
    assert torchdali.ops.reductions.RMS is not None and torchdali.ops.reductions.StdDev is not None
    x = [np.array([[1, 2], [3, 4]], np.float32)]

    @torchdali.pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        data = torchdali.fn.external_source(constant_source(x))
        mean = torchdali.ops.reductions.Mean(axes=0)(data)
        return torchdali.ops.reductions.StdDev(axes=0)(data, mean)

    p = pipe()
    p.build()
    np.testing.assert_array_equal(as_numpy_batch(p.run()[0])[0], np.array([1, 1], np.float32))


@requires_cuda
@pytest.mark.parametrize("op", PLAIN + SPREADS)
def test_gpu_matches_cpu(op):
    rng = np.random.default_rng(11)
    for dtype in NP_TYPES:
        for shapes in ([(5, 7, 3)] * 3, [(5, 7, 3), (0, 9, 3), (1, 1, 3)]):
            samples = random_batch(dtype, shapes, rng)
            calls = [(op, dict(a, **d)) for a, _ in AXES for d in dtype_choices(op, dtype) if "dtype" not in d
                     or op not in SPREADS]
            means = None
            if op in SPREADS:
                calls = [(op, dict(a, ddof=1)) for a, _ in AXES]
                means = [[np.zeros(1, np.float32).reshape(()) if not ax else
                          np.full([1 if k in ax else n for k, n in enumerate(s.shape)], 3, np.float32)
                          for s in samples] for _, ax in AXES]
            cpu = reductions(torchdali, samples, calls, means=means)
            gpu = reductions(torchdali, samples, calls, device="gpu", means=means)
            for k, ((_, kwargs), g, c) in enumerate(zip(calls, gpu, cpu)):
                assert_same(g, c, op, samples, 105, means[k] if means else None, what=f"{dtype.name} {kwargs}")
