"""normalize in a pipeline: against a float64 NumPy reference of DALI's rules and, where
installed, NVIDIA DALI on the same inputs."""
import numpy as np
import pytest

import torchdali
from torchdali import fn, types

from conftest import as_numpy_batch, dali_or_skip, requires_cuda

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

RNG = np.random.default_rng(0)
SIZES = ((17, 23), (1, 1), (31, 5), (12, 12))
INPUTS = {
    "ragged": [RNG.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in SIZES],
    "same": [RNG.integers(0, 256, (9, 11, 3), dtype=np.uint8) for _ in range(3)],
    "float": [RNG.normal(5.0, 3.0, (h, w, 3)).astype(np.float32) for h, w in SIZES],
    "int16": [RNG.integers(-3000, 3000, (7, 6, 2), dtype=np.int16) for _ in range(2)],
    # a constant sample (zero variance) beside a varied one
    "flat": [np.full((4, 5, 3), 7, np.uint8), RNG.integers(0, 256, (4, 5, 3), dtype=np.uint8)],
    "ragged_rows": [RNG.integers(0, 256, (h, 6, 3), dtype=np.uint8) for h in (3, 8, 1)],
}
PER_SAMPLE = {  # argument inputs, per input name: one array per sample
    ("same", "mean"): [np.full((1, 1, 3), v, np.float32) for v in (100, 120, 140)],
    ("same", "stddev"): [np.array([[[50, 60, 0]]], np.float32)] * 3,
    ("ragged", "stddev"): [np.full((1, 1, 3), v, np.float32) for v in (60, 1, 30, 45)],
    ("ragged", "mean"): [np.float32(RNG.random((h, 1, 1)) * 255) for h, _ in SIZES],
}

# (input, constant kwargs, names of per-sample argument inputs)
CASES = {
    "all_axes": ("ragged", {}, ()),
    "per_channel": ("ragged", dict(axes=[0, 1]), ()),
    "negative_axes": ("ragged", dict(axes=[-3, -2]), ()),
    "axis_names": ("same", dict(axis_names="HW"), ()),
    "batch": ("ragged", dict(axes=[0, 1], batch=True), ()),
    "batch_all_axes": ("ragged", dict(batch=True), ()),
    "batch_dense": ("same", dict(axes=[0, 1], batch=True, ddof=1, epsilon=2.0), ()),
    "batch_ragged_rows": ("ragged_rows", dict(axis_names="H", batch=True), ()),
    "uint8_out": ("same", dict(axis_names="HW", dtype=types.UINT8, scale=64, shift=128), ()),
    "int16_out": ("same", dict(batch=True, dtype=types.INT16, scale=1000), ()),
    "int16_in": ("int16", dict(axes=[2], scale=2.0, shift=1.0), ()),
    "float_in": ("float", dict(axes=[0, 1], ddof=1), ()),
    "scalar_mean": ("same", dict(mean=100.0, axes=[0, 1]), ()),
    "scalar_stddev": ("ragged", dict(stddev=40.0, axes=[1]), ()),
    "scalars": ("same", dict(mean=100.0, stddev=50.0, scale=2.0, shift=3.0), ()),
    "scalar_stddev_epsilon": ("same", dict(mean=10.0, stddev=3.0, epsilon=7.0), ()),
    "zero_variance": ("flat", dict(axes=[0, 1]), ()),
    "zero_variance_epsilon": ("flat", dict(axes=[0, 1], epsilon=0.5), ()),
    "ddof_too_large": ("flat", dict(axes=[2], ddof=3), ()),
    "ddof_too_large_epsilon": ("flat", dict(axes=[2], ddof=5, epsilon=1.0), ()),
    "tensor_mean": ("same", {}, ("mean",)),
    "tensor_mean_and_stddev": ("same", dict(scale=3.0), ("mean", "stddev")),
    "tensor_stddev_epsilon": ("same", dict(epsilon=4.0), ("stddev",)),
    "tensor_stddev_ragged": ("ragged", dict(axes=[0, 1]), ("stddev",)),
    "tensor_mean_per_row": ("ragged", dict(dtype=types.UINT8, scale=50, shift=128), ("mean",)),
}


def reduced_axes(kwargs, ndim, params):
    if "axes" in kwargs:
        return tuple(sorted(a % ndim for a in kwargs["axes"]))
    if "axis_names" in kwargs:
        return tuple("HWC".index(c) for c in kwargs["axis_names"])
    if params:
        return tuple(d for d in range(ndim) if all(p.shape[d] == 1 for p in params))
    return tuple(range(ndim))


