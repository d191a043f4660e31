"""Shape and batch operators (reshape, reinterpret, squeeze, expand_dims, stack, cat,
element_extract, sequence_rearrange, permute_batch, batch_permutation): outputs and layouts
against NVIDIA DALI on the CPU, the same refusals, views instead of copies, and the GPU's
results against the CPU's."""
import numpy as np
import pytest
import torch

import torchdali
from torchdali import types

from conftest import dali_or_skip, requires_cuda

RNG = np.random.default_rng(7)


def rand(shape, dtype):
    if np.dtype(dtype) == np.bool_:
        return RNG.integers(0, 2, shape).astype(bool)
    if np.dtype(dtype).kind == "f":
        return (RNG.standard_normal(shape) * 50).astype(dtype)
    return RNG.integers(0, 120, shape).astype(dtype)


def batch(shapes, dtype=np.uint8):
    return [rand(s, dtype) for s in shapes]


def const(value):
    return lambda: value


def run(lib, op, data, in_layout=None, inputs=(), arg_inputs=None, device="cpu", batch_size=None, **kwargs):
    """One iteration of lib.fn.<op>(data, *inputs, **kwargs, **arg_inputs); `inputs` entries are
    per-sample lists or (list, layout). Returns [(samples as NumPy, layout)] per output."""
    if "dtype" in kwargs:
        kwargs["dtype"] = lib.types.DALIDataType(int(kwargs["dtype"]))

    @lib.pipeline_def(batch_size=batch_size or len(data), num_threads=1, seed=5,
                      device_id=None if device == "cpu" else 0)
    def pipe():
        args = [lib.fn.external_source(const(data), layout=in_layout)] if data is not None else []
        for value in inputs:
            value, lay = value if isinstance(value, tuple) else (value, None)
            args.append(lib.fn.external_source(const(value), layout=lay))
        if device == "gpu":
            args[0] = args[0].gpu()
        named = {k: lib.fn.external_source(const(v)) for k, v in (arg_inputs or {}).items()}
        out = getattr(lib.fn, op)(*args, **kwargs, **named)
        return tuple(out) if isinstance(out, list) else out

    p = pipe()
    p.build()
    return [([np.array(o.as_cpu().at(i)) for i in range(len(o))], o.layout()) for o in p.run()]


def assert_same_outputs(got, expected):
    assert len(got) == len(expected)
    for (g, g_layout), (e, e_layout) in zip(got, expected):
        assert g_layout == e_layout
        assert len(g) == len(e)
        for i, (a, b) in enumerate(zip(g, e)):
            assert a.shape == b.shape and a.dtype == b.dtype, f"sample {i}: {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
            np.testing.assert_array_equal(a, b, err_msg=f"sample {i}")


def compare(op, data, in_layout=None, **kwargs):
    dali = dali_or_skip()
    expected = run(dali, op, data, in_layout, **kwargs)
    got = run(torchdali, op, data, in_layout, **kwargs)
    assert_same_outputs(got, expected)
    return got


def both_refuse(op, data, in_layout, match, **kwargs):
    """DALI fails on this call, and torchdali fails with an error naming the operator and matching `match`."""
    dali = dali_or_skip()
    with pytest.raises(Exception):
        run(dali, op, data, in_layout, **kwargs)
    with pytest.raises((ValueError, TypeError), match=match) as info:
        run(torchdali, op, data, in_layout, **kwargs)
    assert op in str(info.value)


HWC = batch([(5, 7, 3), (1, 1, 3), (4, 9, 3)])
HWC_EQUAL = batch([(6, 4, 3)] * 3, np.float32)
I32 = np.int32


# --- reshape ---

