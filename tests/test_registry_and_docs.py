"""The operator registry is the single source of fn, ops and docs (the generated reference's
checks: tests/test_docs_site.py)."""
import pathlib

import torchdali as dali
from torchdali import schema


def test_every_public_operator_is_in_fn_and_ops():
    for op in schema.all_schemas().values():
        if op.internal:
            continue
        module = dali.fn
        for part in op.module_path:
            module = getattr(module, part)
        doc = getattr(module, op.fn_name).__doc__
        if op.deprecated_use:  # an operator DALI deprecates
            doc = doc.removeprefix(f"Deprecated: use `{op.replacement}`.\n\n")
        assert doc.startswith(op.doc.strip()[:20])
        for class_path in op.class_names:
            target = dali.ops
            for part in class_path.split("."):
                target = getattr(target, part)
            assert target.schema is op


def test_legacy_class_names():
    for name in ("FileReader", "ImageDecoder", "CoinFlip", "Uniform", "CropMirrorNormalize", "Cast",
                 "ExternalSource"):
        assert hasattr(dali.ops, name), name
    assert dali.ops.readers.File.schema is dali.ops.FileReader.schema


def test_readme_counts_the_public_operators():
    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    public = [op for op in schema.all_schemas().values() if not op.internal]
    assert f"({len(public)} operators, among them" in readme
