"""Loading the native library, and the report helpers importable from torchscan.report."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchscan
from torchscan.report import metric_result


def test_library_refuses_another_torch_with_both_versions_named(tmp_path):
    package = Path(torchscan.__file__).parent
    copy = tmp_path / "torchscan"
    shutil.copytree(package, copy)
    (copy / "_lib" / "build_info.json").write_text(json.dumps({"torch_version": "2.1.0"}))
    probe = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import torchscan"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: torchscan's native library was built against torch 2.1.0")
    assert f"but torch {torch.__version__} is installed" in last


def test_library_records_the_torch_it_was_built_against():
    assert torch.ops.torchscan.torch_version() == torch.__version__.split("+")[0]


def test_metric_result_invariants():
    m = metric_result(status="complete", unit="FLOPs", scope="workload", method="x", value=5)
    assert m == {
        "status": "complete",
        "value": 5,
        "known_value": 5,
        "unit": "FLOPs",
        "scope": "workload",
        "method": "x",
    }
    assert metric_result(status="partial", unit="u", scope="s", method="m", known_value=3)["value"] is None
    assert metric_result(status="unavailable", unit="u", scope="s", method="m")["known_value"] is None
    bad = [
        ({"status": "complete"}, "needs a numeric value"),
        ({"status": "complete", "value": 2, "known_value": 1}, "known_value == value"),
        ({"status": "partial", "value": 1, "known_value": 1}, "has no value"),
        ({"status": "partial"}, "numeric known_value"),
        ({"status": "unavailable", "known_value": 0}, "neither value nor known_value"),
        ({"status": "done", "value": 1}, "status must be one of complete, partial, unavailable, got 'done'"),
        ({"status": "complete", "value": True}, "needs a numeric value"),
    ]
    for kwargs, message in bad:
        with pytest.raises(ValueError, match=message):
            metric_result(unit="u", scope="s", method="m", **kwargs)


def test_public_submodules_are_attributes():
    import subprocess

    probe = (
        "import torchscan; print(torchscan.process.measure_peak_memory.__name__, torchscan.utils.format_info.__name__)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["measure_peak_memory", "format_info"]


def test_the_version_has_one_source():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    cargo = re.search(r'^version = "([^"]+)"', (root / "Cargo.toml").read_text(), re.MULTILINE).group(1)
    assert torchscan.__version__ == cargo
    assert torch.ops.torchscan.torchscan_version() == cargo
    report = torchscan.measure_flops(lambda: None)
    assert report["context"]["torchscan_version"] == cargo


def test_the_development_lock_pins_every_requirement_with_a_hash_and_is_what_is_installed():
    import re
    from importlib import metadata
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    lock_text = (root / "requirements-dev.lock").read_text()
    entries = re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+) \\\n    --hash=sha256:([0-9a-f]{64})$", lock_text, re.MULTILINE)
    requirement_lines = [line for line in lock_text.splitlines() if line and not line.startswith(("#", " "))]
    assert len(entries) == len(requirement_lines) > 50  # every line pinned and hashed

    def key(name):
        return re.sub(r"[-_.]+", "-", name).lower()

    locked = {key(name): version for name, version, _ in entries}
    pins = re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)$", (root / "requirements-dev.txt").read_text(), re.MULTILINE)
    assert pins and all(locked.get(key(name)) == version for name, version in pins), "make lock"
    if locked["torch"] != torch.__version__.split("+")[0]:
        pytest.skip("another torch's environment (make test-torch), not installed from the lock")
    # This environment was installed from the lock (make setup): the same versions.
    installed = {name: metadata.version(name) for name in locked}
    assert installed == locked
