"""Every Python example in MIGRATING.md, README.md and docs/ runs, and so does every command
of their `shell` blocks (the command-line walkthroughs; `sh` blocks are setup steps)."""

import os
import re
import shlex
import subprocess
import sys
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


def commands():
    for document in DOCUMENTS:
        for i, block in enumerate(re.findall(r"```shell\n(.*?)```", document.read_text(), re.S)):
            yield pytest.param(block, id=f"{document.name}:shell{i}")


@pytest.mark.parametrize("block", list(commands()))
def test_shell_example_runs(block, tmp_path):
    """Each line is one `torchscan` command, run in one folder per block (a later command can
    read what an earlier one wrote); it must exit 0, or 1 where the line says `# exits 1`."""
    script = Path(sys.executable).parent / "torchscan"
    for line in block.splitlines():
        command, _, comment = line.partition("  #")
        words = shlex.split(command)
        assert words[0] == "torchscan", f"not a torchscan command: {line}"
        expected = 1 if "exits 1" in comment else 0
        result = subprocess.run(
            [str(script), *words[1:]], capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ), check=False
        )
        assert result.returncode == expected, f"{line}\n{result.stderr[-3000:]}"
        if expected == 0:
            assert result.stdout, line
