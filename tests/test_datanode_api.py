"""DataNode operators (abs, ~, <<, >>), indexing (DataNode indices and bounds, None,
dali.newaxis, Ellipsis, which DALI 2.4 refuses), .cpu(), types.Constant / ScalarConstant, Pipeline.iter_setup
and enable_api_check, compared with DALI on the CPU."""
import numpy as np
import pytest
import torch

import torchdali
from torchdali import types
from conftest import as_numpy_batch, assert_batches_equal, dali_or_skip, requires_cuda


def _constant_callback(batch):
    return lambda: batch


def run_graph(lib, build, data, extra=(), layout="HW", device="cpu"):
    """Outputs of `build(x, *extras)` over external sources giving `data` and `extra`."""
    @lib.pipeline_def(batch_size=len(data), num_threads=1, device_id=0 if device == "gpu" else None)
    def pipe():
        x = lib.fn.external_source(lambda: data, batch=True, layout=layout)
        nodes = [lib.fn.external_source(_constant_callback(e), batch=True) for e in extra]
        return build(x.gpu() if device == "gpu" else x, *nodes)

    p = pipe()
    p.build()
    out = p.run()[0]
    return as_numpy_batch(out), out.layout()


def compare(build, data, extra=(), layout="HW"):
    dali = dali_or_skip()
    got = run_graph(torchdali, build, data, extra, layout)
    expected = run_graph(dali, build, data, extra, layout)
    assert_batches_equal(got[0], expected[0])
    assert got[1] == expected[1]
    return got


def NEW(x):
    """The newaxis of x's library."""
    return torchdali.newaxis if isinstance(x, torchdali.DataNode) else dali_or_skip().newaxis


RNG = np.random.default_rng(7)
UNARY_BINARY = {
    "abs": lambda x: abs(x),
    "invert": lambda x: ~x,
    "lshift": lambda x: x << 2,
    "rlshift": lambda x: 1 << x,
    "rshift": lambda x: x >> 1,
    "rrshift": lambda x: 200 >> x,
}


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.uint16, np.int32, np.uint32, np.int64])
@pytest.mark.parametrize("name", list(UNARY_BINARY))
def test_integer_operators_match_dali(name, dtype):
    hi = 7 if "shift" in name else 100
    data = [RNG.integers(0, hi, size=s).astype(dtype) for s in [(3, 5), (1, 1), (0, 4)]]
    if name in ("abs", "invert") and np.issubdtype(dtype, np.signedinteger):
        data[0] -= dtype(50 if name == "abs" else 3)
    compare(UNARY_BINARY[name], data)


def test_shift_by_datanode_and_uint64_right_shift():
    data = [np.array([[1, 2 ** 63 + 8, 255]], np.uint64)]
    shifts = [np.array([[0, 3, 1]], np.uint64)]
    compare(lambda x, s: x >> s, data, [shifts])
    compare(lambda x, s: x << s, data, [shifts])


@pytest.mark.parametrize("name", ["invert", "lshift", "rshift", "rlshift"])
def test_bool_operands(name):
    compare(UNARY_BINARY[name], [np.array([[True, False, True]])])


@pytest.mark.parametrize("name, dtype, message", [
    ("invert", np.float32, "bitwise operator `~` must be of integral type"),
    ("lshift", np.float32, "bitwise operator `<<` must be of integral type"),
    ("rrshift", np.float64, "bitwise operator `>>` must be of integral type"),
    ("abs", np.bool_, "operator `abs` cannot be a boolean"),
])
def test_operator_errors(name, dtype, message):
    dali = dali_or_skip()
    data = [np.ones((2, 2), dtype)]
    with pytest.raises(RuntimeError):
        run_graph(dali, UNARY_BINARY[name], data)
    with pytest.raises(TypeError, match=message):
        run_graph(torchdali, UNARY_BINARY[name], data)


def test_abs_of_floats():
    compare(lambda x: abs(x), [np.array([[-1.5, 0.0, 2.25]], np.float32)])


