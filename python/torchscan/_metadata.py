"""Recursive metadata of call values: shapes, dtypes and kinds, never values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["describe_call", "describe_value"]


def describe_value(value: Any) -> dict[str, Any]:
    """`{"kind": ...}` metadata of one value (contract: AnalysisReport `inputs`)."""
    if isinstance(value, torch.Tensor):
        return {
            "kind": "tensor",
            "shape": list(value.shape),
            "dtype": str(value.dtype),
            "device": str(value.device),
            "requires_grad": value.requires_grad,
        }
    if value is None:
        return {"kind": "none"}
    if isinstance(value, tuple):
        return {"kind": "tuple", "items": [describe_value(v) for v in value]}
    if isinstance(value, list):
        return {"kind": "list", "items": [describe_value(v) for v in value]}
    if isinstance(value, Mapping):
        items = []
        for key, item in value.items():
            entry: dict[str, Any] = {}
            # Keys are kept only when they cannot carry private text (paths, reprs).
            if isinstance(key, int) or (isinstance(key, str) and key.isidentifier()):
                entry["key"] = key
            entry["key_type"] = type(key).__name__
            entry["value"] = describe_value(item)
            items.append(entry)
        return {"kind": "mapping", "type": type(value).__name__, "items": items}
    if isinstance(value, (bool, int, float, complex, str, bytes)):
        return {"kind": "scalar", "type": type(value).__name__}
    return {"kind": "object", "type": type(value).__qualname__}


def describe_call(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return {"args": [describe_value(v) for v in args], "kwargs": {k: describe_value(v) for k, v in kwargs.items()}}
