"""DALI's deprecated fn names (`fn.coin_flip`, `fn.image_decoder`, `fn.experimental.*` of
operators that left the experimental phase, ...): each calls its operator and warns, with
DALI's wording, that it is deprecated. And the other names DALI gives an operator
(`fn.experimental.resize`), which call it without a warning."""
import warnings

import numpy as np
import pytest

import torchdali
from torchdali import fn, schema

DEPRECATED = [(path, op.replacement) for op in schema.all_schemas().values() for path in op.deprecated_names] + \
    [(op.name, op.replacement) for op in schema.all_schemas().values() if op.deprecated_use and not op.internal]
OTHER_NAMES = [(path, op.name) for op in schema.all_schemas().values() for path in op.other_names]


def resolve(root, path):
    for part in path.split("."):
        root = getattr(root, part)
    return root


def test_dali_keeps_the_same_names():
    dali_fn = pytest.importorskip("nvidia.dali.fn")
    for path, _ in DEPRECATED + OTHER_NAMES:
        assert callable(resolve(dali_fn, path)), path


@pytest.mark.parametrize("path,name", OTHER_NAMES, ids=[p for p, _ in OTHER_NAMES])
def test_other_names_call_the_operator_without_a_warning(path, name):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert resolve(fn, path).__doc__ == resolve(fn, name).__doc__


@pytest.mark.parametrize("path,replacement", DEPRECATED, ids=[p for p, _ in DEPRECATED])
def test_warns_and_names_what_to_use(path, replacement):
    with pytest.warns(DeprecationWarning, match=rf"`torchdali.fn.{path}` is now deprecated. Use "
                                                rf"`{replacement}` instead"):
        try:
            resolve(fn, path)()
        except (TypeError, ValueError, RuntimeError):
            pass  # called without its inputs or arguments: the warning comes first
    assert replacement in resolve(fn, path).__doc__


def test_shapes_is_the_shape_method():
    @torchdali.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        x = fn.external_source(lambda: [np.zeros((3, 4, 2), np.uint8), np.zeros((5, 1, 2), np.uint8)])
        with pytest.warns(DeprecationWarning):
            old = fn.shapes(x, dtype=torchdali.types.INT32)
        return old, x.shape(dtype=torchdali.types.INT32)

    p = pipe()
    p.build()
    old, new = p.run()
    assert [list(s) for s in old.as_torch_list()] == [[3, 4, 2], [5, 1, 2]]
    assert all(a.equal(b) for a, b in zip(old.as_torch_list(), new.as_torch_list()))


def test_a_deprecated_name_runs_its_operator():
    @torchdali.pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=3)
    def pipe(old):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return (fn.uniform if old else fn.random.uniform)(range=[2.0, 5.0], shape=[3], seed=7)

    outs = []
    for old in (True, False):
        p = pipe(old)
        p.build()
        outs.append(p.run()[0].as_torch())
    assert outs[0].shape == (4, 3) and bool((outs[0] >= 2).all()) and outs[0].equal(outs[1])
