"""The operators behind per-sample conditionals (`enable_conditionals`): split a batch
by a predicate, merge two branches back in the original sample order, and the checks
and negation of logical expressions. Added to the graph by torchdali.conditionals.

A dense batch stays dense: it is split with one gather per branch and merged with one
scatter per branch; the samples of other batches move without copies."""
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
    """The predicate as a bool array [N]; each sample must be a 0-d bool or number (checked
    once for a dense batch)."""
    batch = args.given("predicate")
    if batch is None:  # a constant
        values = np.broadcast_to(np.asarray(args["predicate"]), (n,))
    else:
        dense = batch.dense_tensor()
        samples = [dense] if dense is not None else batch.as_torch_list()
        for i, s in enumerate(samples):
            if s.dim() != (1 if dense is not None else 0):
                shape = tuple(s.shape[1:]) if dense is not None else tuple(s.shape)
                raise op.error(f"{what} must be a scalar (0-d) per sample, but sample {i} has shape {shape}",
                               ValueError)
        values = (dense if dense is not None else torch.stack(samples) if samples else torch.zeros(0)).cpu().numpy()
    if values.dtype.kind not in "biuf":
        raise op.error(f"{what} must be a bool or a number, got {values.dtype} at sample 0", TypeError)
    return values != 0


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
        dense = batch.dense_tensor()
        info = np.array(batch.source_info, dtype=object) if batch.source_info else None
        outs = []
        for keep in (np.flatnonzero(truth), np.flatnonzero(~truth)):
            if dense is not None:
                part = dense[torch.from_numpy(keep).to(dense.device)]  # one gather
            else:
                samples = batch.as_torch_list()
                part = [samples[i] for i in keep.tolist()]
            outs.append(TensorList.make(part, batch.layout(), device=batch.device,
                                        source_info=info[keep].tolist() if info is not None else None))
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
        selected = int(truth.sum())
        if len(true) != selected or len(false) != len(truth) - selected:
            raise self.error(f"the branches have {len(true)} and {len(false)} samples, the condition "
                             f"selects {selected} and {len(truth) - selected}")
        if len(true) and len(false):
            self._check_alike(true, false, args)
        where = {True: np.flatnonzero(truth), False: np.flatnonzero(~truth)}
        layout = true.layout() if len(true) else false.layout()
        device = true.device if len(true) else false.device
        info = None
        if (true.source_info or not len(true)) and (false.source_info or not len(false)):
            merged = np.empty(len(truth), dtype=object)
            for branch, part in ((True, true), (False, false)):
                merged[where[branch]] = part.source_info or []
            info = merged.tolist()
        dense = {True: true.dense_tensor(), False: false.dense_tensor()}
        alike = all(d is not None for d in dense.values()) and dense[True].shape[1:] == dense[False].shape[1:] \
            and dense[True].dtype == dense[False].dtype
        if alike:  # one scatter per branch
            out = dense[True].new_empty((len(truth),) + tuple(dense[True].shape[1:]))
            for branch in (True, False):
                out[torch.from_numpy(where[branch]).to(out.device)] = dense[branch]
            return [TensorList.make(out, layout, device=device, source_info=info)]
        samples = [None] * len(truth)
        for branch, part in ((True, true), (False, false)):
            for i, sample in zip(where[branch].tolist(), part.as_torch_list()):
                samples[i] = sample
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
        dense = inputs[0].dense_tensor()
        if dense is not None and dense.dim() == 1:  # a batch of scalars: one operation
            return [TensorList.make(torch.logical_not(dense), device="cpu")]
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
        dense = inputs[0].dense_tensor()
        if dense is not None and dense.dim() == 1 and dense.dtype == torch.bool:  # checked at once
            return [inputs[0]]
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
