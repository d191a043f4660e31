"""Every public function, class, method and property of the public API has a docstring that
says what it is for. The API: torchdali's top-level names, the modules `types`, `math`,
`tensors`, `plugin.pytorch`, `auto_aug` (and its modules), `tfrecord`, `tools.*`,
`pickling`, `distributed`, `storage`, `sample_data` and `pipeline.experimental`, and the
methods and properties of their classes (`Pipeline` among them). `fn` and `ops` are
generated from the operator registry, whose docs tests/test_registry_and_docs.py checks;
nothing else is exempt."""
import enum
import functools
import importlib
import inspect

import pytest

import torchdali

MODULES = ["torchdali", "torchdali.types", "torchdali.math", "torchdali.tensor_list", "torchdali.plugin.pytorch",
           "torchdali.auto_aug", "torchdali.auto_aug.auto_augment", "torchdali.auto_aug.rand_augment",
           "torchdali.auto_aug.trivial_augment", "torchdali.auto_aug.augmentations", "torchdali.auto_aug.core",
           "torchdali.tfrecord", "torchdali.tools.folder2wds", "torchdali.tools.serve", "torchdali.tools.tfrecord2idx",
           "torchdali.tools.rec2idx", "torchdali.protowire",
           "torchdali.tools.wds2idx", "torchdali.pickling", "torchdali.distributed", "torchdali.storage",
           "torchdali.sample_data", "torchdali.pipeline.experimental"]
GENERATED = {"fn", "ops"}


def public_names(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return [n for n in names if n not in GENERATED or module is not torchdali]


def own(obj):
    """Defined by torchdali (not imported from torch, numpy or the standard library)."""
    return (inspect.isclass(obj) or inspect.isfunction(obj)) and \
        getattr(obj, "__module__", "").startswith("torchdali")


def members(cls):
    """(name, function) of the public methods and properties `cls` defines itself."""
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        elif isinstance(value, property):
            value = value.fget
        if inspect.isfunction(value):
            yield name, value


@functools.lru_cache(maxsize=None)
def api():
    """{qualified name: object} of everything the test covers."""
    found = {}
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        found[module_name] = module
        for name in public_names(module):
            value = getattr(module, name)
            if own(value):
                found.setdefault(f"{value.__module__}.{value.__qualname__}", value)
    for qualified, value in list(found.items()):
        if inspect.isclass(value) and not issubclass(value, enum.Enum):
            for name, method in members(value):
                found[f"{qualified}.{name}"] = method
    return found


def test_the_walk_covers_the_api():
    names = api()
    for expected in ["torchdali.pipeline.Pipeline.run", "torchdali.pipeline.Pipeline.batch_size",
                     "torchdali.plugin.pytorch.iterator.DALIGenericIterator",
                     "torchdali.tensor_list.TensorListCPU.as_tensor", "torchdali.types.DALIDataType",
                     "torchdali.auto_aug.rand_augment.rand_augment", "torchdali.tools.wds2idx.main"]:
        assert expected in names, expected


@pytest.mark.parametrize("name", sorted(api()))
def test_has_a_docstring(name):
    assert (api()[name].__doc__ or "").strip(), f"{name} has no docstring: say what it is for"