# --- indexing ---
GRID = [np.arange(12, dtype=np.int32).reshape(3, 4), np.arange(10, dtype=np.int32).reshape(2, 5)]
INDEXES = {
    "x[None]": lambda x, i, a, b: x[None],
    "x[newaxis]": lambda x, i, a, b: x[NEW(x)],
    "x[:, newaxis('C')]": lambda x, i, a, b: x[:, NEW(x)("C")],
    "x[newaxis, 1]": lambda x, i, a, b: x[NEW(x), 1],
    "x[1, newaxis]": lambda x, i, a, b: x[1, NEW(x)],
    "x[:, :, newaxis]": lambda x, i, a, b: x[:, :, NEW(x)],
    "x[1:100]": lambda x, i, a, b: x[1:100],
    "x[-100:1]": lambda x, i, a, b: x[-100:1],
    "x[::2]": lambda x, i, a, b: x[::2],
    "x[::-1]": lambda x, i, a, b: x[::-1],
    "x[:, -2::-2]": lambda x, i, a, b: x[:, -2::-2],
    "x[2:1]": lambda x, i, a, b: x[2:1],
    "x[np.int64(1)]": lambda x, i, a, b: x[np.int64(1)],
    "x[i]": lambda x, i, a, b: x[i],
    "x[:, i]": lambda x, i, a, b: x[:, i],
    "x[a:b]": lambda x, i, a, b: x[a:b],
    "x[:, a:b]": lambda x, i, a, b: x[:, a:b],
    "x[:, ::a+1]": lambda x, i, a, b: x[:, ::a + 1],
    "x[i, a:]": lambda x, i, a, b: x[i, a:],
}


@pytest.mark.parametrize("name", list(INDEXES))
def test_indexing_matches_dali(name):
    per_sample = [[np.array(1, np.int32), np.array(-1, np.int32)],
                  [np.array(0, np.int32), np.array(1, np.int32)],
                  [np.array(2, np.int32), np.array(-1, np.int32)]]
    compare(lambda x, i, a, b: INDEXES[name](x, i, a, b), GRID, per_sample)


@pytest.mark.parametrize("build, error, message", [
    (lambda x, i: x[5], IndexError, "index 5 is out of range for axis 0 of length 3"),
    (lambda x, i: x[i], IndexError, "index 7 is out of range for axis 0"),
    (lambda x, i: x[1, 1, 1], IndexError, r"too many indices \(3\) for a 2D tensor"),
    (lambda x, i: x[:, :, :], IndexError, r"too many indices \(3\) for a 2D tensor"),
    (lambda x, i: x[::0], ValueError, "step cannot be zero"),
])
def test_indexing_run_time_errors(build, error, message):
    dali = dali_or_skip()
    extra = [[np.array(7, np.int32)] * 2]
    with pytest.raises(RuntimeError):
        run_graph(dali, build, GRID, extra)
    with pytest.raises(error, match=message):
        run_graph(torchdali, build, GRID, extra)


VOLUMES = [np.arange(24, dtype=np.int32).reshape(2, 3, 4), np.arange(30, dtype=np.int32).reshape(3, 5, 2)]
ELLIPSES = [  # (index of x given newaxis, the output's layout from "HWC")
    (lambda x, new: x[..., 1], "HW"),
    (lambda x, new: x[1, ...], "WC"),
    (lambda x, new: x[..., 1:3], "HWC"),
    (lambda x, new: x[...], "HWC"),
    (lambda x, new: x[0, ..., 1], "W"),
    (lambda x, new: x[:, ..., :, ::-1], "HWC"),
    (lambda x, new: x[..., new("N")], "HWCN"),
    (lambda x, new: x[new("N"), ..., 0], "NHW"),
    (lambda x, new: x[-1, ..., new("N"), 1], "WN"),
]


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))])
@pytest.mark.parametrize("index, layout", ELLIPSES, ids=[str(i) for i in range(len(ELLIPSES))])
def test_ellipsis_stands_for_the_dimensions_left_out(index, layout, device):
    """`...` (which DALI 2.4 refuses) indexes as NumPy's, the layout following the axes."""
    got, got_layout = run_graph(torchdali, lambda x: index(x, torchdali.newaxis), VOLUMES, layout="HWC",
                                device=device)
    expected = [index(v, lambda name: np.newaxis) for v in VOLUMES]
    assert_batches_equal(got, expected)
    assert got_layout == layout