def reference(samples, kwargs, tensors):
    """DALI's formulas in float64: out = (x - mean) * scale / sqrt(var + eps) + shift."""
    x = [s.astype(np.float64) for s in samples]
    axes = reduced_axes(kwargs, x[0].ndim, next(iter(tensors.values()), None))
    scale, shift = kwargs.get("scale", 1.0), kwargs.get("shift", 0.0)
    eps, ddof = kwargs.get("epsilon", 0.0), kwargs.get("ddof", 0)
    counts = [int(np.prod([s.shape[a] for a in axes])) for s in x]
    if "mean" in tensors:
        mean = [m.astype(np.float64) for m in tensors["mean"]]
    elif "mean" in kwargs:
        mean = [np.float64(kwargs["mean"])] * len(x)
    elif kwargs.get("batch"):
        mean = [sum(s.sum(axis=axes, keepdims=True) for s in x) / sum(counts)] * len(x)
    else:
        mean = [s.mean(axis=axes, keepdims=True) for s in x]
    if "stddev" in tensors:
        sd = [s.astype(np.float64) for s in tensors["stddev"]]
        inv = [scale / np.sqrt(s * s + eps) if eps else
               np.where(s != 0, scale / np.where(s == 0, 1, s), 0) for s in sd]
    elif "stddev" in kwargs:
        s = kwargs["stddev"]
        inv = [scale / np.sqrt(s * s + eps)] * len(x)
    else:
        ss = [((s - m) ** 2).sum(axis=axes, keepdims=True) for s, m in zip(x, mean)]
        if kwargs.get("batch"):
            ss, counts = [sum(ss)] * len(x), [sum(counts)] * len(x)
        inv = [_inv(s, c, ddof, scale, eps) for s, c in zip(ss, counts)]
    out_type = np.dtype(types.to_numpy_type(kwargs.get("dtype", types.FLOAT)))
    outs = []
    for s, m, v in zip(x, mean, inv):
        o = (s - m) * v + shift
        if out_type.kind in "iu":
            info = np.iinfo(out_type)
            o = np.clip(np.where(o >= 0, np.floor(o + 0.5), np.ceil(o - 0.5)), info.min, info.max)
        outs.append(o.astype(out_type))
    return outs


def _inv(ss, count, ddof, scale, eps):
    if count <= ddof:
        return np.full_like(ss, scale / np.sqrt(eps) if eps else 0.0)
    var = ss / (count - ddof)
    if eps:
        return scale / np.sqrt(var + eps)
    return np.where(var != 0, scale / np.sqrt(np.where(var == 0, 1, var)), 0)


def _source(values):
    return lambda: values


def run(lib, case, device="cpu"):
    name, kwargs, per_sample = CASES[case]
    data = INPUTS[name]

    @lib.pipeline_def(batch_size=len(data), num_threads=2, device_id=None if device == "cpu" else 0)
    def pipe():
        x = lib.fn.external_source(_source(data), layout="HWC")
        if device == "gpu":
            x = x.gpu()
        arg_inputs = {a: lib.fn.external_source(_source(PER_SAMPLE[name, a])) for a in per_sample}
        return lib.fn.normalize(x, **kwargs, **arg_inputs)

    p = pipe()
    p.build()
    return as_numpy_batch(p.run()[0])


def compare(got, expected, case):
    """uint8/int outputs within 1 level; floats within a relative tolerance."""
    diffs = []
    for a, b in zip(got, expected):
        assert a.shape == b.shape and a.dtype == b.dtype, (case, a.shape, b.shape, a.dtype, b.dtype)
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        if a.dtype.kind == "f":
            assert diff.max(initial=0) <= 1e-4 * max(1.0, np.abs(b).max(initial=0)), case
        else:
            assert diff.max(initial=0) <= 1, case
        diffs.append(diff.ravel())
    diff = np.concatenate(diffs)
    if got[0].dtype.kind != "f":
        assert diff.mean() < 0.05, case


@pytest.mark.parametrize("case", list(CASES))
def test_against_reference(case):
    name, kwargs, per_sample = CASES[case]
    tensors = {a: PER_SAMPLE[name, a] for a in per_sample}
    compare(run(torchdali, case), reference(INPUTS[name], kwargs, tensors), case)


@pytest.mark.parametrize("case", [c for c in CASES if c != "negative_axes"])  # DALI: axes >= 0
def test_against_dali(case):
    dali_or_skip()
    import nvidia.dali as nvidia_dali
    import nvidia.dali.fn  # noqa: F401
    compare(run(torchdali, case), run(nvidia_dali, case), case)


