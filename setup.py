"""Builds the native library with cargo and ships it inside the `torchscan` package.

`pip install --no-build-isolation .` in an environment that has torch: the library is compiled
against *that* torch (build.rs asks this interpreter where torch is), and the version it was
built against is recorded so that importing against another torch fails with a clear error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parent
# The one version source is Cargo.toml (the native core reports it, `torchscan.__version__` reads
# it from there).
VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.MULTILINE).group(1)


class BuildNative(build_py):
    """build_py, then `cargo build --release --lib`, then copy the cdylib into the package."""

    def run(self) -> None:
        super().run()
        try:
            import torch
        except ImportError as error:
            raise SystemExit(
                "torchscan needs torch installed before it is built: pip install torch, then "
                "pip install --no-build-isolation ."
            ) from error
        env = dict(os.environ, TORCHSCAN_PYTHON=sys.executable)
        command = ["cargo", "build", "--release", "--lib", "--manifest-path", str(ROOT / "Cargo.toml")]
        try:
            subprocess.run(command, check=True, env=env)
        except FileNotFoundError as error:
            raise SystemExit("torchscan needs a Rust toolchain (cargo) to build: https://rustup.rs") from error
        target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
        lib_dir = Path(self.build_lib) / "torchscan" / "_lib"
        lib_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(target / "release" / "libtorchscan.so", lib_dir / "libtorchscan.so")
        info = {"torch_version": torch.__version__, "torchscan_version": VERSION}
        (lib_dir / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")


class BinaryDistribution(Distribution):
    """The wheel holds a native library: mark it platform-specific."""

    def has_ext_modules(self) -> bool:
        return True


setup(
    name="torchscan",
    version=VERSION,
    description="Exact, complete FLOP accounting for PyTorch models, counted natively",
    long_description=(ROOT / "README.md").read_text() if (ROOT / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.11",
    install_requires=["torch>=2.1,<3"],
    package_dir={"": "python"},
    packages=["torchscan", "torchscan.cli", "torchscan.modules", "torchscan.process"],
    package_data={"torchscan": ["py.typed", "schemas/*.json", "_hooks.pyi", "_wire.pyi", "_guards.pyi"]},
    entry_points={"console_scripts": ["torchscan = torchscan.cli:main"]},
    # The module hooks' fast path (python/torchscan/_hooks.c): plain C on the Python C API, no
    # torch headers; it reaches the native library through addresses that library hands out.
    # compare_reports' input, encoded at C speed (python/torchscan/_wire.c), likewise torch-free.
    ext_modules=[
        Extension("torchscan._hooks", ["python/torchscan/_hooks.c"], extra_compile_args=["-O2"]),
        Extension("torchscan._wire", ["python/torchscan/_wire.c"], extra_compile_args=["-O2"]),
        # Acquisitions an interrupt cannot leak (python/torchscan/_guards.c).
        Extension("torchscan._guards", ["python/torchscan/_guards.c"], extra_compile_args=["-O2"]),
    ],
    cmdclass={"build_py": BuildNative},
    distclass=BinaryDistribution,
    zip_safe=False,
)
