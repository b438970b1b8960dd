"""Every Python example in MIGRATING.md, README.md and docs/ runs."""

import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "MIGRATING.md", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def examples():
    for document in DOCUMENTS:
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", document.read_text(), re.S)):
            yield pytest.param(block, id=f"{document.name}:{i}")


@pytest.mark.parametrize("code", list(examples()))
def test_example_runs(code):
    torch.manual_seed(0)
    exec(compile(code, "<example>", "exec"), {"__name__": "example"})