def test_dense_output_and_layout():
    @torchdali.pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe():
        return fn.normalize(fn.external_source(_source(INPUTS["same"]), layout="HWC"), axes=[0, 1])

    p = pipe()
    p.build()
    out = p.run()[0]
    samples = out.as_torch_list()
    assert out.layout() == "HWC" and out.as_torch().shape == (3, 9, 11, 3)
    # one kernel call over the dense batch: the samples are views of one output tensor
    assert len({s.untyped_storage().data_ptr() for s in samples}) == 1


def test_ops_class_names():
    assert torchdali.ops.Normalize is not None


def _run_one(images, layout="HWC", arg_inputs=None, **kwargs):
    @torchdali.pipeline_def(batch_size=len(images), num_threads=1, device_id=None)
    def pipe():
        extra = {k: fn.external_source(_source(v)) for k, v in (arg_inputs or {}).items()}
        return fn.normalize(fn.external_source(_source(images), layout=layout), **kwargs, **extra)

    p = pipe()
    p.build()
    return p.run()


IMG = [np.zeros((5, 6, 3), np.uint8), np.ones((4, 6, 3), np.uint8)]


@pytest.mark.parametrize("kwargs, arg_inputs, cls, match", [
    (dict(axes=[3]), None, ValueError, "normalize.*axes \\[3\\] out of range for samples of 3 dims"),
    (dict(axes=[-4]), None, ValueError, "axes \\[-4\\] out of range"),
    (dict(axes=[]), None, ValueError, "'axes' must list at least one axis"),
    (dict(axes=[0], axis_names="H"), None, ValueError, "axes or axis_names, not both"),
    (dict(axis_names="D"), None, ValueError, "axis_names 'D'.*not in the input layout 'HWC'"),
    (dict(mean=1.0, stddev=2.0, axes=[0]), None, ValueError, "axes must not be given"),
    (dict(stddev=0.0), None, ValueError, "'stddev' = 0.0 divides by zero"),
    (dict(axes=[1], batch=True), None, ValueError, "batch=True needs equal extents"),
    (dict(batch=True), dict(mean=[np.zeros((1, 1, 3), np.float32)] * 2), ValueError,
     "batch=True cannot be used with mean/stddev given as argument inputs"),
    (dict(axes=[0, 1]), dict(stddev=[np.ones((1, 1, 2), np.float32)] * 2), ValueError,
     "argument input 'stddev' sample 0 has shape \\(1, 1, 2\\).*needs \\(1, 1, 3\\)"),
    ({}, dict(mean=[np.ones((1, 3), np.float32)] * 2), ValueError,
     "argument input 'mean' sample 0 has shape \\(1, 3\\); it must have the input's 3 dims"),
    ({}, dict(mean=[np.ones((1, 1, 3), np.float32), np.ones((1, 6, 1), np.float32)]), ValueError,
     "argument input 'mean' sample 0 has shape \\(1, 1, 3\\)"),
])
def test_bad_arguments(kwargs, arg_inputs, cls, match):
    with pytest.raises(cls, match=match):
        _run_one(IMG, arg_inputs=arg_inputs, **kwargs)


def test_bad_constants_and_types():
    with pytest.raises(ValueError, match="normalize: argument 'epsilon' = -1.0: must be >= 0"):
        fn.normalize(fn.external_source(_source(IMG)), epsilon=-1.0)
    with pytest.raises(ValueError, match="normalize: argument 'ddof' = -1: must be >= 0"):
        fn.normalize(fn.external_source(_source(IMG)), ddof=-1)
    with pytest.raises(ValueError, match="normalize: argument 'dtype'.*not one of"):
        fn.normalize(fn.external_source(_source(IMG)), dtype=types.FLOAT64)
    with pytest.raises(TypeError, match="normalize: argument 'mean' = \\[1, 2\\]"):
        fn.normalize(fn.external_source(_source(IMG)), mean=[1, 2])
    with pytest.raises(TypeError, match="normalize.*argument 'mean': a constant must be a scalar"):
        _run_one(IMG, mean=np.zeros((1, 1, 3), np.float32))
    with pytest.raises(TypeError, match="normalize.*input type torch.float64"):
        _run_one([np.zeros((2, 2, 3))])


@requires_cuda
@pytest.mark.parametrize("case", list(CASES))
def test_gpu_matches_cpu(case):
    cpu, gpu = run(torchdali, case), run(torchdali, case, device="gpu")
    compare(gpu, cpu, case)
