"""The `torchscan` command's model loading: a model from an import path, the device check.

A first contact must not hurt: a keyword the constructor or config does not know is refused
with its close match (a transformers config takes any keyword silently, so `hidden_sizee=64`
would build the full-size default model), and a model built from a config or a timm name is
first built on the meta device, so that one whose parameters cannot fit in memory is refused
with its size instead of being built and killed by the kernel's OOM killer.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import os
import resource
import sys
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

__all__ = ["available_memory", "build_model", "check_device", "load_object"]


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
    if module_name == "timm" and not hasattr(value, attribute):
        return _timm_model(value, spec, attribute)
    for name in attribute.split("."):
        try:
            value = getattr(value, name)
        except AttributeError:
            raise ValueError(f"cannot import MODEL {spec!r}: {module_name} has no attribute {attribute!r}") from None
    return value


def _timm_model(timm: Any, spec: str, name: str) -> Callable[..., Any]:
    """`timm:vit_tiny_patch16_224`: a timm model by its registered name (timm.create_model,
    random weights: pretrained is False unless --kw pretrained=True asks for a download)."""
    if not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=3)
        hint = f"; close matches: {', '.join(close)}" if close else " (timm.list_models() lists them)"
        raise ValueError(f"cannot import MODEL {spec!r}: timm has no attribute or model named {name!r}{hint}")
    factory = functools.partial(timm.create_model, name)
    factory.__name__ = name  # type: ignore[attr-defined]
    return factory


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


def _config_names(config_class: type) -> set[str]:
    """Every keyword a transformers config means something by: its and its bases' constructor
    parameters, the attributes of its default instance (properties included) and its aliases."""
    names: set[str] = set()
    for klass in config_class.__mro__:
        if "__init__" in vars(klass):
            try:
                names.update(inspect.signature(vars(klass)["__init__"]).parameters)
            except (TypeError, ValueError):
                pass
    names.update(getattr(config_class, "attribute_map", {}))
    try:
        default = config_class()
    except Exception:
        return names
    names.update(name for name in dir(default) if not name.startswith("_"))
    return names


def _unknown_keywords(spec: str, given: Iterable[str], known: set[str], what: str) -> None:
    """A keyword `what` does not take is a usage error naming the close match."""
    for name in given:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"argument --kw: MODEL {spec!r}: {what} takes no keyword {name!r}{hint}")


def available_memory() -> int | None:
    """The bytes this process can still allocate: the kernel's MemAvailable, and the address
    space left under `ulimit -v`; None when neither is known."""
    limits = []
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    limits.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        try:
            with open("/proc/self/statm", encoding="ascii") as statm:
                used = int(statm.read().split()[0]) * resource.getpagesize()
            limits.append(max(soft - used, 0))
        except (OSError, ValueError, IndexError):
            limits.append(soft)
    return min(limits) if limits else None


def _size(count: int) -> str:
    """Bytes in GB (10^9), or MB (10^6) under a GB, as the command's other sizes."""
    return f"{count / 1e9:,.2f} GB" if count >= 1e9 else f"{count / 1e6:,.2f} MB"


def _check_fits(spec: str, build: Callable[[], Any], how: str) -> None:
    """Builds the model on the meta device (no storage) and refuses it when its parameters and
    buffers need more memory than is available. A model that cannot be built there (a
    constructor that reads tensor values) is not checked."""
    try:
        with torch.device("meta"):
            model = build()
    except Exception:
        return
    if not isinstance(model, nn.Module):
        return
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}.values()
    needed = sum(t.numel() * t.element_size() for t in tensors)
    count = sum(p.numel() for p in model.parameters())
    available = available_memory()
    del model
    if available is not None and needed > available:
        raise ValueError(
            f"MODEL {spec!r} built {how} has {count:,} parameters: {_size(needed)} ({needed:,} bytes) of "
            f"parameters and buffers, more than the {_size(available)} of memory available; not built "
            "(give smaller sizes with --kw, for example --kw num_hidden_layers=2 --kw hidden_size=64)"
        )


def build_model(spec: str, kwargs: dict[str, Any] | None = None) -> nn.Module:
    """The model at `spec`: a module instance as is; a class or factory called with `kwargs`; a
    transformers model or config class built from its config (`kwargs` are the config's); a
    timm model by name (`timm:vit_tiny_patch16_224`). Models from a config or a timm name are
    first sized on the meta device (refused when they cannot fit in memory)."""
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
    how = f"with {given}" if given else "with no arguments"
    if kind:
        config_class = target if kind == "config" else target.config_class
        _unknown_keywords(spec, kwargs, _config_names(config_class), f"its config {config_class.__name__}")
        _check_fits(spec, lambda: _build_transformers(target, kind, kwargs), how)
    elif isinstance(target, functools.partial) and getattr(target.func, "__module__", "").startswith("timm"):
        _check_fits(spec, lambda: target(**kwargs), how)
    try:
        model = _build_transformers(target, kind, kwargs) if kind else target(**kwargs)
    except Exception as error:
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
