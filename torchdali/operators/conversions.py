"""Type conversion."""
import torch

from .. import schema, types
from ..schema import DTYPE, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator


def convert_saturate(x, dtype):
    """DALI's ConvertSat: floats to integers round half away from zero and clamp to
    the type's range; NaN becomes 0. Floats become bools after rounding (0.4 is False, NaN
    True)."""
    if x.dtype == dtype:
        return x
    if x.is_floating_point() and dtype == torch.bool:  # in double: 0.49999997 + 0.5 is 1 in float32
        x = x.double()
        return torch.where(x >= 0, torch.floor(x + 0.5), torch.ceil(x - 0.5)) != 0
    if x.is_floating_point() and not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        x = torch.nan_to_num(x.double(), nan=0.0)
        x = torch.where(x >= 0, torch.floor(x + 0.5), torch.ceil(x - 0.5)).clamp(info.min, info.max)
        # The 64-bit maxima are 2^63 and 2^64 as doubles, one past the types' ranges.
        if dtype == torch.int64:
            return torch.where(x >= 2.0 ** 63, info.max, x.to(dtype))
        if dtype == torch.uint64:
            out = x.to(dtype)
            out.view(torch.int64)[x >= 2.0 ** 64] = -1
            return out
        return x.to(dtype)
    if not x.is_floating_point() and not dtype.is_floating_point and dtype != torch.bool and x.dtype != torch.bool:
        # In int64: uint64 through its bits, where values from 2^63 on are negative.
        wide = x.view(torch.int64) if x.dtype == torch.uint64 else x.to(torch.int64)
        if dtype == torch.uint64:
            return wide.clamp(min=0).to(dtype)
        info = torch.iinfo(dtype)
        out = wide.clamp(info.min, info.max)
        if x.dtype == torch.uint64:  # above every other type's range
            out = torch.where(wide < 0, info.max, out)
        return out.to(dtype)
    return x.to(dtype)


@register("cast", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("Cast",),
          args=[Arg("dtype", DTYPE, schema.REQUIRED, "Output type.")])
class Cast(Operator):
    """Convert to `dtype`, rounding and saturating as DALI does."""

    def plan(self, inputs):
        self.dtype = types.to_torch_type(self.spec.args["dtype"])
        spec = inputs[0]
        return [BatchSpec(spec.device, self.dtype, spec.ndim, spec.layout)], self.step

    def step(self, inputs, args, ctx):
        return [cast_batch(self, inputs[0], self.dtype)]


def cast_batch(op, batch, dtype):
    """The batch converted to `dtype` by convert_saturate, as one flat buffer (cast, cast_like)."""
    if not len(batch):
        return batch
    try:
        flat, shapes = batch.flat()
    except ValueError as e:  # samples of different ndim
        raise op.error(str(e), ValueError) from None
    return TensorList.from_flat(convert_saturate(flat, dtype), shapes, batch.layout(), device=batch.device)
