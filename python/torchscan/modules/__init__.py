"""Module formulas: FLOPs, MACs, DMAs and receptive field of one module call.

The same formulas ``crawl_module`` uses, callable on their own. They are computed natively from
the module's attributes and the shapes of its tensors. An unsupported module warns
``Module type not supported: <Type>`` and returns the neutral value (0, or ``(1.0, 1.0, 0.0)``
for the receptive field), as torchscan 0.2 did.
"""

from __future__ import annotations

import json
import warnings
from typing import Any, TypeVar, cast

import torch
from torch import nn

from .._native import ops
from ._descriptors import describe

__all__ = ["module_dmas", "module_flops", "module_macs", "module_rf"]

RfTriple = tuple[float, float, float]
T = TypeVar("T")


def metrics_of(descriptors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Native module formulas for a batch of descriptors (one call into the core)."""
    results: list[dict[str, Any]] = json.loads(ops.module_metrics(json.dumps(descriptors)))
    return results


def _value(module: nn.Module, result: dict[str, Any], neutral: T) -> T:
    """A metric from the core: ``{"value": ...}`` (of the neutral value's type), or its failure
    tagged by kind."""
    if "value" in result:
        value = result["value"]
        return cast(T, tuple(value) if isinstance(value, list) else value)
    failure = result
    if "unsupported" in failure:
        warnings.warn(f"Module type not supported: {module.__class__.__name__}", stacklevel=3)
        return neutral
    if "not_applicable" in failure:
        warnings.warn(f"{type(module).__name__}: not applicable ({failure['not_applicable']})", stacklevel=3)
        return neutral
    if "missing_tensor" in failure:
        raise ValueError(f"{type(module).__name__}: {failure['missing_tensor']}")
    raise NotImplementedError(f"{type(module).__name__}: {failure['error']}")


def _one(module: nn.Module, inputs: tuple[Any, ...], out: Any, metric: str, *, attention: bool) -> dict[str, Any]:
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
    result: dict[str, Any] = metrics_of([describe(module, inputs, out, attention=attention)])[0][metric]
    return result


def _as_inputs(inputs: Any) -> tuple[Any, ...]:
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def module_flops(module: nn.Module, inputs: Any, out: Any) -> int:
    """FLOPs of ``module`` called on ``inputs`` (its forward arguments in signature order, a
    tuple) producing ``out`` (for MultiheadAttention: its whole output tuple)."""
    return _value(module, _one(module, _as_inputs(inputs), out, "flops", attention=True), 0)


def module_macs(module: nn.Module, inp: torch.Tensor, out: torch.Tensor) -> int:
    """Multiply-accumulates of ``module`` on input tensor ``inp`` producing ``out``."""
    return _value(module, _one(module, (inp,), out, "macs", attention=False), 0)


def module_dmas(module: nn.Module, inp: torch.Tensor, out: torch.Tensor) -> int:
    """Memory accesses (elements read and written) of ``module`` on ``inp`` producing ``out``."""
    return _value(module, _one(module, (inp,), out, "dmas", attention=False), 0)


def module_rf(module: nn.Module, inp: torch.Tensor, out: torch.Tensor) -> RfTriple:
    """``(receptive field, effective stride, effective padding)`` of ``module``'s call."""
    return _value(module, _one(module, (inp,), out, "receptive_field", attention=False), (1.0, 1.0, 0.0))
