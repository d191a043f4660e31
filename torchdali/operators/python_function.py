"""Python operators: `python_function` (NumPy on the CPU; CuPy on the GPU, or torch
tensors without CuPy), `torch_python_function` (torch tensors) and
`dl_tensor_python_function` (DLPack capsules).

They have side effects, so they need a current pipeline and are never pruned. They run
in the thread that runs their stage (the calling thread with exec_async=False,
exec_pipelined=False). GPU functions run with the pipeline's CUDA stream current (torch
and CuPy), so their work is ordered with the rest of the pipeline without waiting;
`dl_tensor_python_function` with `synchronize_stream=True` waits for the pipeline's
earlier GPU work before the call, and leaves the function's own work to the user, as
DALI documents."""
import torch

from ..schema import ANY, BOOL, INT, REQUIRED, Arg, register
from ..tensor_list import TensorList, to_torch_array
from .base import Operator


def _num_outputs(args, num_inputs):
    return args.get("num_outputs", 1)


def _cupy():
    try:
        import cupy
    except ImportError:
        return None
    return cupy


FUNCTION_ARGS = [
    Arg("function", ANY, REQUIRED, "The Python callable.", check=lambda f: None if callable(f) else "must be callable"),
    Arg("num_outputs", INT, 1, "Number of outputs (0: the function is called for its side effects).",
        check=lambda n: None if n >= 0 else "must be >= 0"),
    Arg("batch_processing", BOOL, False, "Call the function once per batch with lists of samples "
        "(True) or once per sample (False)."),
    Arg("output_layouts", ANY, None, "Layout of the outputs: one string, or one per output."),
]


class _PythonOperator(Operator):
    """Calls the user's function per sample or per batch and converts data both ways."""

    def to_user(self, t):
        raise NotImplementedError

    def from_user(self, x, where):
        if type(x).__name__ == "PyCapsule":
            return torch.utils.dlpack.from_dlpack(x)
        try:
            return to_torch_array(x, "", where)
        except TypeError as e:
            raise self.error(str(e), TypeError) from None

    def before_call(self):
        """Hook run before the function (stream synchronisation)."""

    def _call(self, *args):
        self.before_call()
        cupy = _cupy() if self.spec.device == "gpu" and self.uses_cupy else None
        if cupy is None:
            return self.spec.args["function"](*args)
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        with stream:
            return self.spec.args["function"](*args)

    uses_cupy = False

    def _outputs(self, value, n, where):
        if n == 1:
            return [value]
        if not isinstance(value, (tuple, list)) or len(value) != n:
            raise self.error(f"{where}: the function must return a tuple of {n} outputs (num_outputs), got "
                             f"{type(value).__name__}", TypeError)
        return list(value)

    def _batch_samples(self, value, k):
        where = f"output {k}"
        if isinstance(value, (list, tuple)):
            return [self.from_user(x, f"{where} sample {i}") for i, x in enumerate(value)]
        t = self.from_user(value, where)
        return list(t.unbind(0)) if t.dim() else [t]

    def run(self, inputs, args, ctx):
        n_out = self.spec.num_outputs
        samples = [b.as_torch_list() for b in inputs]
        if args["batch_processing"]:
            value = self._call(*[[self.to_user(t) for t in s] for s in samples])
            outs = [self._batch_samples(v, k) for k, v in enumerate(self._outputs(value, n_out, "batch"))] \
                if n_out else []
        else:
            outs = [[] for _ in range(n_out)]
            for i in range(ctx.batch_size):
                value = self._call(*[self.to_user(s[i]) for s in samples])
                if n_out:
                    for k, v in enumerate(self._outputs(value, n_out, f"sample {i}")):
                        outs[k].append(self.from_user(v, f"output {k} of sample {i}"))
        return [self._make(o, k, ctx) for k, o in enumerate(outs)]

    def _make(self, samples, k, ctx):
        if len(samples) != ctx.batch_size:
            raise self.error(f"output {k} has {len(samples)} samples for a batch of {ctx.batch_size}",
                             ValueError)
        gpu = self.spec.device == "gpu"
        samples = [s.to(ctx.cuda_device) if gpu and not s.is_cuda else s for s in samples]
        if not gpu and any(s.is_cuda for s in samples):
            raise self.error(f"output {k} is on the GPU, but the operator runs on the CPU", TypeError)
        layouts = self.spec.args["output_layouts"]
        layout = layouts[k] if isinstance(layouts, (list, tuple)) else (layouts or "")
        return TensorList.make(samples, layout, device=self.spec.device)


@register("python_function", devices=("cpu", "gpu"), inputs=(0, 64), outputs=_num_outputs,
          side_effects=True, args=FUNCTION_ARGS)
class PythonFunction(_PythonOperator):
    """Run a Python function on the data: NumPy arrays on the CPU; on the GPU, CuPy arrays
    when CuPy is installed, torch tensors otherwise. Outputs may be NumPy, CuPy or torch."""

    uses_cupy = True

    def to_user(self, t):
        if t.is_cuda:
            cupy = _cupy()
            return cupy.from_dlpack(t) if cupy is not None else t
        return t.numpy()


@register("torch_python_function", devices=("cpu", "gpu"), inputs=(0, 64), outputs=_num_outputs,
          side_effects=True, args=FUNCTION_ARGS)
class TorchPythonFunction(_PythonOperator):
    """Run a Python function on torch tensors (CPU or GPU), returning torch tensors."""

    def to_user(self, t):
        return t


@register("dl_tensor_python_function", devices=("cpu", "gpu"), inputs=(0, 64), outputs=_num_outputs,
          side_effects=True,
          args=[a if a.name != "batch_processing" else
                Arg("batch_processing", BOOL, True, "Call the function once per batch with lists of "
                    "DLPack capsules (True) or once per sample (False).") for a in FUNCTION_ARGS]
          + [Arg("synchronize_stream", BOOL, True, "Wait for the pipeline's earlier GPU work before "
                 "calling the function (the function must finish its own work before returning).")])
class DLTensorPythonFunction(_PythonOperator):
    """Run a Python function on DLPack capsules, returning DLPack capsules (or arrays)."""

    def to_user(self, t):
        return torch.utils.dlpack.to_dlpack(t)

    def before_call(self):
        if self.spec.device == "gpu" and self.spec.args["synchronize_stream"]:
            torch.cuda.current_stream().synchronize()
