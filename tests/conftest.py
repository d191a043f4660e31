import io
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# DALI allocates pinned memory in some of its readers (experimental.readers.fits) unless told
# not to, which fails without a GPU driver; it reads the flag at its first allocation.
os.environ.setdefault("DALI_RESTRICT_PINNED_MEM", "1")


def fork_or_skip():
    """Forked Python workers need a process where CUDA is untouched; on a GPU machine earlier
    tests have touched it, and rerun_without_cuda() runs such tests in a fresh process."""
    if torch.cuda.is_initialized():
        pytest.skip("CUDA is initialised in this process; run in a fresh one")


def rerun_without_cuda(test_file, *pytest_args):
    """Run the fork tests of `test_file` in a fresh interpreter (where CUDA is untouched),
    when this process has touched CUDA and skipped them."""
    if not torch.cuda.is_initialized():
        pytest.skip("CUDA is untouched here: the fork tests ran in this process")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file,
                          *pytest_args], cwd=os.path.dirname(test_file), capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "failed" not in run.stdout


@pytest.fixture(params=["batched", "one_by_one"])
def cpu_jpeg_decoder(request, monkeypatch):
    """Run a test with the CPU decoders' JPEGs decoded by our batched libjpeg-turbo decoder
    (skipped where the extension was built without it) and, again, one by one through
    torchvision, as where it is not built. Yields which."""
    from torchdali.kernels import libjpeg
    from torchdali.operators import decoders

    if request.param == "batched" and not libjpeg.available():
        pytest.skip("the extension was built without libjpeg-turbo")
    if request.param == "one_by_one":
        engine = decoders._jpeg_engine
        monkeypatch.setattr(decoders, "_jpeg_engine", lambda device: engine(device) if device == "mixed" else None)
    return request.param


def photo(h, w, seed):
    """A smooth RGB uint8 image [h, w, 3] with a little noise: JPEG-friendly test content."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([128 + 100 * np.sin(xx / (5.0 + c) + c) * np.cos(yy / 4.0) for c in range(3)], -1)
    return np.clip(img + rng.normal(0, 4, (h, w, 3)), 0, 255).astype(np.uint8)


def jpeg(img, **kwargs):
    """`img` (uint8 HWC, or HW for grayscale) encoded by Pillow (its JPEG options in kwargs),
    as a 1-D uint8 tensor."""
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", **kwargs)
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def make_reader(name, batch_size, seed=1234, arg_inputs=(), **kwargs):
    """Reader `name` built as a CPU pipeline of one thread builds it (instance "reader"),
    outside a pipeline: the readers' tests run its batches directly."""
    from torchdali import schema
    from torchdali.operators.base import OpSpec

    sch = schema.get(name)
    args = sch.check_args(kwargs, arg_inputs)
    spec = OpSpec(schema=sch, name="reader", device="cpu", args=args, arg_input_names=tuple(arg_inputs),
                  num_outputs=sch.outputs_for(args, 0), seed=seed, max_batch_size=batch_size, num_threads=1,
                  device_id=None)
    return sch.impl(spec)


def dali_or_skip():
    """NVIDIA DALI as an oracle, where installed (CPU-only use)."""
    return pytest.importorskip("nvidia.dali")


def optional_dali():
    """NVIDIA DALI with its `fn` module where installed, else None: for test modules whose
    oracle tests skip without it (`pytest.mark.skipif(dali is None, reason=NO_DALI)`)."""
    try:
        import nvidia.dali as dali
        import nvidia.dali.fn  # noqa: F401  (dali.fn)
    except ImportError:
        return None
    return dali


NO_DALI = "nvidia.dali is not installed"


def as_numpy_batch(tl):
    """A TensorList (ours or DALI's) as a list of NumPy arrays."""
    if hasattr(tl, "as_cpu"):
        tl = tl.as_cpu()
    return [np.array(tl.at(i)) for i in range(len(tl))]


def random_images(sizes, c, dtype, device, seed=0):
    """HWC images of the given (h, w) sizes with values over 0..255, for kernel tests."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.uint8:
        ims = [torch.randint(0, 256, (h, w, c), generator=g, dtype=torch.uint8) for h, w in sizes]
    else:
        ims = [(torch.rand(h, w, c, generator=g) * 255).to(dtype) for h, w in sizes]
    return [im.to(device) for im in ims]


def assert_one_buffer(batch):
    """The TensorList's samples are consecutive views of one [N, ...] tensor: the kernel
    wrote a dense batch, and as_torch() hands it over without a copy."""
    samples = batch.as_torch_list()
    step = samples[0].numel() * samples[0].element_size()
    assert all(s.data_ptr() == samples[0].data_ptr() + k * step for k, s in enumerate(samples))
    assert batch.as_torch().data_ptr() == samples[0].data_ptr()


def constant_source(batch):
    """An external_source callback giving `batch` every iteration (it takes no parameters:
    external_source would pass it the iteration)."""
    return lambda: batch


def run_operator(lib, op, images, layout="HWC", device="cpu", inputs=(), arg_inputs=None,
                 **kwargs):
    """One iteration of `lib.fn.<op>(images, *inputs, **kwargs)` (lib: torchdali or DALI);
    `inputs` and the values of `arg_inputs` are per-sample lists fed through external_source.
    Returns the outputs as NumPy arrays and the output layout."""
    images = [np.ascontiguousarray(im) for im in images]

    @lib.pipeline_def(batch_size=len(images), num_threads=2,
                      device_id=None if device == "cpu" else 0, seed=1)
    def pipe():
        x = lib.fn.external_source(constant_source(images), layout=layout)
        if device == "gpu":
            x = x.gpu()
        extra = [lib.fn.external_source(constant_source(v)) for v in inputs]
        named = {name: lib.fn.external_source(constant_source(v)) for name, v in (arg_inputs or {}).items()}
        return getattr(lib.fn, op)(x, *extra, **kwargs, **named)

    p = pipe()
    p.build()
    out = p.run()[0]
    return as_numpy_batch(out), out.layout()


def assert_batches_equal(got, expected):
    """Same number of samples, each of the same shape, dtype and values."""
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape and g.dtype == e.dtype, f"sample {i}: {g.shape} {g.dtype} vs {e.shape} {e.dtype}"
        np.testing.assert_array_equal(g, e, err_msg=f"sample {i}")


def reflect101(i, n):
    """Index array `i` folded into [0, n) with reflect-101 borders (2 1 | 0 1 2 | 1 0), the
    border rule of DALI's convolutions: the reference for separable_conv and gaussian_blur."""
    if n == 1:
        return np.zeros_like(i)
    period = 2 * (n - 1)
    i = np.abs(i) % period
    return np.where(i >= n, period - i, i)
