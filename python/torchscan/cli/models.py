"""The `torchscan` command's model loading: a model from an import path, the device check."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import torch
from torch import nn

__all__ = ["build_model", "check_device", "load_object"]


def load_object(spec: str) -> Any:
    """`pkg.mod:Attr.sub` (or `pkg.mod.Attr`) -> the object. Raises ValueError naming the problem."""
    if ":" in spec:
        module_name, _, attribute = spec.partition(":")
    else:
        module_name, _, attribute = spec.rpartition(".")
    if not module_name or not attribute:
        raise ValueError(f"invalid MODEL {spec!r}: expected an import path like 'package.module:ClassOrFactory'")
    # As `python -m`, uvicorn and pytest do: modules in the current directory are importable.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as error:
        raise ValueError(f"cannot import MODEL {spec!r}: {type(error).__name__}: {error}") from error
    for name in attribute.split("."):
        try:
            value = getattr(value, name)
        except AttributeError:
            raise ValueError(f"cannot import MODEL {spec!r}: {module_name} has no attribute {attribute!r}") from None
    return value


def build_model(spec: str) -> nn.Module:
    target = load_object(spec)
    if isinstance(target, nn.Module):
        return target
    if not callable(target):
        raise ValueError(f"MODEL {spec!r} is a {type(target).__name__}, not an nn.Module class or factory")
    try:
        model = target()
    except Exception as error:
        raise ValueError(
            f"cannot build MODEL {spec!r} by calling it with no arguments: {type(error).__name__}: {error}"
        ) from error
    if not isinstance(model, nn.Module):
        raise ValueError(f"MODEL {spec!r} returned a {type(model).__name__}, not an nn.Module")
    return model


def check_device(device: torch.device) -> None:
    """A device string can be well-formed and still absent (cuda on a CPU-only machine)."""
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as error:
        raise ValueError(f"device {str(device)!r} is not available: {error}") from None
