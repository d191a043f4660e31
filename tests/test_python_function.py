"""Python operators: python_function, torch_python_function, dl_tensor_python_function."""
import threading

import numpy as np
import pytest
import torch

from torchdali import fn
from torchdali.pipeline import Pipeline

from conftest import requires_cuda

N = 3


def images(i):
    return [np.arange(12, dtype=np.uint8).reshape(2, 2, 3) + k for k in range(N)]


def run(build, device_id=None, **kwargs):
    pipe = Pipeline(batch_size=N, num_threads=2, device_id=device_id, seed=1, **kwargs)
    with pipe:
        pipe.set_outputs(*build())
    return [[np.asarray(o.as_cpu().at(i)) if o.device == "gpu" else np.asarray(o.at(i)) for i in range(len(o))]
            for o in pipe.run()]


def swap(a, b):
    return b.copy(), a.copy()


OPS = {
    "python_function": (fn.python_function, lambda a, b: (b.copy(), a + 1)),
    "torch_python_function": (fn.torch_python_function, lambda a, b: (b.clone(), a + 1)),
    "dl_tensor_python_function": (
        fn.dl_tensor_python_function,
        lambda a, b: (torch.utils.dlpack.to_dlpack(torch.from_dlpack(b).clone()),
                      torch.utils.dlpack.to_dlpack(torch.from_dlpack(a) + 1))),
}


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=requires_cuda)])
def test_per_sample_two_outputs(name, device):
    op, function = OPS[name]

    def build():
        x = fn.external_source(images)
        y = fn.external_source(lambda i: [np.full((2, 2, 3), 7, np.uint8)] * N)
        if device == "gpu":
            x, y = x.gpu(), y.gpu()
        kwargs = {"batch_processing": False} if name == "dl_tensor_python_function" else {}
        return op(x, y, function=function, num_outputs=2, device=device, output_layouts=["HWC", "HWC"],
                  **kwargs)

    first, second = run(build, device_id=0 if device == "gpu" else None)
    for k in range(N):
        np.testing.assert_array_equal(first[k], np.full((2, 2, 3), 7, np.uint8))
        np.testing.assert_array_equal(second[k], images(0)[k] + 1)


def test_batch_processing_gets_lists_and_may_return_an_array():
    def build():
        x = fn.external_source(images)
        total = fn.python_function(x, function=lambda batch: np.stack([s.sum() for s in batch]),
                                   batch_processing=True)
        doubled = fn.torch_python_function(x, function=lambda batch: [s * 2 for s in batch],
                                           batch_processing=True)
        return total, doubled

    total, doubled = run(build)
    assert [int(t) for t in total] == [int(s.sum()) for s in images(0)]
    np.testing.assert_array_equal(doubled[1], images(0)[1] * 2)


def test_dl_tensor_batch_processing_is_the_default():
    got = []

    def build():
        x = fn.external_source(images)
        return [fn.dl_tensor_python_function(x, function=lambda caps: got.append(len(caps)) or caps)]

    run(build)
    assert got and set(got) == {N}  # one call per batch (prefetching may run two)


def test_side_effects_keep_unused_operators_and_run_in_the_calling_thread():
    calls = []

    def build():
        x = fn.external_source(images)
        fn.python_function(x, function=lambda a: calls.append(threading.get_ident()), num_outputs=0)
        return [x]

    run(build, exec_async=False, exec_pipelined=False)
    assert calls == [threading.get_ident()] * N


def test_needs_a_current_pipeline():
    x = None
    with Pipeline(batch_size=1, num_threads=1, device_id=None):
        x = fn.external_source(images)
    with pytest.raises(RuntimeError, match="current pipeline"):
        fn.python_function(x, function=lambda a: a)


@pytest.mark.parametrize("function,num_outputs,error,match", [
    (lambda a: a, 2, TypeError, "tuple of 2 outputs"),
    (lambda a: "text", 1, TypeError, "not an array"),
])
def test_bad_outputs(function, num_outputs, error, match):
    def build():
        out = fn.python_function(fn.external_source(images), function=function, num_outputs=num_outputs)
        return list(out) if num_outputs > 1 else [out]

    with pytest.raises(error, match=match):
        run(build)


def test_bad_arguments():
    with Pipeline(batch_size=1, num_threads=1, device_id=None):
        x = fn.external_source(images)
        with pytest.raises(ValueError, match="function"):
            fn.python_function(x, function=3)
        with pytest.raises(ValueError, match="num_outputs"):
            fn.python_function(x, function=lambda a: a, num_outputs=-1)


@requires_cuda
def test_gpu_python_function_gets_cupy_or_torch_and_is_ordered_on_the_pipeline_stream():
    kinds = []

    def f(a):
        kinds.append(type(a).__module__.split(".")[0])
        return a * 2

    def build():
        x = fn.external_source(images, device="gpu")
        return [fn.python_function(x, function=f, device="gpu")]

    (out,) = run(build, device_id=0)
    np.testing.assert_array_equal(out[2], images(0)[2] * 2)
    assert set(kinds) <= {"cupy", "torch"}
