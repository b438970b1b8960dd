"""The build refuses clearly when it cannot find torch (build.rs)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("cargo") is None, reason="needs cargo")
def test_build_without_torch_fails_with_an_actionable_message(tmp_path):
    env = dict(os.environ, CARGO_TARGET_DIR=str(tmp_path / "target"))
    env.pop("PYTHONPATH", None)
    # A Python that cannot import torch: -S skips site-packages, so build.rs's probe fails.
    shim = tmp_path / "python-without-torch"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -S -I "$@"\n')
    shim.chmod(0o755)
    env["TORCHSCAN_PYTHON"] = str(shim)
    result = subprocess.run(
        ["cargo", "check", "--lib", "--manifest-path", str(ROOT / "Cargo.toml")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode != 0
    assert "torchscan cannot find a usable libtorch" in result.stderr
    assert "cannot import torch (ModuleNotFoundError: No module named 'torch')" in result.stderr
    assert "TORCHSCAN_PYTHON" in result.stderr
    assert "LIBTORCH" in result.stderr
