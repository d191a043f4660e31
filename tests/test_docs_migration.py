"""Every Python code block of docs/migration.md runs, in order, in one namespace."""
import os
import re

import pytest

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "migration.md")


def blocks():
    with open(DOC) as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


def test_the_guide_has_code():
    assert len(blocks()) >= 5


def test_every_code_block_runs(monkeypatch):
    pytest.importorskip("torchvision")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    namespace = {}
    for i, code in enumerate(blocks()):
        exec(compile(code, f"{DOC} block {i}", "exec"), namespace)