@pytest.mark.parametrize("build, error, message", [
    (lambda x: x[..., ...], IndexError, "a single ellipsis"),
    (lambda x: x[1, ..., 1, 1, 1], IndexError, r"too many indices \(4\) for a 3D tensor"),
])
def test_ellipsis_errors(build, error, message):
    with pytest.raises(error, match=message):
        run_graph(torchdali, build, VOLUMES, layout="HWC")


@pytest.mark.parametrize("build, error, message", [
    (lambda x, i: x[1.5], TypeError, "not an int or a slice"),
    (lambda x, i: x[NEW(x)("C"), NEW(x)], ValueError, "for all axes or none"),
    (lambda x, i: x[NEW(x)("CD")], ValueError, "single-character"),
])
def test_indexing_definition_errors(build, error, message):
    dali = dali_or_skip()
    with pytest.raises(error):
        run_graph(dali, build, GRID, [[np.array(0, np.int32)] * 2])
    with pytest.raises(error, match=message):
        run_graph(torchdali, build, GRID, [[np.array(0, np.int32)] * 2])


def test_gpu_index_is_refused():
    with pytest.raises(ValueError, match="argument input 'at_0'.*GPU data"):
        @torchdali.pipeline_def(batch_size=1, num_threads=1, device_id=0)
        def pipe():
            x = torchdali.fn.external_source(lambda: GRID[:1], batch=True)
            return x[torchdali.fn.external_source(lambda: [np.array(0)], batch=True).gpu()]
        pipe()


def test_newaxis_is_exported_where_dali_has_it():
    dali = dali_or_skip()
    assert hasattr(dali, "newaxis") and torchdali.newaxis is torchdali.graph.newaxis
    assert torchdali.newaxis("W").name == "W" and torchdali.newaxis.name is None


def test_cpu_of_cpu_data_is_itself_and_gpu_data_needs_the_dynamic_executor():
    with torchdali.Pipeline(batch_size=1, num_threads=1, device_id=0):
        x = torchdali.fn.external_source(lambda: GRID[:1], batch=True)
        assert x.cpu() is x
        back = x.gpu().cpu()  # tests/test_gpu_to_cpu.py runs such copies
        assert back.device == "cpu" and back.source.schema.name == "_to_cpu"
    with torchdali.Pipeline(batch_size=1, num_threads=1, device_id=0, exec_dynamic=False):
        x = torchdali.fn.external_source(lambda: GRID[:1], batch=True)
        with pytest.raises(RuntimeError, match="doesn't support transition from GPU to CPU"):
            x.gpu().cpu()


@requires_cuda
@pytest.mark.parametrize("name", ["x[i]", "x[:, a:b]", "x[::-1]", "x[:, newaxis('C')]"])
def test_indexing_on_gpu_matches_cpu(name):
    per_sample = [[np.array(1, np.int32), np.array(-1, np.int32)],
                  [np.array(0, np.int32), np.array(1, np.int32)],
                  [np.array(2, np.int32), np.array(-1, np.int32)]]
    cpu = run_graph(torchdali, INDEXES[name], GRID, per_sample)
    gpu = run_graph(torchdali, INDEXES[name], GRID, per_sample, device="gpu")
    assert_batches_equal(gpu[0], cpu[0])
    assert gpu[1] == cpu[1]