RESHAPE_CASES = [
    (HWC, "HWC", dict(shape=[-1, 3])),
    (HWC_EQUAL, "HWC", dict(shape=[4, 6, 3])),
    (HWC_EQUAL, "HWC", dict(shape=[2, -1], layout="AB")),
    (HWC, "HWC", dict(layout="XYZ")),
    (HWC, "HWC", dict(layout="")),
    (HWC, "HWC", dict(rel_shape=[1, -1])),
    (HWC_EQUAL, "HWC", dict(rel_shape=[0.5, 2, -1])),
    (HWC, "HWC", dict(rel_shape=[1, 1, 1, -1])),
    (HWC, "HWC", dict(src_dims=[1, 0, 2])),
    (HWC, "HWC", dict(src_dims=[-1, 2, 1, 0], rel_shape=[1, 1, 1, -1])),
    (HWC, None, dict(src_dims=[-1, 0, 1, 2])),
    (batch([(3, 10), (5, 6), (7, 4)], np.int16), "HW", dict(rel_shape=[0.5, -1])),  # 1.5 -> 2, 2.5 -> 3, 3.5 -> 4
    (batch([(0, 3), (2, 3)], np.float32), "HW", dict(shape=[-1])),
    (batch([(0, 3)], np.float32), "HW", dict(shape=[3, -1])),
    ([np.array([5.0], np.float32)], None, dict(shape=[])),
    ([np.array(5.0, np.float32)], None, dict(shape=[1, 1])),
    (batch([(2, 3, 4), (1, 3, 4)], np.float64), "HWC",
     dict(inputs=[[np.array([2, 3, 4], I32), np.array([3, -1, 2], I32)]])),
    (batch([(2, 3, 4), (1, 3, 4)], np.int64), "HWC",
     dict(inputs=[[np.array([6, 4], np.uint8), np.array([2, 6], np.uint8)]], layout="AB")),
    (HWC, None, dict(arg_inputs={"shape": [np.array([-1], I32), np.array([3], I32), np.array([108], I32)]})),
    (HWC, "HWC", dict(layout="XY", arg_inputs={"shape": [np.array([5, -1], I32), np.array([1, 3], I32),
                                                           np.array([-1, 12], I32)]})),
    (batch([(2, 3, 4), (1, 3, 4)]), None, dict(src_dims=[2, 1, 0], arg_inputs={
        "rel_shape": [np.array([1, 0.5, -1], np.float32), np.array([1, 1, -1], np.float32)]})),
    (batch([(0, 3)], np.float32), "HW", dict(arg_inputs={"shape": [np.array([0, 5], I32)]})),
]


@pytest.mark.parametrize("data, layout, kwargs", RESHAPE_CASES)
def test_reshape_matches_dali(data, layout, kwargs):
    compare("reshape", data, layout, **kwargs)


RESHAPE_REFUSALS = [
    (dict(shape=[-1, 3], layout="ABC"), "layout 'ABC' does not match the output's 2 dims"),
    (dict(shape=[5, 5]), "sample 0: the input and output must occupy the same bytes"),
    (dict(rel_shape=[1, 1, 1, 1]), "`rel_shape` has more elements"),
    (dict(rel_shape=[]), "'rel_shape' is an empty list"),
    (dict(rel_shape=[0, -1]), "an extent of 0 is not allowed"),
    (dict(src_dims=[1, 2]), "sample 0: src_dims \\[1, 2\\] give a shape of 21 elements"),
    (dict(src_dims=[3, 1, 0]), "src_dims\\[0\\] = 3 is out of range"),
    (dict(src_dims=[-2, 1, 0]), "src_dims\\[0\\] = -2 is out of range"),
    (dict(src_dims=[2, 1, 0], rel_shape=[1, 1]), "`src_dims` and `rel_shape` have different lengths: 3 vs 2"),
    (dict(shape=[-1], rel_shape=[1]), "mutually exclusive"),
    (dict(shape=[-1], inputs=[[np.array([-1], I32)] * 3]), "mutually exclusive"),
    (dict(shape=[-1, -1]), "only one extent may be negative"),
    (dict(shape=[0, -1]), "an extent of 0 is not allowed"),
    (dict(), "is a no-op"),
    (dict(inputs=[[np.array([-1, 3], I32), np.array([3], I32), np.array([-1, 3], I32)]]), "differ in length"),
    (dict(inputs=[[np.array([-1, 3], np.float32)] * 3]), "the shape input must have an integer type"),
    (dict(arg_inputs={"shape": [np.array([-1, 3], np.float32)] * 3}), "'shape' must have an integer type"),
    (dict(inputs=[[np.array([-1, -1], I32)] * 3]), "sample 0: the shape \\[-1, -1\\] has more than one negative"),
    (dict(inputs=[[np.array([[-1, 3]], I32)] * 3]), "sample 0 has shape \\(1, 2\\); give a 1D list"),
    (dict(inputs=[[np.array([0, -1], I32)] * 3]), "cannot infer the extent of dim 1"),
    (dict(arg_inputs={"src_dims": [np.array([2, 1, 0], I32)] * 3}), "'src_dims' cannot be an argument input"),
]


