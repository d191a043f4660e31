"""DataNode arithmetic and torchdali.math: values against NumPy, types against DALI's rules."""
import numpy as np
import pytest
import torch

import torchdali as dali
from torchdali import fn, pipeline_def, types

from conftest import dali_or_skip

A = [np.array([[1, 2, 250]], np.uint8), np.array([[7], [3]], np.uint8)]
B = [np.array([[3, 5, 7]], np.int16), np.array([[2], [-4]], np.int16)]
F = [np.array([[0.5, 2.0, 4.0]], np.float32), np.array([[9.0], [0.25]], np.float32)]

EXPRESSIONS = {
    "u8+u8": (lambda a, b, f: a + a, np.uint8),
    "u8+1": (lambda a, b, f: a + 1, np.int32),
    "u8*2.5": (lambda a, b, f: a * 2.5, np.float32),
    "i16+u8": (lambda a, b, f: b + a, np.int16),
    "u8/u8": (lambda a, b, f: a / a, np.float32),
    "i16//3": (lambda a, b, f: b // 3, np.int32),
    "f%2": (lambda a, b, f: f % 2, np.float32),
    "b%3": (lambda a, b, f: b % 3, np.int32),
    "f//b": (lambda a, b, f: f // b, np.float32),
    "f**2": (lambda a, b, f: f ** 2, np.float32),
    "2-f": (lambda a, b, f: 2 - f, np.float32),
    "u8==1": (lambda a, b, f: a == 1, np.bool_),
    "f<b": (lambda a, b, f: f < b, np.bool_),
    "f>=2": (lambda a, b, f: f >= 2, np.bool_),
    "a&a": (lambda a, b, f: a & 3, np.int32),
    "a|b": (lambda a, b, f: a | b, np.int16),
    "a^a": (lambda a, b, f: a ^ a, np.uint8),
    "-u8": (lambda a, b, f: -a, np.uint8),
    "-f": (lambda a, b, f: -f, np.float32),
}


def numpy_reference(name, a, b, f):
    a64, b64, f64 = a.astype(np.int64), b.astype(np.int64), f.astype(np.float64)
    ref = {
        "u8+u8": (a64 + a64) % 256, "u8+1": a64 + 1, "u8*2.5": a64 * 2.5, "i16+u8": b64 + a64,
        "u8/u8": a64 / a64, "i16//3": np.trunc(b64 / 3), "f%2": np.fmod(f64, 2),
        "b%3": np.fmod(b64, 3), "f//b": f64 / b64, "f**2": f64 ** 2, "2-f": 2 - f64,
        "u8==1": a64 == 1, "f<b": f64 < b64, "f>=2": f64 >= 2, "a&a": a64 & 3, "a|b": a64 | b64,
        "a^a": a64 ^ a64, "-u8": (-a64) % 256, "-f": -f64,
    }[name]
    return ref


def run_expression(lib, expr, n=2):
    @lib.pipeline_def(batch_size=n, num_threads=1, device_id=None)
    def pipe():
        a = lib.fn.external_source(lambda: A, batch=True)
        b = lib.fn.external_source(lambda: B, batch=True)
        f = lib.fn.external_source(lambda: F, batch=True)
        return expr(a, b, f)

    p = pipe()
    p.build()
    (out,) = p.run()
    return out


@pytest.mark.parametrize("name", list(EXPRESSIONS))
def test_expression_values_and_types(name):
    expr, dtype = EXPRESSIONS[name]
    out = run_expression(dali, expr)
    assert out.dtype == types.to_dali_type(np.dtype(dtype))
    for i in range(2):
        got = np.array(out.at(i))
        ref = numpy_reference(name, A[i], B[i], F[i])
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=1e-6)


@pytest.mark.parametrize("name", list(EXPRESSIONS))
def test_expression_matches_dali(name):
    nvidia_dali = dali_or_skip()
    import nvidia.dali.fn  # noqa: F401
    expr, _ = EXPRESSIONS[name]
    ours = run_expression(dali, expr)
    theirs = run_expression(nvidia_dali, expr)
    assert int(ours.dtype) == int(theirs.dtype)
    for i in range(2):
        np.testing.assert_allclose(np.array(ours.at(i)), np.array(theirs.at(i)), rtol=1e-6)


@pytest.mark.parametrize("fname,ref", [
    ("sqrt", np.sqrt), ("exp", np.exp), ("log", np.log), ("abs", np.abs), ("floor", np.floor),
    ("ceil", np.ceil), ("sin", np.sin), ("cos", np.cos), ("tanh", np.tanh), ("cbrt", np.cbrt),
])
def test_math_unary(fname, ref):
    out = run_expression(dali, lambda a, b, f: getattr(dali.math, fname)(f))
    for i in range(2):
        np.testing.assert_allclose(np.array(out.at(i)), ref(F[i]), rtol=1e-5)


def test_math_binary_and_clamp():
    out = run_expression(dali, lambda a, b, f: dali.math.clamp(f, 1.0, 5.0))
    np.testing.assert_array_equal(out.at(0), np.clip(F[0], 1, 5))
    out = run_expression(dali, lambda a, b, f: dali.math.max(f, 1.0) + dali.math.min(a, b))
    np.testing.assert_allclose(out.at(1), np.maximum(F[1], 1) + np.minimum(A[1], B[1]))
    out = run_expression(dali, lambda a, b, f: dali.math.pow(f, 2) - dali.math.atan2(f, 1.0))
    np.testing.assert_allclose(out.at(0), F[0] ** 2 - np.arctan2(F[0], 1), rtol=1e-5)


def test_per_sample_broadcast_of_scalars():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None, seed=0)
    def pipe():
        img = fn.external_source(lambda: [np.ones((2, 3, 3), np.float32), np.ones((4, 1, 3), np.float32)])
        scale = fn.external_source(lambda: [np.float32(2), np.float32(3)])
        return img * scale

    (out,) = pipe().run()
    assert out.shape() == [[2, 3, 3], [4, 1, 3]]
    assert np.all(out.at(0) == 2) and np.all(out.at(1) == 3)


