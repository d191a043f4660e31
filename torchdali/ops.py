"""DALI's class API: `ops.readers.File(...)`, legacy names such as `ops.FileReader`.

Filled in from the operator registry when `torchdali.fn` is imported."""