@pytest.mark.parametrize("kwargs, match", RESHAPE_REFUSALS)
def test_reshape_refuses_what_dali_refuses(kwargs, match):
    both_refuse("reshape", HWC, "HWC", match, **kwargs)


def test_reshape_fills_the_wildcard_only_where_the_rest_has_volume():
    both_refuse("reshape", [np.zeros((0, 3), np.float32)], "HW", "cannot infer the extent of dim 1", rel_shape=[1, -1])


def test_reshape_shape_input_of_a_single_2d_row_for_a_batch_of_one():
    compare("reshape", HWC[:1], "HWC", inputs=[[np.array([[7, 5, -1]], I32)]])


def test_reshape_shape_input_given_as_a_constant():
    dali = dali_or_skip()
    results = []
    for lib in (dali, torchdali):
        @lib.pipeline_def(batch_size=3, num_threads=1, device_id=None)
        def pipe():
            x = lib.fn.external_source(const(HWC), layout="HWC")
            return lib.fn.reshape(x, [3, -1, 1]), lib.fn.reshape(x, np.array([-1, 1, 3], np.int64))

        p = pipe()
        p.build()
        results.append([([np.array(o.at(i)) for i in range(3)], o.layout()) for o in p.run()])
    assert_same_outputs(results[1], results[0])


def test_a_batch_held_as_one_flat_buffer_is_viewed_whole():
    from torchdali.operators.shapes import _viewed
    from torchdali.tensor_list import TensorList

    flat = torch.arange(16, dtype=torch.uint8)
    held = TensorList.from_flat(flat, [[2, 4], [8, 1]], "HW")
    out = _viewed(held, np.array([[8, 1], [4, 2]]), "XY")
    assert out.held_flat()[0].data_ptr() == flat.data_ptr() and out.layout() == "XY"
    np.testing.assert_array_equal(out.as_torch_list()[1].numpy(), flat[8:].reshape(4, 2).numpy())
    words = _viewed(held, np.array([[2], [2]]), "", torch.int32)  # now of one shape: one dense view
    assert words.dense_tensor().data_ptr() == flat.data_ptr()
    np.testing.assert_array_equal(words.as_torch_list()[1].numpy(), flat[8:].numpy().view(np.int32))


def test_reshape_where_dali_2_4_fails_on_its_own_layout_check():
    """A shape known only at run time (argument input or shape input) or from `src_dims` alone
    that changes the number of dims: DALI 2.4 fails in its executor ('Unexpected layout of output
    0'); the documented result is no layout, which torchdali gives."""
    shapes = [np.array([-1], I32)] * 3
    (out, layout), = run(torchdali, "reshape", HWC, "HWC", arg_inputs={"shape": shapes})
    assert layout == "" and [o.shape for o in out] == [(105,), (3,), (108,)]
    (out, layout), = run(torchdali, "reshape", HWC, "HWC", src_dims=[0, 1, 2, -1])
    assert layout == "" and out[0].shape == (5, 7, 3, 1)
    np.testing.assert_array_equal(out[2][..., 0], HWC[2])


# --- reinterpret ---

U8 = batch([(4, 8), (2, 8), (6, 16)])

REINTERPRET_CASES = [
    (U8, "HW", dict(dtype=types.INT32)),
    (U8, "HW", dict(dtype=types.FLOAT16)),
    (U8, "HW", dict(dtype=types.UINT64)),
    (U8, "HW", dict(dtype=types.BOOL)),
    (U8, "HW", dict(dtype=types.INT16, shape=[-1])),
    (U8, "HW", dict(dtype=types.INT16, src_dims=[1, 0])),
    (U8, "HW", dict(dtype=types.FLOAT, rel_shape=[2, -1])),
    (batch([(2, 3)], np.float32), None, dict(dtype=types.UINT8)),
    (batch([(4, 6), (2, 2)], np.int32), "HW", dict(dtype=types.UINT16)),
    (batch([(3, 2)], np.int32), None, dict(layout="AB")),
    (batch([(3, 8)], np.uint8), "HW", dict(dtype=types.FLOAT64, inputs=[[np.array([3, 1], I32)]])),
    (batch([(3, 0)], np.int32), None, dict(dtype=types.UINT8)),
]


@pytest.mark.parametrize("data, layout, kwargs", REINTERPRET_CASES)
def test_reinterpret_matches_dali(data, layout, kwargs):
    compare("reinterpret", data, layout, **kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(dtype=types.INT32, shape=[5]), "sample 0: the input and output must occupy the same bytes"),
    (dict(), "neither a new shape, a layout nor a type"),
])
def test_reinterpret_refusals(kwargs, match):
    both_refuse("reinterpret", U8, "HW", match, **kwargs)


