"""measure_flops: count the FLOPs of every operator a workload dispatches.

The counting happens natively (C++ observer, Rust core); Python only opens the session, labels
module calls through global module hooks, and prices calls of operators that the caller maps to
its own formulas (``custom_mapping``), after the workload has finished.
"""

from __future__ import annotations

import json
import operator
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import torch
from torch import nn

from ._native import ops
from .report import FlopReport

__all__ = ["measure_flops"]

CustomFormula = Callable[..., int]


def measure_flops(
    workload: Callable[[], Any],
    *,
    modules: nn.Module | Iterable[nn.Module] | None = None,
    custom_mapping: Mapping[Any, CustomFormula] | None = None,
) -> FlopReport:
    """Runs ``workload()`` exactly once and returns the FLOPs of every operator it dispatched.

    Args:
        workload: a zero-argument callable (forward, backward, optimizer step, ...).
        modules: the root module(s) whose calls label ``by_module`` (``ResNet``,
            ``ResNet.layer1.0.conv1``). By default every module the workload calls is labelled,
            the outermost by its class name.
        custom_mapping: ``{torch.ops.ns.op: formula}`` for this call only; ``formula(*inputs,
            out_shape=...)`` receives tensor arguments as ``torch.Size`` and other positional
            arguments as values (PyTorch's flop-counter convention) and returns FLOPs per call.
            It overrides the built-in formula of that operator.

    Returns:
        The FlopReport. ``total`` is complete only when every operator observed is counted or
        known to do no arithmetic; otherwise it is partial and ``diagnostics`` names the rest.

    The workload's exceptions propagate unchanged; the session is closed and every hook removed
    whatever happens.
    """
    if not callable(workload):
        raise TypeError(f"workload must be a zero-argument callable, got {type(workload).__name__}")
    roots = _roots(modules)
    return count_operators(workload, lambda handle: _ModuleLabels(handle, roots), _formulas(custom_mapping))


class ScopeDriver(Protocol):
    """Installs what pushes and pops scopes into a session while the workload runs."""

    def install(self) -> None: ...

    def remove(self) -> None: ...


def count_operators(
    workload: Callable[[], Any],
    scopes: Callable[[int], ScopeDriver],
    formulas: dict[str, tuple[str, CustomFormula]],
) -> FlopReport:
    """One native counting session around ``workload()``, finished into its FlopReport.
    ``scopes(handle)`` builds the hooks that label the work (module labels for by_module)."""
    config = json.dumps({"torch_version": torch.__version__, "custom_operators": sorted(formulas)})
    handle = ops.open_session(config)
    try:
        driver = scopes(handle)
        try:
            driver.install()
            workload()
        finally:
            driver.remove()
            pending = ops.close_session(handle)
        results = _price(json.loads(pending), formulas)
        report: FlopReport = json.loads(ops.finish_session(handle, json.dumps(results)))
    except BaseException:
        ops.discard_session(handle)
        raise
    return report


def _roots(modules: object) -> list[nn.Module] | None:
    if modules is None:
        return None
    if isinstance(modules, nn.Module):
        return [modules]
    if isinstance(modules, (str, bytes, Mapping)) or not isinstance(modules, Iterable):
        raise TypeError(f"modules must be an nn.Module or an iterable of them, got {type(modules).__name__}")
    roots = list(modules)
    for i, m in enumerate(roots):
        if not isinstance(m, nn.Module):
            raise TypeError(f"modules[{i}] must be an nn.Module, got {type(m).__name__}")
    return roots