@requires_cuda
@pytest.mark.parametrize("name", list(UNARY_BINARY))
def test_integer_operators_on_gpu_match_cpu(name):
    data = [RNG.integers(0, 7, size=(3, 5)).astype(np.uint32), RNG.integers(0, 7, size=(2, 2)).astype(np.int16)]
    for d in data:
        cpu = run_graph(torchdali, UNARY_BINARY[name], [d])
        gpu = run_graph(torchdali, UNARY_BINARY[name], [d], device="gpu")
        assert_batches_equal(gpu[0], cpu[0])


# --- types.Constant ---
U8 = [np.array([[1, 200, 255]], np.uint8)]
CONSTANT_CASES = {
    "C(1, UINT8)": lambda C, T: (lambda x: x + C(1, T.UINT8)),
    "C(1)": lambda C, T: (lambda x: x + C(1)),
    "C(1.5)": lambda C, T: (lambda x: x + C(1.5)),
    "C(2, INT64) * x": lambda C, T: (lambda x: C(2, T.INT64) * x),
    "C(1).uint16()": lambda C, T: (lambda x: x + C(1).uint16()),
    "x == C(200, UINT8)": lambda C, T: (lambda x: x == C(200, T.UINT8)),
    "C(200, UINT8) == x": lambda C, T: (lambda x: C(200, T.UINT8) == x),
    "C(np.int16(3))": lambda C, T: (lambda x: x + C(np.int16(3))),
    "C(True)": lambda C, T: (lambda x: x + C(True)),
    "C(1.5, FLOAT64)": lambda C, T: (lambda x: x + C(1.5, T.FLOAT64)),
    "C(2**40, INT64)": lambda C, T: (lambda x: x + C(2 ** 40, T.INT64)),
    "x << C(1, UINT8)": lambda C, T: (lambda x: x << C(1, T.UINT8)),
}


@pytest.mark.parametrize("name", list(CONSTANT_CASES))
def test_scalar_constants_in_arithmetic_match_dali(name):
    dali = dali_or_skip()
    got = run_graph(torchdali, CONSTANT_CASES[name](types.Constant, types), U8, layout="")
    expected = run_graph(dali, CONSTANT_CASES[name](dali.types.Constant, dali.types), U8, layout="")
    assert_batches_equal(got[0], expected[0])


@pytest.mark.parametrize("build, message", [
    (lambda C, T: (lambda x: x + C(300, T.UINT8)), "300 out of range for uint8"),
    (lambda C, T: (lambda x: x + C(-1, T.UINT8)), "-1 out of range for uint8"),
    (lambda C, T: (lambda x: x + 2 ** 40), "1099511627776 out of range for int32"),
])
def test_constant_out_of_range(build, message):
    dali = dali_or_skip()
    with pytest.raises(OverflowError):
        run_graph(dali, build(dali.types.Constant, dali.types), U8, layout="")
    with pytest.raises(OverflowError, match=message):
        run_graph(torchdali, build(types.Constant, types), U8, layout="")


def test_scalar_constant_object_matches_dali():
    dali = dali_or_skip()
    for args in [(1,), (1.5,), (True,), (np.float64(2.0),), (3, "UINT8"), (2.7, "INT32")]:
        ours = types.Constant(*args[:1], *(getattr(types, a) for a in args[1:]))
        theirs = dali.types.Constant(*args[:1], *(getattr(dali.types, a) for a in args[1:]))
        assert isinstance(ours, types.ScalarConstant)
        assert (ours.value, int(ours.dtype), repr(ours)) == (theirs.value, int(theirs.dtype), repr(theirs))
        assert str(ours).split(":")[0] == str(theirs).split(":")[0]
    assert types.Constant(1) == types.Constant(1) and types.Constant(1) != types.Constant(1, types.INT64)
    assert (bool(types.Constant(2)), int(types.Constant(3)), float(types.Constant(1.5))) == (True, 3, 1.5)
    with pytest.raises(TypeError, match="convert it to a bool or integer type"):
        bool(types.Constant(1.5))
    with pytest.raises(TypeError, match="expected a scalar value"):
        types.Constant("a")
    with pytest.raises(TypeError, match="not a numeric type"):
        types.ScalarConstant(1, types.STRING)
    with pytest.raises(TypeError, match="float16 constants are not supported"):
        run_graph(torchdali, lambda x: x + types.Constant(1.5, types.FLOAT16), U8, layout="")