def test_reinterpret_innermost_extent_must_hold_whole_elements():
    both_refuse("reinterpret", batch([(2, 3)]), "HW", "the innermost dim \\(3 elements, 3 bytes\\) is not a multiple",
                dtype=types.INT16)


def test_reinterpret_scalars_need_a_shape():
    """DALI reads past the shape of a scalar here; torchdali refuses."""
    with pytest.raises(ValueError, match="reinterpret.*scalar samples have no innermost dim"):
        run(torchdali, "reinterpret", [np.array(5, I32)], dtype=types.UINT8)
    (out, _), = run(torchdali, "reinterpret", [np.array(5, I32)], dtype=types.UINT8, shape=[4])
    np.testing.assert_array_equal(out[0], np.array([5], I32).view(np.uint8))


# --- squeeze / expand_dims ---

SEQ = [rand((1, 2, 3, 1), np.float32), rand((1, 1, 3, 1), np.float32)]


@pytest.mark.parametrize("data, layout, kwargs", [
    (SEQ, "FHWC", dict(axes=[0, 3])),
    (SEQ, "FHWC", dict(axes=[3, 0])),
    (SEQ, "FHWC", dict(axes=[])),
    (SEQ, "FHWC", dict(axis_names="CF")),
    (SEQ, "FHWC", dict(axis_names="")),
    (SEQ, None, dict(axes=[0])),
    ([np.zeros((1, 1), np.int16)], "HW", dict(axes=[0, 1])),
    (batch([(0, 2, 3), (0, 5, 1)]), "DHW", dict(axes=[1])),
])
def test_squeeze_matches_dali(data, layout, kwargs):
    compare("squeeze", data, layout, **kwargs)


@pytest.mark.parametrize("data, layout, kwargs, match", [
    (SEQ, "FHWC", dict(axes=[0], axis_names="C"), "mutually exclusive"),
    (SEQ, "FHWC", dict(), "give either `axes` or `axis_names`"),
    (SEQ, "FHWC", dict(axes=[1]), "sample 0 of shape \\(1, 2, 3, 1\\): the dims \\[1\\] that `axes` names"),
    (SEQ, "FHWC", dict(axes=[0, 0]), "names a dim more than once"),
    (SEQ, "FHWC", dict(axis_names="D"), "axis 'D' of `axis_names` is not in the input layout 'FHWC'"),
    (SEQ, None, dict(axis_names="F"), "axis 'F' of `axis_names` is not in the input layout ''"),
    (SEQ, "FHWC", dict(arg_inputs={"axes": [np.array([0], I32)] * 2}), "'axes' cannot be an argument input"),
    (batch([(0, 1, 3)]), "DHW", dict(axes=[0]), "the dims \\[0\\] that `axes` names"),
])
def test_squeeze_refusals(data, layout, kwargs, match):
    both_refuse("squeeze", data, layout, match, **kwargs)


@pytest.mark.parametrize("axes", [[-1], [4]])
def test_squeeze_axes_out_of_range_are_refused(axes):
    """DALI 2.4 silently ignores negative or too large axes (and then every axis after a negative
    one); torchdali refuses them."""
    with pytest.raises(ValueError, match="squeeze.*argument 'axes'"):
        run(torchdali, "squeeze", SEQ, "FHWC", axes=axes)


HW = batch([(2, 3), (1, 3), (4, 1)], np.int32)


@pytest.mark.parametrize("data, layout, kwargs", [
    (HW, "HW", dict(axes=[0, 3])),
    (HW, "HW", dict(axes=[0, 3], new_axis_names="FC")),
    (HW, "HW", dict(axes=[2, 0], new_axis_names="CF")),
    (HW, "HW", dict(axes=[0], new_axis_names="H")),
    (HW, "HW", dict(axes=[])),
    (HW, "HW", dict(axes=[0], new_axis_names="")),
    ([np.array(3, np.float32)], None, dict(axes=[0, 1], new_axis_names="AB")),
    (batch([(0, 3)], np.float32), "HW", dict(axes=[1], new_axis_names="C")),
])
def test_expand_dims_matches_dali(data, layout, kwargs):
    compare("expand_dims", data, layout, **kwargs)


