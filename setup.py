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
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parent
# The one version source is Cargo.toml (the native core reports it, `torchscan.__version__` reads
# it from there).
VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.MULTILINE).group(1)
# The torch releases the code is proven against (CI: `make test`, `make test-torch`); the README,
# build.rs and docs/installing.md state the same range.
SUPPORTED_TORCH = ">=2.8,<2.14"


def _torch_version() -> str | None:
    """The base version of the torch this build is compiled against (`2.13.0` for
    `2.13.0+cu130`), or None when this interpreter has none (build_py then says what to do)."""
    try:
        import torch
    except ImportError:
        return None
    return torch.__version__.split("+", 1)[0]


TORCH = _torch_version()
# A build is bound to the torch it was compiled against (one C++ ABI, one operator schema set): the
# distribution says so in its version (`0.3.0+torch2.13.0`, as torchvision's `+cu130` names its
# CUDA) and requires exactly that torch, so that pip refuses a mismatch and a user can read which
# torch a wheel is for from its file name.
DIST_VERSION = VERSION if TORCH is None else f"{VERSION}+torch{TORCH}"
TORCH_REQUIREMENT = f"torch{SUPPORTED_TORCH}" if TORCH is None else f"torch=={TORCH}"


def _native_build_env() -> dict[str, str]:
    """cargo's environment for the package's library: this interpreter's torch, a target folder
    of its own (the dev loop's `cargo build` keeps `target/release`), torch's libraries found relative to the
    installed package (build.rs), and no path of the build machine in the binary: source paths
    (this checkout, cargo's registry, torch's headers) are remapped in Rust and C++ alike."""
    env = dict(os.environ, TORCHSCAN_PYTHON=sys.executable, TORCHSCAN_PACKAGE_RPATH="1")
    # One folder per torch: `make test-torch` builds against other torch releases beside this one.
    env.setdefault("CARGO_TARGET_DIR", str(ROOT / "target" / f"package-torch{TORCH}"))
    cargo_home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo")).resolve()
    import torch

    torch_root = Path(torch.__file__).resolve().parent
    remaps = [(ROOT, "torchscan"), (cargo_home, "cargo"), (torch_root, "torch")]
    rustflags = [f"--remap-path-prefix={path}=/{name}" for path, name in remaps]
    # The user's own flags first (CARGO_ENCODED_RUSTFLAGS wins over RUSTFLAGS, as in cargo).
    if "CARGO_ENCODED_RUSTFLAGS" in os.environ:
        given = [f for f in os.environ["CARGO_ENCODED_RUSTFLAGS"].split("\x1f") if f]
    else:
        given = os.environ.get("RUSTFLAGS", "").split()
    env["CARGO_ENCODED_RUSTFLAGS"] = "\x1f".join([*given, *rustflags])
    prefix_maps = " ".join(f"-ffile-prefix-map={path}=/{name}" for path, name in remaps)
    env["CXXFLAGS"] = f"{os.environ.get('CXXFLAGS', '')} {prefix_maps}".strip()
    return env


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
        env = _native_build_env()
        command = ["cargo", "build", "--release", "--lib", "--manifest-path", str(ROOT / "Cargo.toml")]
        try:
            subprocess.run(command, check=True, env=env)
        except FileNotFoundError as error:
            raise SystemExit("torchscan needs a Rust toolchain (cargo) to build: https://rustup.rs") from error
        target = Path(env["CARGO_TARGET_DIR"])
        lib_dir = Path(self.build_lib) / "torchscan" / "_lib"
        lib_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(target / "release" / "libtorchscan.so", lib_dir / "libtorchscan.so")
        info = {"torch_version": torch.__version__, "torchscan_version": VERSION}
        (lib_dir / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")


class BuildExtensions(build_ext):
    """The small C extensions, built to hold nothing of the build machine: no debug information
    (which names the source and build folders) and no runpath into this interpreter's own
    installation (some Pythons, pyenv's among them, link every extension with one); they need
    nothing but libc and the interpreter that loads them."""

    def build_extensions(self) -> None:
        # Always rebuilt (three small files): an earlier build in build/ may have other flags, and
        # setuptools would reuse it by its timestamps alone.
        self.force = True
        linker = self.compiler.linker_so
        self.compiler.linker_so = [arg for arg in linker if not arg.startswith(("-Wl,-rpath", "-Wl,-R"))]
        for extension in self.extensions:
            extension.extra_compile_args = [
                *extension.extra_compile_args,
                "-g0",
                f"-ffile-prefix-map={ROOT}=/torchscan",
            ]
        super().build_extensions()


class BinaryDistribution(Distribution):
    """The wheel holds a native library: mark it platform-specific."""

    def has_ext_modules(self) -> bool:
        return True


setup(
    name="torchscan",
    version=DIST_VERSION,
    description="Exact, complete FLOP accounting for PyTorch models, counted natively",
    long_description=(ROOT / "README.md").read_text() if (ROOT / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.11",
    install_requires=[TORCH_REQUIREMENT],
    package_dir={"": "python"},
    packages=["torchscan", "torchscan.cli", "torchscan.modules", "torchscan.process"],
    # The console script's launcher: answers --help without importing torch (see the file).
    py_modules=["_torchscan_cli"],
    package_data={"torchscan": ["py.typed", "schemas/*.json", "_hooks.pyi", "_wire.pyi", "_guards.pyi"]},
    entry_points={"console_scripts": ["torchscan = _torchscan_cli:main"]},
    # The module hooks' fast path (python/torchscan/_hooks.c): plain C on the Python C API, no
    # torch headers; it reaches the native library through addresses that library hands out.
    # compare_reports' input, encoded at C speed (python/torchscan/_wire.c), likewise torch-free.
    ext_modules=[
        Extension("torchscan._hooks", ["python/torchscan/_hooks.c"], extra_compile_args=["-O2"]),
        Extension("torchscan._wire", ["python/torchscan/_wire.c"], extra_compile_args=["-O2"]),
        # Acquisitions an interrupt cannot leak (python/torchscan/_guards.c).
        Extension("torchscan._guards", ["python/torchscan/_guards.c"], extra_compile_args=["-O2"]),
    ],
    cmdclass={"build_py": BuildNative, "build_ext": BuildExtensions},
    distclass=BinaryDistribution,
    zip_safe=False,
)
