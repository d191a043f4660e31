"""The compiled torch ops of torchdali (`torch.ops.torchdali.*`): one module per kernel
family, each with thin Python functions and, beside them, the fake kernels that let
`torch.compile` trace the ops. Importing a module loads the extension `torchdali._C`."""
import importlib


def load_extension():
    """Load torchdali._C, which registers the ops, or explain how to build it."""
    try:
        importlib.import_module("torchdali._C")
    except ImportError as e:
        raise ImportError(
            "torchdali's C++/CUDA extension (torchdali._C) is not built; build it from the "
            "repository root with `pip install --no-build-isolation -e .` (or "
            "`python setup.py build_ext --inplace`)") from e