@pytest.mark.parametrize("layout, kwargs, match", [
    ("HW", dict(axes=[4]), "too few for these axes"),
    ("HW", dict(axes=[0, 4]), "too few for these axes"),
    ("HW", dict(axes=[-1]), "negative axes are not allowed"),
    ("HW", dict(axes=[0, 0]), "names a dim more than once"),
    ("HW", dict(axes=[0], new_axis_names="FC"), "has 2 names for 1 axes"),
    (None, dict(axes=[0], new_axis_names="F"), "`new_axis_names` needs an input with a layout"),
    ("HW", dict(), "argument 'axes' is required"),
])
def test_expand_dims_refusals(layout, kwargs, match):
    both_refuse("expand_dims", HW, layout, match, **kwargs)


def test_reshape_like_operators_view_the_input_memory():
    """No copies: a dense batch stays one buffer, a ragged one keeps its samples' memory."""
    for data in (HWC_EQUAL, HWC):
        @torchdali.pipeline_def(batch_size=3, num_threads=1, device_id=None)
        def pipe():
            x = torchdali.fn.external_source(const(data), layout="HWC")
            return (x, torchdali.fn.reshape(x, shape=[-1]), torchdali.fn.reinterpret(x, dtype=types.UINT8),
                    torchdali.fn.squeeze(torchdali.fn.expand_dims(x, axes=[0, 4]), axes=[0, 4]))

        p = pipe()
        p.build()
        outs = p.run()
        pointers = [[b.data_ptr() for b in out.buffers()] for out in outs]
        assert all(ptr == pointers[0] for ptr in pointers)
        assert (outs[1].dense_tensor() is not None) == (data is HWC_EQUAL)


# --- stack / cat ---

A = batch([(2, 3), (1, 5), (4, 4)], np.float32)
B = batch([(2, 3), (1, 5), (4, 4)], np.float32)
C = batch([(2, 2), (1, 1), (4, 7)], np.float32)
D = batch([(3, 3), (2, 5), (1, 4)], np.float32)
SQUARE = batch([(3, 5)] * 4, np.int16)


@pytest.mark.parametrize("data, layout, kwargs", [
    (A, "HW", dict(inputs=[B])),
    (A, "HW", dict(inputs=[B, A], axis=1)),
    (A, "HW", dict(inputs=[B], axis=2, axis_name="C")),
    (A, "HW", dict(inputs=[B], axis=-1, axis_name="C")),
    (A, "HW", dict(inputs=[B], axis=-2)),
    (A, "HW", dict(inputs=[(B, "WH")], axis_name="F")),
    (A, "HW", dict(axis_name="F")),
    (SQUARE, "HW", dict(inputs=[SQUARE, SQUARE], axis=2, axis_name="C")),
    (SQUARE, "HW", dict(inputs=[SQUARE], axis=1)),
    ([np.array(1.5, np.float32)] * 2, None, dict(inputs=[[np.array(2.5, np.float32)] * 2], axis_name="X")),
    ([a > 0 for a in A], None, dict(inputs=[[b > 0 for b in B]])),
    (batch([(2, 0)] * 2, np.float16), "HW", dict(inputs=[batch([(2, 0)] * 2, np.float16)])),
])
def test_stack_matches_dali(data, layout, kwargs):
    compare("stack", data, layout, **kwargs)


@pytest.mark.parametrize("data, layout, kwargs, match", [
    (A, "HW", dict(inputs=[B], axis=3), "axis 3 is out of range for 2-D inputs"),
    (A, "HW", dict(inputs=[B], axis=-3), "axis -3 is out of range"),
    (A, "HW", dict(inputs=[B], axis_name="FF"), "must be a single character"),
    (A, "HW", dict(inputs=[C]), "sample 0: stacked tensors must have one shape"),
    (A, "HW", dict(inputs=[[b.astype(np.float64) for b in B]]), "the same type and number of dims"),
    (A, "HW", dict(inputs=[[b[None] for b in B]]), "the same type and number of dims"),
    (A, None, dict(inputs=[(B, "HW")], axis_name="F"), "needs input 0 to have a layout"),
])
def test_stack_refusals(data, layout, kwargs, match):
    both_refuse("stack", data, layout, match, **kwargs)


