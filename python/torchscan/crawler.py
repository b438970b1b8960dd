"""crawl_module and summary: one forward pass, every module call recorded, every metric counted.

Python records the structure (hooks on every module: identities, call metadata, parameter
accounting, module descriptors) and drives the native session that counts the operators of the
same forward; the Rust core turns that document into the AnalysisReport.
"""

from __future__ import annotations

import inspect
import json
import platform
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import torch
from torch import nn

from ._metadata import describe_call, describe_value
from ._native import ops
from .errors import IncompleteAnalysisError
from .modules._descriptors import describe, family, first_tensor
from .report import AnalysisReport
from .utils import aggregate_info, format_info

__all__ = ["crawl_module", "summary"]

Mode = Literal["full", "structure"]
_CALL_PREFIX = "\0"
_enter = ops.enter_call.default
_exit = ops.exit_call.default


def crawl_module(
    module: nn.Module,
    input_shape: tuple[int, ...] | list[tuple[int, ...]] | None = None,
    dtype: torch.dtype | Iterable[torch.dtype] | None = None,
    *,
    args: tuple[Any, ...] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    device: torch.device | str | None = None,
    strict: bool = False,
    mode: Mode = "full",
) -> AnalysisReport:
    """Analyses one forward pass of ``module`` (eval mode, ``torch.no_grad()``).

    Inputs come from exactly one source: ``input_shape`` (generated: a batch dimension of 1 is
    prepended; floating inputs random, integer zeros, bool ones) or ``args``/``kwargs`` (real call
    values, forwarded unchanged). Every module's training flag is restored and every hook removed
    afterwards, also when the forward raises. ``mode="structure"`` records the hierarchy, calls,
    shapes, parameters and buffers only. ``strict=True`` raises IncompleteAnalysisError (carrying
    the report) when a requested total is not complete or any diagnostic exists.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
    if mode not in ("full", "structure"):
        raise ValueError(f"mode must be 'full' or 'structure', got {mode!r}")
    call_args, call_kwargs, source = _inputs(module, input_shape, dtype, args, kwargs, device)
    context = _context(module, mode)
    inputs_meta = {"source": source, **describe_call(call_args, call_kwargs)}
    recorder = _Recorder(module, full=mode == "full")
    flags = [(m, m.training) for m in module.modules()]
    # Full mode counts the operators of the same forward in a native session, which the core
    # finishes straight into the report (no FlopReport round trip through Python).
    handle = ops.open_session(json.dumps({"torch_version": torch.__version__})) if mode == "full" else 0
    try:
        try:
            module.eval()
            recorder.attach(handle or None).install()
            with torch.no_grad():
                module(*call_args, **call_kwargs)
        finally:
            recorder.remove()
            for m, flag in flags:
                m.training = flag
            if handle:
                ops.close_session(handle)
        document = {
            "mode": mode,
            "context": context,
            "inputs": inputs_meta,
            "layers": recorder.layers,
            "parameter_totals": _parameter_totals(module),
            "torch_version": torch.__version__,
        }
        result = json.loads(ops.analysis_report(handle, json.dumps(document)))
    except BaseException:
        if handle:
            ops.discard_session(handle)
        raise
    report: AnalysisReport = result["report"]
    if strict and result["incomplete"]:
        raise IncompleteAnalysisError(f"Analysis is incomplete for: {', '.join(result['incomplete'])}.", report)
    return report


def summary(
    module: nn.Module,
    input_shape: tuple[int, ...] | list[tuple[int, ...]] | None = None,
    wrap_mode: str = "mid",
    max_depth: int | None = None,
    receptive_field: bool = False,
    effective_rf_stats: bool = False,
    *,
    dtype: torch.dtype | Iterable[torch.dtype] | None = None,
    args: tuple[Any, ...] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    device: torch.device | str | None = None,
    strict: bool = False,
    mode: Mode = "full",
) -> AnalysisReport:
    """crawl_module, then prints the layer table; returns the same AnalysisReport."""
    report = crawl_module(module, input_shape, dtype, args=args, kwargs=kwargs, device=device, strict=strict, mode=mode)
    display = aggregate_info(report, max_depth) if max_depth is not None else report
    print(format_info(display, wrap_mode, receptive_field, effective_rf_stats))
    return report


# ---- inputs ----


def _default_placement(module: nn.Module) -> tuple[torch.device, torch.dtype]:
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device, tensor.dtype
    return torch.device("cpu"), torch.float32


def _inputs(
    module: nn.Module,
    input_shape: object,
    dtype: object,
    args: object,
    kwargs: object,
    device: object,
) -> tuple[tuple[Any, ...], dict[str, Any], str]:
    provided = args is not None or kwargs is not None
    generated = input_shape is not None
    if provided == generated:
        raise ValueError(
            "Exactly one of input_shape or args/kwargs must be provided"
            + (" (both were given)." if provided else " (neither was given).")
        )
    if provided:
        if dtype is not None or device is not None:
            raise ValueError("dtype and device apply only to generated input_shape tensors, not to args/kwargs.")
        if args is not None and not isinstance(args, tuple):
            raise TypeError(f"args must be a tuple, got {type(args).__name__}.")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise TypeError(f"kwargs must be a mapping, got {type(kwargs).__name__}.")
        call_kwargs = {} if kwargs is None else dict(kwargs)
        for key in call_kwargs:
            if not isinstance(key, str):
                raise TypeError(f"kwargs keys must be strings, got a key of type {type(key).__name__}.")
        return (() if args is None else args), call_kwargs, "provided"
    shapes = input_shape if isinstance(input_shape, list) else [input_shape]
    if not shapes or not all(isinstance(s, tuple) for s in shapes):
        raise TypeError(f"input_shape must be a tuple or a non-empty list of tuples, got {input_shape!r}.")
    for shape in shapes:
        for dim in shape:
            if not isinstance(dim, int) or isinstance(dim, bool):
                raise TypeError(f"Every input_shape dimension must be an integer, got {dim!r} in {shape!r}.")
            if dim < 0:
                raise ValueError(f"input_shape dimensions cannot be negative, got {dim} in {shape!r}.")
    default_device, default_dtype = _default_placement(module)
    target = torch.device(device) if device is not None else default_device
    if dtype is None:
        dtypes = [default_dtype] * len(shapes)
    elif isinstance(dtype, torch.dtype):
        dtypes = [dtype] * len(shapes)
    elif isinstance(dtype, Iterable) and not isinstance(dtype, (str, bytes)):
        dtypes = list(dtype)
        if len(dtypes) != len(shapes):
            raise ValueError(f"dtype length must match the number of input shapes ({len(dtypes)} != {len(shapes)}).")
    else:
        raise TypeError(f"dtype must be a torch.dtype or an iterable of them, got {type(dtype).__name__}.")
    for item in dtypes:
        if not isinstance(item, torch.dtype):
            raise TypeError(f"Every dtype value must be a torch.dtype, got {type(item).__name__}.")
    tensors = tuple(_generate((1, *shape), item, target) for shape, item in zip(shapes, dtypes, strict=True))
    return tensors, {}, "generated"


def _generate(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.ones(shape, dtype=dtype, device=device)
    if dtype.is_floating_point or dtype.is_complex:
        return torch.rand(shape, device=device).to(dtype=dtype)
    return torch.zeros(shape, dtype=dtype, device=device)


# ---- context and totals ----


def _version() -> str:
    from . import __version__

    return __version__


def _context(module: nn.Module, mode: Mode) -> dict[str, Any]:
    tensors = [*module.parameters(), *module.buffers()]
    cls = type(module)
    context: dict[str, Any] = {
        "torchscan_version": _version(),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "model_type": f"{cls.__module__}.{cls.__qualname__}",
        "execution_mode": "evaluation_no_grad",
        "training_before": module.training,
        "devices": sorted({str(t.device) for t in tensors}),
        "dtypes": sorted({str(t.dtype) for t in tensors}),
    }
    if mode == "structure":
        context["analysis_mode"] = "structure"
    return context


def _parameter_totals(module: nn.Module) -> dict[str, int]:
    params, buffers = list(module.parameters()), list(module.buffers())
    return {
        "trainable": sum(p.numel() for p in params if p.requires_grad),
        "frozen": sum(p.numel() for p in params if not p.requires_grad),
        "parameter_bytes": sum(p.numel() * p.element_size() for p in params),
        "buffer_elements": sum(b.numel() for b in buffers),
        "buffer_bytes": sum(b.numel() * b.element_size() for b in buffers),
    }


# ---- the per-module hooks ----

_SIGNATURES: dict[Callable[..., Any], inspect.Signature | None] = {}


def _ordered_inputs(module: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
    """The forward arguments in signature order, defaults applied (what the formulas index)."""
    if not kwargs:
        return args
    forward = type(module).forward
    if forward not in _SIGNATURES:
        try:
            _SIGNATURES[forward] = inspect.signature(module.forward)
        except (TypeError, ValueError):
            _SIGNATURES[forward] = None
    signature = _SIGNATURES[forward]
    if signature is None:
        return (*args, *kwargs.values())
    try:
        bound = signature.bind_partial(*args, **kwargs)
    except TypeError:
        return (*args, *kwargs.values())
    bound.apply_defaults()
    ordered: list[Any] = []
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            ordered.extend(value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            ordered.extend(value.values())
        else:
            ordered.append(value)
    return tuple(ordered)


class _Recorder:
    """Hooks every module; one layer record per call, in call order."""

    def __init__(self, root: nn.Module, *, full: bool) -> None:
        self.root = root
        self.full = full
        self.layers: list[dict[str, Any]] = []
        self._handle: int | None = None
        self._hooks: list[Any] = []
        self._calls: dict[int, int] = {}
        self._open: dict[int, list[int]] = {}
        self._seen: set[int] = set()
        if isinstance(root, nn.Transformer):
            self._targets: Sequence[tuple[str, nn.Module]] = [("", root)]
        else:
            self._targets = list(root.named_modules())
        self._root_label = type(root).__name__
        self._leaf = {id(m): self._is_leaf(m) for _, m in self._targets}
        # Labels as PyTorch's flop counter names modules (operator_flops.by_module).
        self._labels = {id(m): f"{self._root_label}.{p}" if p else self._root_label for p, m in self._targets}
        self._statics: dict[int, dict[str, Any]] = {}

    def _static(self, module: nn.Module) -> dict[str, Any]:
        """The module's descriptor without shapes: attributes do not change during the forward."""
        static = self._statics.get(id(module))
        if static is None:
            static = self._statics[id(module)] = family(module)
        return static

    def attach(self, handle: int | None) -> _Recorder:
        self._handle = handle
        return self

    def install(self) -> None:
        for path, module in self._targets:
            self._hooks.append(module.register_forward_pre_hook(self._pre(path), with_kwargs=True))
            self._hooks.append(module.register_forward_hook(self._post(path), with_kwargs=True, always_call=True))

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()

    def _is_leaf(self, module: nn.Module) -> bool:
        return (
            next(module.children(), None) is None
            or isinstance(module, nn.MultiheadAttention)
            or (module is self.root and isinstance(module, nn.Transformer))
        )

    def _fresh(self, tensors: Iterable[torch.Tensor]) -> tuple[list[torch.Tensor], bool]:
        """Tensors not counted for an earlier layer call, and whether any already was (shared)."""
        fresh, shared = [], False
        for tensor in tensors:
            if id(tensor) in self._seen:
                shared = True
            else:
                self._seen.add(id(tensor))
                fresh.append(tensor)
        return fresh, shared

    def _parameters(self, module: nn.Module, recurse: bool) -> dict[str, Any]:
        own = module.parameters() if recurse else (p for p in module._parameters.values() if p is not None)
        fresh, shared = self._fresh(own)
        return {
            "trainable": sum(p.numel() for p in fresh if p.requires_grad),
            "frozen": sum(p.numel() for p in fresh if not p.requires_grad),
            "bytes": sum(p.numel() * p.element_size() for p in fresh),
            "shared": shared,
        }

    def _buffers(self, module: nn.Module, recurse: bool) -> dict[str, Any]:
        own = module.buffers() if recurse else (b for b in module._buffers.values() if b is not None)
        fresh, shared = self._fresh(own)
        return {
            "elements": sum(b.numel() for b in fresh),
            "bytes": sum(b.numel() * b.element_size() for b in fresh),
            "shared": shared,
        }

    def _pre(self, path: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            index = len(self.layers)
            call_index = self._calls.get(id(module), 0)
            self._calls[id(module)] = call_index + 1
            recurse = isinstance(module, nn.MultiheadAttention) or (
                module is self.root and isinstance(module, nn.Transformer)
            )
            self.layers.append(
                {
                    "path": path,
                    "call_index": call_index,
                    "name": path.rpartition(".")[-1] if path else type(module).__name__.lower(),
                    "depth": path.count(".") + 1 if path else 0,
                    "type": type(module).__name__,
                    "input": describe_call(args, kwargs),
                    "output": {"kind": "pending"},
                    "parameters": self._parameters(module, recurse),
                    "buffers": self._buffers(module, recurse),
                    "leaf": self._leaf[id(module)],
                }
            )
            self._open.setdefault(id(module), []).append(index)
            if self._handle is not None:
                _enter(self._handle, self._labels[id(module)], f"{_CALL_PREFIX}{index}")

        return hook

    def _post(self, path: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
            stack = self._open.get(id(module))
            if not stack:
                return
            index = stack.pop()
            record = self.layers[index]
            record["output"] = describe_value(output)
            if self._handle is not None:
                _exit(self._handle)
            if self.full and record["leaf"]:
                ordered = _ordered_inputs(module, args, kwargs)
                attention = isinstance(module, (nn.MultiheadAttention, nn.Transformer))
                if attention:
                    record["call"] = describe(module, ordered, output, attention=True)
                else:
                    first_in, first_out = first_tensor(ordered), first_tensor(output)
                    if first_in is not None and first_out is not None:
                        call = dict(self._static(module))
                        call["input"], call["output"] = list(first_in.shape), list(first_out.shape)
                        record["call"] = call
                record["rf_not_applicable"] = attention

        return hook
