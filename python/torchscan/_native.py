"""Loads the native library (Rust core + C++ shim) into the running torch.

The library is compiled against one torch version and is not binary-compatible with others, so
the version is checked *before* loading: a mismatch is an ImportError naming both versions
instead of an undefined-symbol crash.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

_HERE = Path(__file__).resolve().parent
_LIBRARY = _HERE / "_lib" / "libtorchscan.so"
_BUILD_INFO = _HERE / "_lib" / "build_info.json"


def _base_version(version: str) -> str:
    return version.split("+", 1)[0]


def _load() -> Any:
    if not _LIBRARY.is_file() or not _BUILD_INFO.is_file():
        raise ImportError(
            f"torchscan's native library is missing ({_LIBRARY}); install the package with "
            "`pip install --no-build-isolation .` from a source checkout"
        )
    built = json.loads(_BUILD_INFO.read_text())["torch_version"]
    running = torch.__version__
    if _base_version(built) != _base_version(running):
        raise ImportError(
            f"torchscan's native library was built against torch {built}, but torch {running} "
            "is installed; rebuild torchscan against the installed torch "
            "(`pip install --no-build-isolation --force-reinstall .`)"
        )
    try:
        torch.ops.load_library(str(_LIBRARY))  # type: ignore[no-untyped-call]
    except OSError as error:  # pragma: no cover - only on a broken install
        raise ImportError(f"torchscan's native library failed to load: {error}") from error
    return torch.ops.torchscan


ops = _load()
BUILT_AGAINST: str = json.loads(_BUILD_INFO.read_text())["torch_version"]