@pytest.mark.parametrize("data, layout, kwargs", [
    (A, "HW", dict(inputs=[C], axis=1)),
    (A, "HW", dict(inputs=[D])),
    (A, "HW", dict(inputs=[C, B], axis=-1)),
    (A, "HW", dict(inputs=[C], axis_name="W")),
    (A, "HW", dict(inputs=[(C, "XY")], axis=1)),
    (A, None, dict(inputs=[(C, "XY")], axis=1)),
    (SQUARE, "HW", dict(inputs=[SQUARE, SQUARE], axis=1)),
    (SQUARE, "HW", dict(inputs=[SQUARE])),
    (A, "HW", dict()),
    (A, "HW", dict(inputs=[[np.zeros((0, 7), np.float32)] * 3])),  # an empty batch is left out
    (A, "HW", dict(inputs=[[np.zeros((0, 3), np.float32), np.zeros((1, 5), np.float32),
                            np.zeros((0, 4), np.float32)]])),
    (batch([(2, 0)] * 2, np.uint16), "HW", dict(inputs=[batch([(2, 0)] * 2, np.uint16)], axis=1)),
])
def test_cat_matches_dali(data, layout, kwargs):
    compare("cat", data, layout, **kwargs)


@pytest.mark.parametrize("data, layout, kwargs, match", [
    (A, "HW", dict(inputs=[C], axis=2), "axis 2 is out of range for 2-D inputs: give -2..1"),
    (A, "HW", dict(inputs=[C], axis=-3), "axis -3 is out of range"),
    (A, "HW", dict(inputs=[C], axis_name="W", axis=0), "mutually exclusive"),
    (A, "HW", dict(inputs=[C], axis_name="C"), "`axis_name` 'C' is not in the layout 'HW' of input 0"),
    (A, None, dict(inputs=[(C, "HW")], axis_name="W"), "not in the layout '' of input 0"),
    (A, "HW", dict(inputs=[C]), "sample 0: joined tensors may differ in extent only along axis 0"),
    (A, "HW", dict(inputs=[[c.astype(np.int8) for c in C]], axis=1), "the same type and number of dims"),
    (A, "HW", dict(inputs=[C], axis_name="HW"), "must be a single character"),
    ([np.array(1, I32)], None, dict(inputs=[[np.array(2, I32)]]), "scalar"),
])
def test_cat_refusals(data, layout, kwargs, match):
    both_refuse("cat", data, layout, match, **kwargs)


# --- element_extract / sequence_rearrange ---

FRAMES = batch([(4, 2, 3), (2, 2, 3), (5, 1, 1)], np.float32)
FRAMES_EQUAL = batch([(4, 3, 2)] * 3, np.uint8)


@pytest.mark.parametrize("data, layout, element_map", [
    (FRAMES, "FHW", [1, 0]),
    (FRAMES_EQUAL, "FHW", [3, 0, 3]),
    (FRAMES, None, [1]),
    (batch([(3, 2)], np.int64), "FX", [2]),
])
def test_element_extract_matches_dali(data, layout, element_map):
    got = compare("element_extract", data, layout, element_map=element_map)
    assert len(got) == len(element_map)


@pytest.mark.parametrize("data, layout, element_map, match", [
    (FRAMES, "HWC", [1], "the input layout 'HWC' is not a sequence's"),
    (FRAMES, "FHW", [2], "element 2 of `element_map` is out of range for sample 1, a sequence of 2"),
    (FRAMES, "FHW", [-1], "negative indices are not allowed"),
    (FRAMES, "FHW", [], "give at least one element"),
    (batch([(4,)], np.float32), "F", [2], "at least 2 dims"),
    ([np.array(4, np.float32)], None, [0], "at least 2 dims"),
])
def test_element_extract_refusals(data, layout, element_map, match):
    both_refuse("element_extract", data, layout, match, element_map=element_map)


@pytest.mark.parametrize("data, layout, kwargs", [
    (FRAMES, "FHW", dict(new_order=[1, 0, 1])),
    (FRAMES_EQUAL, "FHW", dict(new_order=[3, 0, 1, 1, 2])),
    (FRAMES, None, dict(new_order=[1])),
    (FRAMES, "FHW", dict(arg_inputs={"new_order": [np.array([3, 2, 1, 0], I32), np.array([1], I32),
                                                   np.array([4, 4], I32)]})),
    (FRAMES_EQUAL, "FHW", dict(arg_inputs={"new_order": [np.array([3, 2], I32), np.array([1, 1], I32),
                                                         np.array([0, 3], I32)]})),
])
def test_sequence_rearrange_matches_dali(data, layout, kwargs):
    compare("sequence_rearrange", data, layout, **kwargs)


