"""Every Python code block of docs/debug_mode.md and docs/serialization.md runs."""
import os
import re

import pytest

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


@pytest.mark.parametrize("page", ["debug_mode.md", "serialization.md"])
def test_every_code_block_runs(page):
    path = os.path.join(DOCS, page)
    with open(path) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert blocks
    namespace = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{path} block {i}", "exec"), namespace)