def _formulas(custom_mapping: object) -> dict[str, tuple[str, CustomFormula]]:
    """``{qualified operator name: (packet name, formula)}``."""
    if custom_mapping is None:
        return {}
    if not isinstance(custom_mapping, Mapping):
        raise TypeError(f"custom_mapping must be a mapping, got {type(custom_mapping).__name__}")
    formulas: dict[str, tuple[str, CustomFormula]] = {}
    for key, formula in custom_mapping.items():
        if isinstance(key, torch._ops.OpOverload):
            raise TypeError(
                f"custom_mapping keys must be operator packets like torch.ops.aten.sin, not the "
                f"overload {key}: use torch.ops.{key.namespace}.{key._opname}"
            )
        if not isinstance(key, torch._ops.OpOverloadPacket):
            raise TypeError(
                f"custom_mapping keys must be operator packets like torch.ops.aten.sin, got {type(key).__name__}"
            )
        if not callable(formula):
            raise TypeError(f"custom_mapping[{key}] must be callable, got {type(formula).__name__}")
        qualified = key._qualified_op_name
        formulas[qualified] = (qualified.replace("::", ".", 1), formula)
    return formulas


def _as_argument(value: Any) -> Any:
    """JSON from the core -> what a PyTorch shape formula expects."""
    if isinstance(value, dict) and "shape" in value:
        return torch.Size(value["shape"])
    if isinstance(value, list):
        return [_as_argument(v) for v in value]
    return value


def _price(pending: list[dict[str, Any]], formulas: dict[str, tuple[str, CustomFormula]]) -> list[Any]:
    """Evaluates each distinct custom call once: FLOPs per call, or the exception's type name."""
    by_packet = {packet: formula for packet, formula in formulas.values()}
    results: list[Any] = []
    for call in pending:
        formula = by_packet[call["operator"]]
        inputs = [_as_argument(v) for v in call["inputs"][: call["positional_args"]]]
        outputs = [_as_argument(v) for v in call["outputs"]]
        out_shape = outputs[0] if len(outputs) == 1 else tuple(outputs)
        try:
            value = formula(*inputs, out_shape=out_shape)
            if isinstance(value, bool):
                raise TypeError("a FLOP count must be an integer, not a bool")
            flops = operator.index(value)
            if flops < 0:
                raise ValueError("a FLOP count cannot be negative")
            results.append(flops)
        except Exception as error:  # reported as a diagnostic, never as a silent zero
            results.append({"error": type(error).__name__})
    return results


class _ModuleLabels:
    """Pushes a label per module call into the session, as PyTorch's ModuleTracker names them:
    the outermost module by its class name, its children by dotted attribute path.

    The hooks run on every module call, so they stay lean: labels are looked up by ``id`` (the
    modules are held alive in ``_names`` for the measurement only) and the native scope
    operators are bound once.
    """

    _push = ops.push_scope.default
    _pop = ops.pop_scope.default

    def __init__(self, handle: int, roots: list[nn.Module] | None) -> None:
        self._handle = handle
        self._thread = threading.get_ident()
        self._names: dict[int, tuple[nn.Module, str]] = {}
        self._open_roots = roots is None
        self._stack: list[int] = []
        self._hooks: list[Any] = []
        for root in roots or []:
            self._name_tree(root, type(root).__name__)

    def _name_tree(self, module: nn.Module, name: str) -> None:
        self._names[id(module)] = (module, name)
        for child_name, child in module.named_children():
            self._name_tree(child, f"{name}.{child_name}")

    def _pre(self, module: nn.Module, args: Any) -> None:
        if threading.get_ident() != self._thread:
            return
        entry = self._names.get(id(module))
        if entry is None:
            if not self._open_roots:
                return
            self._name_tree(module, type(module).__name__)
            entry = self._names[id(module)]
        self._push(self._handle, entry[1])
        self._stack.append(id(module))

    def _post(self, module: nn.Module, args: Any, output: Any) -> None:
        if self._stack and self._stack[-1] == id(module) and threading.get_ident() == self._thread:
            self._stack.pop()
            self._pop(self._handle)

    def install(self) -> None:
        register = nn.modules.module
        self._hooks.append(register.register_module_forward_pre_hook(self._pre))
        self._hooks.append(register.register_module_forward_hook(self._post, always_call=True))

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        self._names.clear()