@pytest.mark.parametrize("data, layout, kwargs, match", [
    (FRAMES, "HWC", dict(new_order=[1]), "not a sequence's"),
    (FRAMES, "FHW", dict(new_order=[2]), "sample 1: `new_order` \\[2\\] must pick frames in \\[0, 2\\)"),
    (FRAMES, "FHW", dict(new_order=[-1]), "sample 0: `new_order` \\[-1\\] must pick frames"),
    (FRAMES, "FHW", dict(new_order=[]), "empty sequences are not allowed"),
    (FRAMES, "FHW", dict(arg_inputs={"new_order": [np.array([0], I32), np.array([], I32), np.array([0], I32)]}),
     "sample 1 = \\[\\]: empty sequences are not allowed"),
    (FRAMES, "FHW", dict(arg_inputs={"new_order": [np.array([[0]], I32)] * 3}), "must have 1D samples"),
    (batch([(4,)], np.float32), "F", dict(new_order=[0]), "at least 2 dims"),
    (batch([(0, 2)], np.float32), "FW", dict(new_order=[0]), "must pick frames in \\[0, 0\\)"),
])
def test_sequence_rearrange_refusals(data, layout, kwargs, match):
    both_refuse("sequence_rearrange", data, layout, match, **kwargs)


# --- permute_batch / batch_permutation ---

RAGGED = [np.full((k + 1, 2), k, np.int16) for k in range(4)]
EQUAL = batch([(2, 3)] * 4, np.float32)
SCALARS = [np.array(k, I32) for k in (2, 1, 0, 0)]


@pytest.mark.parametrize("data, layout, kwargs", [
    (RAGGED, "HW", dict(indices=[3, 3, 0, 1])),
    (EQUAL, "HW", dict(indices=[3, 3, 0, 1])),
    (RAGGED, "HW", dict(arg_inputs={"indices": SCALARS})),
    (EQUAL, None, dict(arg_inputs={"indices": SCALARS})),
])
def test_permute_batch_matches_dali(data, layout, kwargs):
    compare("permute_batch", data, layout, **kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(indices=[3, 3, 0]), "3 indices for a batch of 4 samples"),
    (dict(indices=[4, 3, 0, 1]), "indices\\[0\\] = 4 is out of range for a batch of 4"),
    (dict(indices=[0, -1, 0, 1]), "indices\\[1\\] = -1 is out of range"),
    (dict(arg_inputs={"indices": [np.array(k, I32) for k in (0, 1, 4, 0)]}), "indices\\[2\\] = 4 is out of range"),
])
def test_permute_batch_refusals(kwargs, match):
    both_refuse("permute_batch", RAGGED, "HW", match, **kwargs)


def permutations(batch_size, iterations, seed=11, checkpoint=None, **kwargs):
    @torchdali.pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, seed=seed,
                            enable_checkpointing=True)
    def pipe():
        return torchdali.fn.batch_permutation(**kwargs)

    p = pipe(checkpoint=checkpoint) if checkpoint else pipe()
    p.build()
    runs = [np.array([np.array(s) for s in p.run()[0]]) for _ in range(iterations)]
    return runs, p


@pytest.mark.parametrize("kwargs", [{}, dict(no_fixed_points=True), dict(allow_repetitions=True),
                                    dict(allow_repetitions=True, no_fixed_points=True)])
def test_batch_permutation_draws_what_is_asked(kwargs):
    runs, _ = permutations(7, 40, **kwargs)
    draws = np.stack(runs)
    assert draws.dtype == np.int32 and draws.shape == (40, 7) and draws.min() >= 0 and draws.max() < 7
    if not kwargs.get("allow_repetitions"):
        assert all(sorted(d) == list(range(7)) for d in draws)
    else:
        assert any(len(set(d)) < 7 for d in draws)
    fixed = (draws == np.arange(7)).any(axis=1)
    assert not fixed.any() if kwargs.get("no_fixed_points") else fixed.any()
    assert len({tuple(d) for d in draws}) > 30


def test_batch_permutation_batch_of_one_and_dali_alike_output():
    runs, _ = permutations(1, 2, no_fixed_points=True)
    assert [r.tolist() for r in runs] == [[0], [0]]
    dali = dali_or_skip()
    (expected, e_layout), = run(dali, "batch_permutation", None, batch_size=5)
    (got, g_layout), = run(torchdali, "batch_permutation", None, batch_size=5)
    assert g_layout == e_layout == "" and [g.shape for g in got] == [e.shape for e in expected] == [()] * 5
    assert got[0].dtype == expected[0].dtype == np.int32


