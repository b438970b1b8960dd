"""The binary wheel (`make wheel`): built for the torch of this environment, named and tagged for
it, holding the native library and nothing of the build machine; installed into a fresh venv that
has torch but no cargo and no compiler on PATH, it imports, counts and runs its CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
import torch
from packaging.markers import default_environment
from packaging.requirements import Requirement

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TORCH = torch.__version__.split("+", 1)[0]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `make wheel` builds (the same command), into a folder of this test's."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
        cwd=ROOT,
    )
    (built,) = out.glob("torchscan-*.whl")
    return built


def _dependency_closure(name: str) -> list[metadata.Distribution]:
    """`name`'s distribution and those it requires on this platform, as installed here (extras
    followed: torch requires `cuda-toolkit[cublas,...]`, whose requirements hang on them)."""
    env = default_environment()
    seen: dict[str, tuple[metadata.Distribution, set[str]]] = {}
    todo: list[tuple[str, set[str]]] = [(name, set())]
    while todo:
        wanted, extras = todo.pop()
        dist = metadata.distribution(wanted)
        key = dist.metadata["Name"].lower().replace("_", "-")
        done = seen.get(key, (dist, set()))[1]
        if key in seen and extras <= done:
            continue
        seen[key] = (dist, done | extras)
        for line in dist.requires or []:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is None or any(marker.evaluate({**env, "extra": extra}) for extra in {"", *extras}):
                todo.append((requirement.name, set(requirement.extras)))
    return [dist for dist, _ in seen.values()]


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv whose site-packages holds this environment's torch and the distributions torch
    requires (linked, not copied: 4 GB), and nothing else: no torchscan, no build tools."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    purelib = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    for dist in _dependency_closure("torch"):
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            source = Path(str(dist.locate_file(top)))
            target = purelib / top
            if source.exists() and not target.exists():
                target.symlink_to(source)
    return venv


def _bare_env(venv: Path) -> dict[str, str]:
    """Only the venv's own programs on PATH: no cargo, no cc, no c++."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("TORCHSCAN", "CARGO", "RUST", "PYTHON", "CC", "CXX"))
    }
    env["PATH"] = str(venv / "bin")
    env["VIRTUAL_ENV"] = str(venv)
    return env


def test_the_wheel_names_the_torch_it_was_built_for(wheel):
    tag = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert wheel.name == f"torchscan-{torchscan_version()}+torch{TORCH}-{python}-{python}-{tag}.whl"
    with zipfile.ZipFile(wheel) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [line for line in archive.read(meta).decode().splitlines() if line.startswith("Requires-Dist:")]
    assert requires == [f"Requires-Dist: torch=={TORCH}"]


def test_the_wheel_holds_the_library_and_nothing_of_the_build_machine(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert "torchscan/_lib/libtorchscan.so" in names
        assert "torchscan/_lib/build_info.json" in names
        # Nothing but the package, its metadata and the console script's launcher (a top-level
        # module): no sources, no build folders.
        assert "_torchscan_cli.py" in names
        assert all(n.startswith(("torchscan/", "torchscan-")) or n == "_torchscan_cli.py" for n in names), names
        archive.extractall(tmp_path)
    home = str(Path.home())
    machine_paths = [str(ROOT), home, sys.prefix, str(Path(torch.__file__).resolve().parent)]
    for binary in tmp_path.glob("torchscan/**/*.so"):
        data = binary.read_bytes()
        for path in machine_paths:
            assert path.encode() + b"/" not in data, f"{binary.name} names {path}"
    dynamic = subprocess.run(
        ["readelf", "-d", str(tmp_path / "torchscan/_lib/libtorchscan.so")], capture_output=True, text=True, check=True
    ).stdout
    runpath = [line for line in dynamic.splitlines() if "RUNPATH" in line or "RPATH" in line]
    assert len(runpath) == 1 and "[$ORIGIN/../../torch/lib]" in runpath[0], runpath


def test_the_wheel_installs_and_runs_without_cargo_or_a_compiler(wheel, fresh_venv):
    env = _bare_env(fresh_venv)
    python = str(fresh_venv / "bin" / "python")
    for tool in ("cargo", "rustc", "cc", "c++", "gcc"):
        probe = f"import shutil, sys; sys.exit(shutil.which({tool!r}) is not None)"
        assert subprocess.run([python, "-c", probe], env=env, check=False).returncode == 0, f"{tool} is on PATH"
    # The index is off: torch==<built> must be met by the torch already in the venv.
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-index", "--disable-pip-version-check", str(wheel)],
        env=env,
        check=True,
    )
    probe = (
        "import torch, torchscan\n"
        "a, b = torch.randn(3, 5), torch.randn(5, 7)\n"
        "report = torchscan.measure_flops(lambda: torch.mm(a, b))\n"
        "print(torchscan.__file__)\n"
        "print(report['total']['status'], report['total']['value'])\n"
    )
    result = subprocess.run([python, "-c", probe], env=env, capture_output=True, text=True, check=True, cwd=fresh_venv)
    location, total = result.stdout.strip().splitlines()
    assert location.startswith(str(fresh_venv))
    assert total == f"complete {2 * 3 * 5 * 7}"
    cli = subprocess.run(
        [str(fresh_venv / "bin" / "torchscan")], env=env, capture_output=True, text=True, check=True, cwd=fresh_venv
    )
    assert "\nTrainable params: 5,466\nNon-trainable params: 0\nTotal params: 5,466\n" in cli.stdout


def torchscan_version() -> str:
    import re

    return re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.MULTILINE).group(1)
