"""The `output_dtype` / `output_ndim` declarations of a Pipeline: checked when given,
matched to the number of outputs at build, and compared with every iteration's outputs
(a RuntimeError, as DALI)."""
from .. import types

_KINDS = {"output_dtype": "a value from torchdali.types.DALIDataType", "output_ndim": "an int"}


def check_declaration(name, value):
    """A TypeError/ValueError for a declaration of the wrong type (at construction)."""
    if value is None:
        return
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if item is None and isinstance(value, (list, tuple)):
            continue
        if name == "output_dtype":
            ok = isinstance(item, types.DALIDataType)
        else:
            ok = isinstance(item, int) and not isinstance(item, bool)
        if not ok:
            found = f"type {type(item)} in the list" if isinstance(value, (list, tuple)) else f"type: {type(item)}"
            raise TypeError(f"`{name}` must be either: {_KINDS[name]}, a list of these or None. Found {found}.")
        if name == "output_dtype" and item == types.NO_TYPE:
            raise ValueError(f"`output_dtype` can't be a types.NO_TYPE. Found value: {item!r}")
        if name == "output_ndim" and item < 0:
            raise ValueError(f"`output_ndim` must be non-negative. Found value: {item}.")


def expand(dtype, ndim, num_outputs):
    """(dtypes, ndims), one entry per output (None: not checked); a single value applies to
    every output. A list of another length is a RuntimeError at build."""
    def one(value):
        if isinstance(value, (list, tuple)):
            return list(value)
        return [value] * num_outputs

    dtypes, ndims = one(dtype), one(ndim)
    if len(dtypes) != num_outputs or len(ndims) != num_outputs:
        raise RuntimeError(f"Lengths of provided output descriptions do not match. Expected "
                           f"num_outputs={num_outputs}. Received: output_dtype={dtypes} output_ndim={ndims}")
    return dtypes, ndims


def check_outputs(outputs, dtypes, ndims):
    """A RuntimeError naming the first output whose type or number of dimensions differs."""
    for i, (out, dtype, ndim) in enumerate(zip(outputs, dtypes, ndims)):
        if not len(out):
            continue
        if dtype is not None and out.dtype != dtype:
            raise RuntimeError(f"Data type in the output_idx={i} does not match. Expected: {dtype.name}. "
                               f"Received: {out.dtype.name}.")
        if ndim is None:
            continue
        got = out.sample(0).dim()
        if got != ndim:
            raise RuntimeError(f"Number of dimensions in the output_idx={i} does not match. Expected: {ndim}. "
                               f"Received: {got}.")