def test_batch_permutation_seeded_and_checkpointed():
    runs, p = permutations(6, 3)
    again, _ = permutations(6, 3)
    assert all((a == b).all() for a, b in zip(runs, again))
    ckpt = p.checkpoint()
    ahead, _ = permutations(6, 6)
    resumed, _ = permutations(6, 3, checkpoint=ckpt)
    assert all((a == b).all() for a, b in zip(ahead[3:], resumed))


def test_permute_batch_with_batch_permutation():
    @torchdali.pipeline_def(batch_size=5, num_threads=1, device_id=None, seed=2)
    def pipe():
        x = torchdali.fn.external_source(const(HWC + HWC[:2]), layout="HWC")
        indices = torchdali.fn.batch_permutation()
        return torchdali.fn.permute_batch(x, indices=indices), indices

    p = pipe()
    p.build()
    out, indices = p.run()
    assert out.layout() == "HWC"
    for i, k in enumerate(np.array([np.array(s) for s in indices])):
        np.testing.assert_array_equal(np.array(out.at(i)), (HWC + HWC[:2])[k])


def test_ops_classes():
    @torchdali.pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe():
        x = torchdali.fn.external_source(const(HWC), layout="HWC")
        flat = torchdali.ops.Reshape(shape=[-1])(x)
        return torchdali.ops.Cat()(flat, flat), torchdali.ops.ExpandDims(axes=[0], new_axis_names="F")(x)

    p = pipe()
    p.build()
    joined, expanded = p.run()
    np.testing.assert_array_equal(np.array(joined.at(1)), np.concatenate([HWC[1].ravel()] * 2))
    assert expanded.layout() == "FHWC" and expanded.shape()[2] == [1, 4, 9, 3]


# --- GPU ---

GPU_CASES = [
    ("reshape", HWC, "HWC", dict(shape=[-1, 3])),
    ("reshape", HWC, "HWC", dict(inputs=[[np.array([-1], I32)] * 3])),
    ("reinterpret", U8, "HW", dict(dtype=types.INT32)),
    ("squeeze", SEQ, "FHWC", dict(axes=[0, 3])),
    ("expand_dims", HW, "HW", dict(axes=[0, 3], new_axis_names="FC")),
    ("stack", SQUARE, "HW", dict(inputs=[SQUARE], axis=2, axis_name="C")),
    ("stack", A, "HW", dict(inputs=[B], axis=1)),
    ("cat", A, "HW", dict(inputs=[C], axis=1)),
    ("cat", SQUARE, "HW", dict(inputs=[SQUARE])),
    ("element_extract", FRAMES, "FHW", dict(element_map=[1, 0])),
    ("element_extract", FRAMES_EQUAL, "FHW", dict(element_map=[3])),
    ("sequence_rearrange", FRAMES_EQUAL, "FHW", dict(new_order=[3, 0, 0])),
    ("sequence_rearrange", FRAMES, "FHW", dict(arg_inputs={"new_order": [np.array([1], I32)] * 3})),
    ("permute_batch", RAGGED, "HW", dict(indices=[3, 3, 0, 1])),
    ("permute_batch", EQUAL, "HW", dict(arg_inputs={"indices": SCALARS})),
]


@requires_cuda
@pytest.mark.parametrize("op, data, layout, kwargs", GPU_CASES)
def test_gpu_gives_the_cpu_result(op, data, layout, kwargs):
    expected = run(torchdali, op, data, layout, **kwargs)
    got = run(torchdali, op, data, layout, device="gpu", **kwargs)
    assert_same_outputs(got, expected)


@requires_cuda
def test_gpu_stack_copies_cpu_inputs_to_the_gpu():
    @torchdali.pipeline_def(batch_size=3, num_threads=1, device_id=0)
    def pipe():
        a = torchdali.fn.external_source(const(A), layout="HW")
        b = torchdali.fn.external_source(const(B), layout="HW")
        return torchdali.fn.stack(a.gpu(), b, axis_name="C", axis=2)

    p = pipe()
    p.build()
    out, = p.run()
    assert out.layout() == "HWC"
    for i in range(3):
        np.testing.assert_array_equal(np.array(out.as_cpu().at(i)), np.stack([A[i], B[i]], axis=2))
