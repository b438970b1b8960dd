"""Recursive metadata of call values: shapes, dtypes and kinds, never values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["describe_call", "describe_value"]

# Names of dtypes and devices, cached: `str()` of either costs about a microsecond and the
# crawler describes every module call's inputs and outputs.
_DTYPE_NAMES: dict[torch.dtype, str] = {}
_DEVICE_NAMES: dict[torch.device, str] = {}


def _tensor(value: torch.Tensor) -> dict[str, Any]:
    dtype, device = value.dtype, value.device
    dtype_name = _DTYPE_NAMES.get(dtype)
    if dtype_name is None:
        dtype_name = _DTYPE_NAMES[dtype] = str(dtype)
    device_name = _DEVICE_NAMES.get(device)
    if device_name is None:
        device_name = _DEVICE_NAMES[device] = str(device)
    return {
        "kind": "tensor",
        # torch.Size is a tuple: the JSON encoder writes it as the array the schema wants.
        "shape": value.shape,
        "dtype": dtype_name,
        "device": device_name,
        "requires_grad": value.requires_grad,
    }


def describe_value(value: Any, _open: list[int] | None = None) -> dict[str, Any]:
    """`{"kind": ...}` metadata of one value (contract: AnalysisReport `inputs`). A container met
    again inside itself is a `cycle`, with how many levels up it is."""
    if isinstance(value, torch.Tensor):
        return _tensor(value)
    if value is None:
        return {"kind": "none"}
    if isinstance(value, (tuple, list, Mapping)):
        # The containers being described, outermost first: a cycle's depth is read off it.
        path = [] if _open is None else _open
        key = id(value)
        if key in path:
            return {"kind": "cycle", "depth": len(path) - path.index(key)}
        path.append(key)
        try:
            return _container(value, path)
        finally:
            path.pop()
    if isinstance(value, (bool, int, float, complex, str, bytes)):
        return {"kind": "scalar", "type": type(value).__name__}
    return {"kind": "object", "type": type(value).__qualname__}


def _container(value: tuple[Any, ...] | list[Any] | Mapping[Any, Any], path: list[int]) -> dict[str, Any]:
    if isinstance(value, tuple):
        return {"kind": "tuple", "items": [describe_value(v, path) for v in value]}
    if isinstance(value, list):
        return {"kind": "list", "items": [describe_value(v, path) for v in value]}
    items = []
    for key, item in value.items():
        entry: dict[str, Any] = {}
        # Keys are kept only when they cannot carry private text (paths, reprs), and integers
        # only within 64 bits (the report model's range).
        if (isinstance(key, int) and -(2**63) <= key < 2**64) or (isinstance(key, str) and key.isidentifier()):
            entry["key"] = key
        entry["key_type"] = type(key).__name__
        entry["value"] = describe_value(item, path)
        items.append(entry)
    return {"kind": "mapping", "type": type(value).__name__, "items": items}


def describe_call(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return {"args": [describe_value(v) for v in args], "kwargs": {k: describe_value(v) for k, v in kwargs.items()}}
