"""How much of DALI's `fn` namespace torchdali has: walks DALI's operators (when DALI is
installed), leaves out the families that are separate work (audio, video, optical flow) and
DALI's hidden namespace, and compares the operators torchdali lacks with the list the README
prints, so the gap is a number that cannot go stale."""
import inspect
import pathlib
import re

import pytest

from torchdali import fn

SEPARATE_FAMILIES = re.compile(r"audio|video|optical_flow|mel_filter_bank|mfcc|spectrogram|power_spectrum|"
                               r"preemphasis|to_decibels|nonsilent_region|nemo_asr")


def dali_operators(module, prefix=""):
    """The fn paths of DALI's operators, without its hidden namespace."""
    names = []
    for name in dir(module):
        obj = getattr(module, name)
        if name.startswith("_") or name == "hidden":
            continue
        if inspect.ismodule(obj) and obj.__name__.startswith("nvidia.dali.fn"):
            names += dali_operators(obj, f"{prefix}{name}.")
        elif callable(obj):
            names.append(prefix + name)
    return names


def has(path):
    obj = fn
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return False
    return callable(obj)


def test_the_readme_lists_the_dali_operators_torchdali_lacks():
    dali_fn = pytest.importorskip("nvidia.dali.fn")
    wanted = [p for p in dali_operators(dali_fn) if not SEPARATE_FAMILIES.search(p)]
    missing = sorted(p for p in wanted if not has(p))
    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    found = re.search(r"torchdali lacks (\d+) of the (\d+) operators of DALI 2\.4's `fn` namespace[^:]*: (.*?)\.\n\n",
                      readme, re.S)
    assert found, "the README's sentence on the operators torchdali lacks is missing"
    listed = sorted(re.findall(r"`([\w.]+)`", found.group(3)))
    assert (int(found.group(1)), int(found.group(2)), listed) == (len(missing), len(wanted), missing)