@pytest.mark.parametrize("build", [
    lambda C, T: (lambda x: x + C([1, 2, 3])),
    lambda C, T: (lambda x: x + C(5, device="cpu")),
    lambda C, T: (lambda x: C(5, shape=[2, 2], dtype=T.UINT8)),
    lambda C, T: (lambda x: C(np.arange(6).reshape(2, 3), layout="HW")),
    lambda C, T: (lambda x: C([1.5, 2], dtype=T.INT32)),
])
def test_tensor_constants_match_dali(build):
    dali = dali_or_skip()
    got = run_graph(torchdali, build(types.Constant, types), U8, layout="")
    expected = run_graph(dali, build(dali.types.Constant, dali.types), U8, layout="")
    assert_batches_equal(got[0], expected[0])
    assert got[1] == expected[1]


# --- Pipeline.iter_setup and enable_api_check ---
class FeedingPipeline(torchdali.Pipeline):
    def __init__(self, stop_after, **kwargs):
        super().__init__(batch_size=2, num_threads=1, device_id=None, **kwargs)
        self.calls = 0
        self.stop_after = stop_after
        with self:
            self.data = torchdali.fn.external_source(name="data")
            self.set_outputs(self.data + 1)

    def iter_setup(self):
        if self.calls == self.stop_after:
            raise StopIteration
        self.feed_input("data", [np.full(2, self.calls, np.int32)] * 2)
        self.calls += 1


@pytest.mark.parametrize("prefetch", [1, 2])
def test_iter_setup_feeds_each_iteration_and_ends_the_epoch(prefetch):
    pipe = FeedingPipeline(3, prefetch_queue_depth=prefetch)
    seen = [int(pipe.run()[0].at(0)[0]) for _ in range(3)]
    assert seen == [1, 2, 3] and pipe.calls == 3
    with pytest.raises(StopIteration):
        pipe.run()
    pipe.reset()
    pipe.stop_after = 4
    assert int(pipe.run()[0].at(0)[0]) == 4


def test_iter_setup_is_called_before_every_scheduled_iteration():
    pipe = FeedingPipeline(100, prefetch_queue_depth=2)
    pipe.schedule_run()
    assert pipe.calls == 2  # the prefetch queue is filled
    pipe.outputs()
    pipe.schedule_run()
    assert pipe.calls == 3


def test_enable_api_check():
    pipe = FeedingPipeline(100, prefetch_queue_depth=1)
    pipe.run()
    with pytest.raises(RuntimeError, match="mixing run"):
        pipe.share_outputs()
    pipe.enable_api_check(False)
    pipe.schedule_run()
    pipe.share_outputs()
    pipe.release_outputs()
    pipe.enable_api_check(True)
    with pytest.raises(RuntimeError, match="mixing run"):
        pipe.release_outputs()


def test_pytorch_plugin_exposes_torch_python_function():
    from torchdali.plugin import pytorch
    from torchdali.plugin.pytorch.fn import torch_python_function

    assert torch_python_function is torchdali.fn.torch_python_function
    assert pytorch.TorchPythonFunction is torchdali.ops.TorchPythonFunction

    @torchdali.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        x = torchdali.fn.external_source(lambda: [np.ones(3, np.float32)] * 2, batch=True)
        return torch_python_function(x, function=lambda t: t * 2)

    out = pipe().run()[0]
    assert isinstance(out.as_torch(), torch.Tensor)
    np.testing.assert_array_equal(out.at(1), [2, 2, 2])
