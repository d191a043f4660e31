"""`select`: each sample through the augmentation its index picks, as per-sample `if`s
(a binary search over the list, so a sample passes log2(len) conditions)."""
from ...conditionals import runtime
from ...graph import DataNode, _definition


def require_conditionals(caller):
    """Refuse a per-sample choice where the pipeline definition has no per-sample conditionals."""
    definition = _definition()
    if definition is None:
        raise RuntimeError(f"{caller}: call it inside a pipeline definition (a @pipeline_def function or "
                           "`with pipe:`)")
    if definition.conditions is None:
        raise TypeError(f"{caller}: choosing an augmentation per sample uses per-sample conditionals; decorate "
                        "the pipeline with @pipeline_def(enable_conditionals=True)")


def _split(lo, hi, ops, index, args, kwargs):
    """ops[lo..hi] by `index`, applied each to its samples."""
    if lo == hi:
        return ops[lo](*args, **kwargs)
    mid = (lo + hi) // 2
    return runtime.if_exp(index <= mid, lambda: _split(lo, mid, ops, index, args, kwargs),
                          lambda: _split(mid + 1, hi, ops, index, args, kwargs), f"augmentation index <= {mid}")


def select(ops, selected_op_idx, *op_args, **op_kwargs):
    """Apply `ops[selected_op_idx](*op_args, **op_kwargs)` per sample: `selected_op_idx` is
    a batch of indices in [0, len(ops) - 1] (or an int); DataNodes among the arguments are
    split between the augmentations with the samples. Needs a pipeline with
    `enable_conditionals=True`."""
    return select_for("select", ops, selected_op_idx, op_args, op_kwargs)


def select_for(caller, ops, index, args, kwargs):
    """`select`, with errors naming `caller`."""
    if not ops:
        raise ValueError(f"{caller}: the list of augmentations is empty")
    if isinstance(index, DataNode) and len(ops) > 1:
        require_conditionals(caller)
    return _split(0, len(ops) - 1, ops, index, args, kwargs)
