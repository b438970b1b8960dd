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


def _transformers_kind(target: Any) -> str | None:
    """ "model" or "config" for a Hugging Face transformers model or config class, else None
    (transformers is only looked at when the target came from it: it is already imported)."""
    transformers = sys.modules.get("transformers")
    if transformers is None or not isinstance(target, type):
        return None
    if issubclass(target, transformers.PreTrainedModel):
        return "model"
    if issubclass(target, transformers.PretrainedConfig):
        return "config"
    return None


def _build_transformers(target: type, kind: str, kwargs: dict[str, Any]) -> Any:
    """A transformers model from its config class (built with `kwargs`), random weights, no
    download: a config class gives the library's base model for it (AutoModel)."""
    import transformers

    config_class = target if kind == "config" else target.config_class  # type: ignore[attr-defined]
    config = config_class(**kwargs)
    if kind == "config":
        return transformers.AutoModel.from_config(config)  # type: ignore[no-untyped-call]
    return target(config)


def build_model(spec: str, kwargs: dict[str, Any] | None = None) -> nn.Module:
    """The model at `spec`: a module instance as is; a class or factory called with `kwargs`; a
    transformers model or config class built from its config (`kwargs` are the config's)."""
    kwargs = kwargs or {}
    target = load_object(spec)
    if isinstance(target, nn.Module):
        if kwargs:
            raise ValueError(f"MODEL {spec!r} is a module instance: --kw has nothing to construct")
        return target
    if not callable(target):
        raise ValueError(f"MODEL {spec!r} is a {type(target).__name__}, not an nn.Module class or factory")
    kind = _transformers_kind(target)
    given = ", ".join(f"{name}={value!r}" for name, value in kwargs.items())
    try:
        model = _build_transformers(target, kind, kwargs) if kind else target(**kwargs)
    except Exception as error:
        how = f"with {given}" if given else "with no arguments"
        hint = "" if given else " (give its constructor's arguments with --kw NAME=VALUE)"
        what = f"its {'config' if kind == 'model' else 'class'}" if kind else "it"
        raise ValueError(
            f"cannot build MODEL {spec!r} by calling {what} {how}: {type(error).__name__}: {error}{hint}"
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
