"""The operators behind per-sample conditionals (`enable_conditionals`): split a batch
by a predicate, merge two branches back in the original sample order, and the checks
and negation of logical expressions. Added to the graph by torchdali.conditionals.

Samples move without copies: a split or merged batch holds the same sample tensors
(a dense batch is stacked only if a consumer asks for one tensor)."""
import numpy as np
import torch

from .. import schema
from ..schema import ANY, STR, Arg, register
from ..tensor_list import TensorList
from .base import Operator

_PREDICATE = Arg("predicate", ANY, schema.REQUIRED, "Per-sample condition (a CPU scalar; non-zero is true).",
                 per_sample=True)
_CONDITION = Arg("condition", STR, "", "Source text of the condition, for error messages.")


def _truth(op, args, n, what):
    """The predicate's samples as Python bools; each must be a 0-d bool or number."""
    out = []
    for i in range(n):
        value = np.asarray(args.sample("predicate", i))
        if value.ndim != 0:
            raise op.error(f"{what} must be a scalar (0-d) per sample, but sample {i} has shape "
                           f"{tuple(value.shape)}", ValueError)
        if value.dtype.kind not in "biuf":
            raise op.error(f"{what} must be a bool or a number, got {value.dtype} at sample {i}", TypeError)
        out.append(bool(value))
    return out


def _condition(args):
    text = args["condition"]
    return f"the condition `{text}`" if text else "the condition"


@register("_conditional.split", devices=("cpu", "gpu"), inputs=(1, 1), outputs=2, internal=True,
          args=[_PREDICATE, _CONDITION])
class Split(Operator):
    """The samples where the predicate is true (output 0) and where it is false (output 1)."""

    def run(self, inputs, args, ctx):
        batch = inputs[0]
        truth = _truth(self, args, len(batch), _condition(args))
        samples = batch.as_torch_list()
        info = batch.source_info
        outs = []
        for want in (True, False):
            keep = [i for i, t in enumerate(truth) if t == want]
            outs.append(TensorList.make([samples[i] for i in keep], batch.layout(), device=batch.device,
                                        source_info=[info[i] for i in keep] if info else None))
        return outs


@register("_conditional.merge", devices=("cpu", "gpu"), inputs=(2, 2), internal=True,
          args=[_PREDICATE, _CONDITION,
                Arg("what", STR, "the value", "The merged variable, for error messages.")])
class Merge(Operator):
    """One batch from the `if` branch's samples (input 0) and the `else` branch's (input 1),
    in the order of the predicate."""

    own_batch_sizes = True  # the inputs have the branches' sizes, the predicate the whole batch's

    def run(self, inputs, args, ctx):
        true, false = inputs
        truth = _truth(self, args, ctx.batch_size, _condition(args))
        if len(true) != sum(truth) or len(false) != len(truth) - sum(truth):
            raise self.error(f"the branches have {len(true)} and {len(false)} samples, the condition "
                             f"selects {sum(truth)} and {len(truth) - sum(truth)}")
        if len(true) and len(false):
            self._check_alike(true, false, args)
        parts = {True: iter(true.as_torch_list()), False: iter(false.as_torch_list())}
        infos = {True: iter(true.source_info or []), False: iter(false.source_info or [])}
        samples = [next(parts[t]) for t in truth]
        info = None
        if (true.source_info or not len(true)) and (false.source_info or not len(false)):
            info = [next(infos[t]) for t in truth]
        layout = true.layout() if len(true) else false.layout()
        device = true.device if len(true) else false.device
        return [TensorList.make(samples, layout, device=device, source_info=info)]

    def _check_alike(self, true, false, args):
        a, b = true.sample(0), false.sample(0)
        problems = []
        if a.dtype != b.dtype:
            problems.append(f"type {_name(a.dtype)} vs {_name(b.dtype)}")
        if a.dim() != b.dim():
            problems.append(f"{a.dim()} vs {b.dim()} dimensions")
        if true.layout() != false.layout():
            problems.append(f"layout {true.layout()!r} vs {false.layout()!r}")
        if problems:
            raise self.error(f"{args['what']} differs between the branches of `if {args['condition']}` "
                             f"({', '.join(problems)}); every branch must give it the same type, number "
                             "of dimensions and layout", TypeError)


@register("_conditional.not_", devices=("cpu",), inputs=(1, 1), internal=True)
class Not(Operator):
    """Per-sample logical negation of scalars of any type (non-zero is true), as bool."""

    def run(self, inputs, args, ctx):
        out = []
        for i, s in enumerate(inputs[0].as_torch_list()):
            if s.dim() != 0:
                raise self.error(f"`not` needs a scalar (0-d) per sample, but sample {i} has shape "
                                 f"{tuple(s.shape)}", ValueError)
            out.append(torch.logical_not(s))
        return [TensorList.make(out, device="cpu")]


@register("_conditional.validate_logical", devices=("cpu",), inputs=(1, 1), internal=True,
          args=[Arg("expression", STR, schema.REQUIRED, "'and' or 'or'.", choices=("and", "or")),
                Arg("side", STR, schema.REQUIRED, "'left' or 'right'.", choices=("left", "right")),
                Arg("text", STR, "", "Source text of the expression, for error messages.")])
class ValidateLogical(Operator):
    """Passes its input through after checking that every sample is a bool scalar: `and`
    and `or` on DataNodes are restricted to those, as in DALI."""

    def run(self, inputs, args, ctx):
        for i, s in enumerate(inputs[0].as_torch_list()):
            if s.dim() != 0 or s.dtype != torch.bool:
                raise self.error(
                    f"`{args['text'] or args['expression']}`: the {args['side']} operand of `{args['expression']}` "
                    f"must be a bool scalar (0-d) per sample, but sample {i} is {_name(s.dtype)} of shape "
                    f"{tuple(s.shape)} (compare it, e.g. `x != 0`, or use `not`/`if`, which take numbers)",
                    TypeError)
        return [inputs[0]]


def _name(dtype):
    return str(dtype).replace("torch.", "")