def test_non_broadcastable_shapes_name_the_sample():
    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        a = fn.external_source(lambda: [np.ones(3, np.float32)])
        b = fn.external_source(lambda: [np.ones(4, np.float32)])
        return a + b

    with pytest.raises(ValueError, match="sample 0.*don't broadcast"):
        pipe().run()


def test_bad_operands():
    with pytest.raises(TypeError, match="neither a DataNode nor a scalar"):
        fn.random.uniform() + "text"
    with pytest.raises(TypeError, match="at least one operand must be a DataNode"):
        dali.math.sqrt(4.0)


def test_indexing_and_slicing():
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        x = fn.external_source(lambda: [np.arange(12, dtype=np.int32).reshape(3, 4)] * 2, layout="HW")
        return x[1], x[:, 1:3], x[-1, ::2]

    first, cols, last = pipe().run()
    np.testing.assert_array_equal(first.at(0), [4, 5, 6, 7])
    assert first.layout() == "W" and cols.layout() == "HW"
    np.testing.assert_array_equal(cols.at(1), np.arange(12).reshape(3, 4)[:, 1:3])
    np.testing.assert_array_equal(last.at(0), [8, 10])
    with pytest.raises(TypeError, match="not an int or a slice"):
        fn.random.uniform()["a"]


def test_index_out_of_range_is_an_error():
    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        return fn.external_source(lambda: [np.zeros(3, np.float32)])[5]

    with pytest.raises(IndexError, match="index 5 is out of range"):
        pipe().run()


def test_cpu_operands_of_gpu_data_move_to_the_gpu():
    """As in DALI, a CPU operand of an operation with GPU data is copied to the GPU (.gpu()),
    so the operation runs on the GPU over operands on one device."""
    gpu = fn.external_source(name="g", device="gpu", dtype=types.UINT8, ndim=1)
    cpu = fn.external_source(name="c", dtype=types.UINT8, ndim=1)
    for out in (gpu + cpu, cpu * gpu, dali.math.clamp(cpu, gpu, cpu)):
        assert out.device == "gpu"
        assert [x.device for x in out.source.inputs] == ["gpu"] * len(out.source.inputs)
        assert any(x.source.schema.name == "_to_gpu" for x in out.source.inputs)
    assert (cpu + cpu).device == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cpu_operand_of_gpu_data_runs():
    @pipeline_def(batch_size=2, num_threads=1, device_id=0)
    def pipe():
        x = fn.external_source(source=lambda: [np.arange(5, dtype=np.uint8), np.arange(3, dtype=np.uint8)],
                               device="gpu")
        w = fn.external_source(source=lambda: [np.array(2, np.uint8), np.array(3, np.uint8)])
        return x * w

    out, = pipe().run()
    assert [np.asarray(t).tolist() for t in out.as_cpu()] == [[0, 2, 4, 6, 8], [0, 3, 6]]


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int8])
def test_comparisons_with_a_wider_per_sample_scalar(dtype):
    """Compared in the operands' common type: torch alone would cast the 0-d int32 operand to
    the data's type (256 as uint8 is 0)."""
    data = np.array([0, 100, 127], dtype)

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        x = fn.external_source(lambda: [data, data])
        t = fn.external_source(lambda: [np.int32(256), np.int32(-1)])
        return x < t, x >= t

    less, more = pipe().run()
    assert less.at(0).tolist() == [True] * 3 and less.at(1).tolist() == [False] * 3
    assert more.at(0).tolist() == [False] * 3 and more.at(1).tolist() == [True] * 3
