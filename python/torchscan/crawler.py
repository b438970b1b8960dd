"""crawl_module and summary: one forward pass, every module call recorded, every metric counted.

Python records the structure (hooks on every module: identities, call metadata, parameter
accounting, module descriptors) and drives the native session that counts the operators of the
same forward; the Rust core turns that document into the AnalysisReport.
"""

from __future__ import annotations

import inspect
import json
import platform
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, cast

import torch
from torch import nn
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter

from . import _labels
from ._guards import Guard, hold, restore_flags
from ._guards import flags as training_flags
from ._hints import TOKEN_IDS, batch_hint, looks_like_a_shape_error, looks_like_float_token_ids
from ._metadata import describe_call, describe_value
from ._names import escape_name, module_aliases, named_modules
from ._native import ops
from ._parse import parse_report
from ._pruning import Mask, masks
from ._session import NativeSession
from .errors import IncompleteAnalysisError
from .modules._descriptors import describe, family, first_tensor
from .report import AnalysisReport
from .utils import table_request

# (path, name, depth, module), paths escaped: torchscan/_names.py.
Named = tuple[str, str, int, nn.Module]

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
    training: bool = False,
) -> AnalysisReport:
    """Analyses one forward pass of ``module`` (eval mode, ``torch.no_grad()``).

    Inputs come from exactly one source: ``input_shape`` (generated: a batch dimension of 1 is
    prepended; floating inputs random, integer zeros, bool ones) or ``args``/``kwargs`` (real call
    values, forwarded unchanged). Every module's training flag is restored and every hook removed
    afterwards, also when the forward raises. ``mode="structure"`` records the hierarchy, calls,
    shapes, parameters and buffers only. ``strict=True`` raises IncompleteAnalysisError (carrying
    the report) when a requested total is not complete or any diagnostic exists.
    ``training=True`` runs the forward in training mode instead (still without autograd): dropout
    draws its masks, BatchNorm normalizes by the batch's statistics, training-only branches
    (auxiliary heads) run, and the module formulas that depend on it follow. The buffers that
    forward updates (BatchNorm's running statistics) and the random generators it draws from are
    restored afterwards, so the model is left as found.
    """
    return _crawl(module, input_shape, dtype, args, kwargs, device, strict, mode, None, training)[0]


def _crawl(
    module: nn.Module,
    input_shape: tuple[int, ...] | list[tuple[int, ...]] | None,
    dtype: torch.dtype | Iterable[torch.dtype] | None,
    args: tuple[Any, ...] | None,
    kwargs: Mapping[str, Any] | None,
    device: torch.device | str | None,
    strict: bool,
    mode: Mode,
    table: dict[str, Any] | None,
    training: bool = False,
) -> tuple[AnalysisReport, str | None]:
    """crawl_module; with ``table`` (summary's options), also the table, drawn by the same native call."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
    if mode not in ("full", "structure"):
        raise ValueError(f"mode must be 'full' or 'structure', got {_kind(mode)}")
    if not isinstance(training, bool):
        raise TypeError(f"training must be a bool, got {type(training).__name__}")
    # One walk of the module tree serves the recorder, the flags and the parameter totals.
    named = list(named_modules(module))
    params, buffers = _unique(m._parameters for *_, m in named), _unique(m._buffers for *_, m in named)
    call_args, call_kwargs, source = _inputs(input_shape, dtype, args, kwargs, device, params + buffers)
    inputs_meta = {"source": source, **describe_call(call_args, call_kwargs)}
    recorder = _Recorder(module, named, full=mode == "full")
    masked_out = _masked_out(recorder.masks())
    # A training-mode forward's changes to the buffers and random generators are put back after
    # the analysis, outside its native session (the copies are not the model's operators).
    with hold(_model_lock(module)), Guard(_training_state, _restore_training_state, buffers if training else None):
        tensors = (params, buffers, masked_out)
        try:
            return _analyse(
                module, mode, named, recorder, call_args, call_kwargs, inputs_meta, tensors, strict, table, training
            )
        except Exception as error:
            if not isinstance(error, IncompleteAnalysisError):
                _hint_inputs(error, source, call_args, call_kwargs)
            raise


def _hint_inputs(error: Exception, source: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """The forward rejected its inputs: a note on the error (its type and message unchanged)
    saying what to change for the common mistakes, in the words the command's hints use."""
    tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
    floating = any(t.is_floating_point() for t in tensors)
    if looks_like_float_token_ids(error, floating):
        fix = "dtype=torch.int64 with input_shape" if source == "generated" else "args=(ids,) with integer (int64) ids"
        error.add_note("torchscan: " + TOKEN_IDS.format(fix=fix))
    elif source == "generated" and looks_like_a_shape_error(error):
        shapes = ", ".join(str(tuple(t.shape)) for t in tensors)
        error.add_note(
            f"torchscan: the generated inputs were {shapes}; "
            + batch_hint("input_shape", "crawl_module (a batch of 1)", "(3, 224, 224) rather than (1, 3, 224, 224)")
        )


def _analyse(
    module: nn.Module,
    mode: Mode,
    named: list[Named],
    recorder: _Recorder,
    call_args: tuple[Any, ...],
    call_kwargs: dict[str, Any],
    inputs_meta: dict[str, Any],
    tensors: tuple[list[torch.Tensor], list[torch.Tensor], int | None],
    strict: bool,
    table: dict[str, Any] | None,
    training: bool,
) -> tuple[AnalysisReport, str | None]:
    """The forward pass and the report, with the model's flags saved and restored around it.
    ``tensors``: the model's parameters, its buffers, and the parameter elements its pruning
    masks remove (None when a mask cannot be counted)."""
    params, buffers, masked_out = tensors
    context = _context(module, mode, params + buffers, training)
    # Full mode counts the operators of the same forward in a native session, which the core
    # finishes straight into the report (no FlopReport round trip through Python).
    session = NativeSession(json.dumps({"torch_version": torch.__version__}), labels=False) if mode == "full" else None
    try:
        if session is not None:
            session.start()
        # The flags and the recorder are given back by guards (torchscan/_guards.c): on leaving
        # the blocks, or, if an interrupt skips that, when this frame lets go of them.
        with Guard(training_flags, restore_flags, [m for *_, m in named]):
            module.train(training)
            # Grad mode too: `torch.no_grad()`'s exit is Python, which an interrupt can skip.
            with (
                recorder.attach(session.handle if session is not None else None).install(),
                Guard(torch.is_grad_enabled, torch._C._set_grad_enabled),
            ):
                torch._C._set_grad_enabled(False)
                module(*call_args, **call_kwargs)
        if session is not None:
            session.stop()
        if any(isinstance(t, _UNINITIALIZED) for t in params + buffers):
            # A forward that initializes a tensor by assigning a new one (torchinfo's
            # `uninitialized_tensor` model: `self.param = nn.Parameter(torch.zeros(128))` in
            # place of an UninitializedParameter) leaves the old object uninitialized: the model's
            # tensors are those its modules hold now. (Lazy modules materialize in place.)
            params = _unique(m._parameters for *_, m in named)
            buffers = _unique(m._buffers for *_, m in named)
        document = {
            "mode": mode,
            "context": context,
            "inputs": inputs_meta,
            "modules": recorder.modules(),
            "layers": recorder.layers,
            "parameter_totals": {**_parameter_totals(params, buffers), "masked_out": masked_out},
            "torch_version": torch.__version__,
            "scripted": _scripted(named),
            "uncalled": recorder.uncalled(),
        }
        if table is not None:
            document["table"] = table
        # The document is built here from plain lists and dicts: no cycles to check for.
        text = json.dumps(document, check_circular=False)
        if session is not None:
            answer = session.end(lambda handle: ops.analysis_report(handle, text))
        else:
            answer = ops.analysis_report(0, text)
        result = parse_report(answer)
    except BaseException:
        if session is not None:
            session.abort()
        raise
    report: AnalysisReport = result["report"]
    if strict and result["incomplete"]:
        incomplete = result["incomplete"]
        raise IncompleteAnalysisError(f"Analysis is incomplete for: {', '.join(incomplete)}.", report, incomplete)
    return report, result.get("table")


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
    training: bool = False,
) -> AnalysisReport:
    """crawl_module, then prints the layer table; returns the same AnalysisReport."""
    request = table_request(wrap_mode, receptive_field, effective_rf_stats, max_depth, None)
    report, table = _crawl(module, input_shape, dtype, args, kwargs, device, strict, mode, request, training)
    print(table)
    return report


# ---- inputs ----


# One analysis of a model at a time: each saves the training flags, calls eval() and restores
# them, so two interleaved on different threads would leave the model as the first found it.
_MODEL_LOCKS: weakref.WeakKeyDictionary[nn.Module, threading.RLock] = weakref.WeakKeyDictionary()


def _model_lock(module: nn.Module) -> threading.RLock:
    # One dict operation (no lock of its own to leave held): two threads get the same lock.
    return _MODEL_LOCKS.setdefault(module, threading.RLock())


def _default_placement(tensors: list[torch.Tensor]) -> tuple[torch.device, torch.dtype]:
    for tensor in tensors:
        return tensor.device, tensor.dtype
    return torch.device("cpu"), torch.float32


def _inputs(
    input_shape: object,
    dtype: object,
    args: object,
    kwargs: object,
    device: object,
    tensors: list[torch.Tensor],
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
    given = input_shape if isinstance(input_shape, list) else [input_shape]
    shapes: list[tuple[Any, ...]] = [s for s in given if isinstance(s, tuple)]
    if not shapes or len(shapes) != len(given):
        # Type names only: an argument's repr can carry values (a tensor's, an object's).
        tensor = isinstance(input_shape, torch.Tensor) or any(isinstance(s, torch.Tensor) for s in given)
        hint = " To analyse a forward on given tensors, pass them as args=(tensor,) (or kwargs=)." if tensor else ""
        raise TypeError(f"input_shape must be a tuple or a non-empty list of tuples, got {_kind(input_shape)}.{hint}")
    for shape in shapes:
        for dim in shape:
            if not isinstance(dim, int) or isinstance(dim, bool):
                raise TypeError(f"Every input_shape dimension must be an integer, got {_kind(dim)} in {_kind(shape)}.")
            if dim < 0:
                raise ValueError(f"input_shape dimensions cannot be negative, got {dim} in {_kind(shape)}.")
    default_device, default_dtype = _default_placement(tensors)
    target = torch.device(cast(Any, device)) if device is not None else default_device
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
    made = tuple(_generate((1, *shape), item, target) for shape, item in zip(shapes, dtypes, strict=True))
    return made, {}, "generated"


def _kind(value: object) -> str:
    """How an invalid argument is shown in an error: plain numbers, None and identifier strings
    as themselves (configuration, not data), anything else by its type (a tensor's or an
    object's repr can carry values), containers item by item."""
    if value is None or type(value) in (int, float, bool) or (isinstance(value, str) and value.isidentifier()):
        return repr(value)
    if isinstance(value, (tuple, list)) and type(value) in (tuple, list) and len(value) <= 8:
        items = ", ".join(_kind(v) for v in value)
        return f"({items}{',' if len(value) == 1 else ''})" if type(value) is tuple else f"[{items}]"
    return type(value).__name__


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


def _scripted(named: list[Named]) -> list[str]:
    """The paths of the outermost TorchScript modules with submodules: module hooks do not run
    inside TorchScript, so their submodules' calls are not recorded."""
    paths: list[str] = []
    for path, _, _, module in named:
        if not isinstance(module, torch.jit.ScriptModule) or not module._modules:
            continue
        if not any(p == "" or path.startswith(f"{p}.") for p in paths):
            paths.append(path)
    return paths


def _training_state(buffers: list[torch.Tensor] | None) -> Any:
    """What a training-mode forward changes besides the flags: the buffers' values (BatchNorm's
    running statistics) and the random generators (dropout's draws). None in evaluation."""
    if buffers is None:
        return None
    saved = [(b, b.detach().clone()) for b in buffers if not b.is_meta]
    cuda = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    return saved, torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else None


def _restore_training_state(state: Any) -> None:
    if state is None:
        return
    saved, cpu_rng, cuda_rng = state
    with torch.no_grad():
        for buffer, value in saved:
            buffer.copy_(value)
    torch.set_rng_state(cpu_rng)
    if cuda_rng is not None:
        torch.cuda.set_rng_state_all(cuda_rng)


def _context(module: nn.Module, mode: Mode, tensors: list[torch.Tensor], training: bool = False) -> dict[str, Any]:
    cls = type(module)
    context: dict[str, Any] = {
        "torchscan_version": _version(),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "model_type": f"{cls.__module__}.{cls.__qualname__}",
        "execution_mode": "training_no_grad" if training else "evaluation_no_grad",
        "training_before": module.training,
        "devices": sorted({str(t.device) for t in tensors}),
        "dtypes": sorted({str(t.dtype) for t in tensors}),
    }
    if mode == "structure":
        context["analysis_mode"] = "structure"
    return context


def _unique(registries: Iterable[dict[str, Any]]) -> list[torch.Tensor]:
    """The tensors of `_parameters`/`_buffers` registries, each once (as `module.parameters()`)."""
    seen: set[int] = set()
    tensors = []
    for registry in registries:
        for tensor in registry.values():
            if tensor is not None and id(tensor) not in seen:
                seen.add(id(tensor))
                tensors.append(tensor)
    return tensors


def _count(value: int) -> int | None:
    """A count as the report holds it: None from 2^64 up (the core reports it unavailable)."""
    return value if value < 2**64 else None


def _effective(parameters: tuple[Any, ...], fresh: list[Mask]) -> int | None:
    """The parameter count of a layer call less what the pruning masks of ``fresh`` remove."""
    trainable, frozen = parameters[0], parameters[1]
    removed = _masked_out({id(mask.original): mask for mask in fresh})
    if trainable is None or frozen is None or removed is None:
        return None
    return int(trainable + frozen - removed)


def _masked_out(found: Mapping[int, Mask]) -> int | None:
    """The parameter elements the pruning masks remove, each pruned parameter once (None when a
    mask cannot be counted)."""
    removed = 0
    for mask in found.values():
        if mask.kept is None:
            return None
        removed += mask.numel - mask.kept
    return removed


def _parameter_totals(params: list[torch.Tensor], buffers: list[torch.Tensor]) -> dict[str, int | bool | None]:
    # Collected before the forward, which materializes a lazy module's tensors in place; one that
    # is still uninitialized has no size to count.
    lazy_params = any(isinstance(p, _UNINITIALIZED) for p in params)
    lazy_buffers = any(isinstance(b, _UNINITIALIZED) for b in buffers)
    if lazy_params or lazy_buffers:
        unknown = {"trainable", "frozen", "parameter_bytes"} if lazy_params else set()
        unknown |= {"buffer_elements", "buffer_bytes"} if lazy_buffers else set()
        known = _parameter_totals([] if lazy_params else params, [] if lazy_buffers else buffers)
        totals: dict[str, int | bool | None] = {key: None if key in unknown else value for key, value in known.items()}
        totals["uninitialized"] = True
        return totals
    return {
        "trainable": _count(sum(p.numel() for p in params if p.requires_grad)),
        "frozen": _count(sum(p.numel() for p in params if not p.requires_grad)),
        "parameter_bytes": _count(sum(p.numel() * p.element_size() for p in params)),
        "buffer_elements": _count(sum(b.numel() for b in buffers)),
        "buffer_bytes": _count(sum(b.numel() * b.element_size() for b in buffers)),
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


# The document's layer records are arrays, and what is constant per module (identity, type,
# formula descriptor) is sent once per module: the core expands both into the report.
# Parameters: [trainable, frozen, bytes, shared]; buffers: [elements, bytes, shared].
_NO_PARAMETERS = (0, 0, 0, False)
# The tensors of a lazy module before its first forward.
_UNINITIALIZED = (UninitializedParameter, UninitializedBuffer)
# A lazy module's counts, until its forward returns; and those of tensors still uninitialized
# after it (unavailable, as a count past 2^64 is).
_LAZY: Any = object()
_UNKNOWN_PARAMETERS = (None, None, None, False)
_UNKNOWN_BUFFERS = (None, None, False)


class _Lazy(Exception):
    """An uninitialized parameter or buffer among a call's tensors."""


_NO_BUFFERS = (0, 0, False)
_PENDING = {"kind": "pending"}


def _type_name(module: nn.Module) -> str:
    """The module's class name; a TorchScript module's is that of the module it was made from
    (its own class is RecursiveScriptModule or a traced module's)."""
    if isinstance(module, torch.jit.ScriptModule):
        original = getattr(module, "original_name", None)
        if isinstance(original, str) and original:
            return original
    return type(module).__name__


class _Target:
    """What the hooks need of one module, computed once per analysis."""

    __slots__ = (
        "aliases",
        "attention",
        "calls",
        "depth",
        "index",
        "label",
        "leaf",
        "masks",
        "module",
        "name",
        "open",
        "parent",
        "path",
        "static",
    )

    def __init__(
        self, index: int, where: tuple[str, str, int], module: nn.Module, root_label: str, attention: bool
    ) -> None:
        self.index = index
        path, self.name, self.depth = where
        self.path = path
        # The path of the module whose forward calls it under this name (a module registered
        # under several names takes, for each call, the name under its caller).
        self.parent = path[: -len(self.name) - 1] if self.depth > 1 else ""
        # Its other paths.
        self.aliases: list[str] = []
        self.module = module
        # Labels as PyTorch's flop counter names modules (operator_flops.by_module).
        self.label = f"{root_label}.{path}" if path else root_label
        # Module formulas apply to modules without children, MultiheadAttention and a root
        # Transformer; the last two own their children's parameters and take the whole call.
        self.leaf = attention or not module._modules
        self.attention = attention
        self.calls = 0
        self.open: list[int] = []
        self.static: dict[str, Any] | None = None
        # The pruning masks on the tensors a call of it counts (an attention module's include
        # its children's), by tensor name; empty when nothing is pruned.
        owners = module.named_modules() if attention else [("", module)]
        self.masks = {
            f"{prefix}.{name}" if prefix else name: mask
            for prefix, owner in owners
            for name, mask in masks(owner).items()
        }

    def row(self) -> list[Any]:
        """[path, name, depth, type, leaf, attention, formula descriptor or null, aliases,
        masks ({tensor name: [kept, numel]})]."""
        path, module = self.path, self.module
        type_name = escape_name(_type_name(module))
        name = self.name if path else type_name.lower()
        pruned = {tensor: [mask.kept, mask.numel] for tensor, mask in self.masks.items()}
        return [path, name, self.depth, type_name, self.leaf, self.attention, self.static, self.aliases, pruned]


class _Recorder:
    """One layer record per module call, in call order.

    Called by torchscan's two global module hooks (``_labels.py``: one hook driver for module
    labels and recorders) instead of two hooks per module: installing and dispatching
    per-module hooks costs more than the whole rest of the recording on a resnet50. The
    recorder ignores modules outside the analysed tree and calls from other threads.
    """

    def __init__(self, root: nn.Module, named: list[Named], *, full: bool) -> None:
        self.full = full
        # [module index, call index, input, output, parameters, buffers, call shapes/descriptor]
        self.layers: list[list[Any]] = []
        self._handle: int | None = None
        self._seen: set[int] = set()
        self._thread = threading.get_ident()
        # The last output tensor described, its shape and requires_grad, and its description.
        self._last: tuple[torch.Tensor, torch.Size, bool, dict[str, Any]] | None = None
        transformer_root = isinstance(root, nn.Transformer)
        targets: list[Named] = [("", "", 0, root)] if transformer_root else named
        label = escape_name(type(root).__name__)
        self._targets: dict[int, _Target] = {}
        for path, name, depth, module in targets:
            attention = isinstance(module, nn.MultiheadAttention) or (module is root and transformer_root)
            self._targets[id(module)] = _Target(len(self._targets), (path, name, depth), module, label, attention)
        self._rows = list(self._targets.values())
        # A module registered under several names: a target per place, chosen per call by its
        # caller (the innermost module call open, `_open`).
        self._places: dict[int, list[_Target]] = {}
        for key, places in ({} if transformer_root else module_aliases(root)).items():
            first = self._targets[key]
            extra = [
                _Target(len(self._rows) + i, where, first.module, label, first.attention)
                for i, where in enumerate(places)
            ]
            self._rows.extend(extra)
            self._places[key] = [first, *extra]
            for target in self._places[key]:
                target.aliases = [other.path for other in self._places[key] if other is not target]
        self._open: list[_Target] = []
        # The submodules of each outermost TorchScript module: module hooks do not run inside
        # TorchScript, so they are listed from the tree after its first call (`post`).
        self._script_members: dict[int, list[_Target]] = {}
        for scripted in _scripted(named):
            owner = next((t for t in self._rows if t.path == scripted), None)
            if owner is None:  # inside a root Transformer, which takes the whole call
                continue
            prefix = f"{scripted}." if scripted else ""
            members = [t for t in self._rows[: len(self._targets)] if t.path.startswith(prefix) and t is not owner]
            self._script_members[id(owner.module)] = members

    def modules(self) -> list[list[Any]]:
        """The per-module rows the layer records index."""
        return [target.row() for target in self._rows]

    def masks(self) -> dict[int, Mask]:
        """The model's pruned parameters, each once: ``id(dense parameter)`` -> Mask."""
        return {id(mask.original): mask for target in self._rows for mask in target.masks.values()}

    def _place(self, target: _Target) -> _Target:
        """The place of a call of a module registered under several names: the one under the
        calling module, else the first."""
        caller = self._open[-1].path if self._open else None
        for place in self._places[id(target.module)]:
            if place.parent == caller:
                return place
        return target

    def attach(self, handle: int | None) -> _Recorder:
        self._handle = handle
        return self

    def install(self) -> Guard:
        """Records module calls until the returned guard is released."""
        return _labels.register("_recorders", self)

    def _account(self, tensors: Iterable[torch.Tensor | None]) -> tuple[int | None, int | None, int | None, bool]:
        """(trainable, frozen, bytes, shared) of the tensors not counted for an earlier call (a
        count of 2^64 or more is None)."""
        trainable = frozen = nbytes = 0
        shared = False
        seen = self._seen
        added: list[int] = []
        for tensor in tensors:
            if tensor is None:
                continue
            if isinstance(tensor, _UNINITIALIZED):
                # A lazy module before its first forward: counted after the call (see pre).
                seen.difference_update(added)
                raise _Lazy
            key = id(tensor)
            if key in seen:
                shared = True
                continue
            seen.add(key)
            added.append(key)
            count = tensor.numel()
            nbytes += count * tensor.element_size()
            if tensor.requires_grad:
                trainable += count
            else:
                frozen += count
        if nbytes >= 2**64:  # rare: a meta tensor of 2^64 bytes or more
            return _count(trainable), _count(frozen), None, shared
        return trainable, frozen, nbytes, shared

    def _own_tensors(self, module: nn.Module, attention: bool, masked: dict[str, Mask]) -> tuple[Any, Any]:
        """(parameters, buffers) of a call: the module's own tensors (an attention module's with
        its children's), those already counted for an earlier call as shared. A pruned module's
        parameters carry a fifth count, what its masks keep of them."""
        # The pruned parameters this call counts first (one counted earlier was accounted there).
        fresh = [mask for mask in masked.values() if id(mask.original) not in self._seen]
        if attention:
            parameters: tuple[Any, ...] = self._account(module.parameters())
            buffers = self._buffers(module.buffers())
        else:
            parameters = self._account(module._parameters.values()) if module._parameters else _NO_PARAMETERS
            buffers = self._buffers(module._buffers.values()) if module._buffers else _NO_BUFFERS
        if masked:
            parameters = (*parameters, _effective(parameters, fresh))
        return parameters, buffers

    def uncalled(self) -> list[list[Any]]:
        """``[module row, label, parameters, buffers]`` of each module that holds parameters of
        its own and has no layer record (never called), in ``named_modules()`` order (a lazy
        one, its parameters uninitialized, is left out: its size is unknown): the
        tensors no call counted (``_account``'s rule continues, so a tensor shared with a call,
        or with an earlier one of these, is counted once). The modules inside an attention
        module or a root Transformer are left out: that call counts their tensors."""
        recorded = {record[0] for record in self.layers}
        wholes = [f"{t.path}." if t.path else "" for t in self._rows if t.attention]
        out: list[list[Any]] = []
        for target in self._rows:
            if target.index in recorded or not target.path:
                continue
            if any(target.path.startswith(prefix) for prefix in wholes):
                continue
            if not any(p is not None for p in target.module._parameters.values()):
                continue
            try:
                parameters, buffers = self._own_tensors(target.module, target.attention, target.masks)
            except _Lazy:
                # A lazy module never called: its size is unknown (the totals say so), no row.
                continue
            out.append([target.index, target.label, parameters, buffers])
        return out

    def _list_script_members(self, members: list[_Target]) -> None:
        """A layer record for each submodule of a TorchScript module, after its first call:
        structure, parameters and buffers (which the tree holds), no call (none is seen)."""
        for target in members:
            try:
                parameters, buffers = self._own_tensors(target.module, target.attention, target.masks)
            except _Lazy:
                parameters, buffers = _UNKNOWN_PARAMETERS, _UNKNOWN_BUFFERS
            self.layers.append([target.index, 0, None, None, parameters, buffers, None, False, True])

    def _buffers(self, tensors: Iterable[torch.Tensor | None]) -> tuple[int | None, int | None, bool]:
        """(elements, bytes, shared) of the buffers not counted for an earlier call."""
        trainable, frozen, nbytes, shared = self._account(tensors)
        elements = None if trainable is None or frozen is None else _count(trainable + frozen)
        return elements, nbytes, shared

    def _describe_input(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """describe_call, reusing the description of the previous call's output tensor when this
        call's only argument is that same tensor, unchanged (the common chain of layers)."""
        last = self._last
        if last is not None and len(args) == 1 and not kwargs:
            tensor = args[0]
            if tensor is last[0] and tensor.shape == last[1] and tensor.requires_grad == last[2]:
                return {"args": [last[3]], "kwargs": {}}
        return describe_call(args, kwargs)

    def pre(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        target = self._targets.get(id(module))
        if target is None or threading.get_ident() != self._thread:
            return
        if self._places and id(module) in self._places:
            target = self._place(target)
        index = len(self.layers)
        call_index = target.calls
        target.calls = call_index + 1
        try:
            parameters, buffers = self._own_tensors(module, target.attention, target.masks)
        except _Lazy:
            # Uninitialized parameters (nn.LazyLinear, an UninitializedParameter): the forward
            # about to run materializes them; they are counted when it returns (post).
            parameters, buffers = _LAZY, _LAZY
        # Inputs are described by the forward hook, which sees what forward was given (after
        # every pre-hook, keyword arguments included).
        self.layers.append([target.index, call_index, None, _PENDING, parameters, buffers, None, parameters is _LAZY])
        target.open.append(index)
        self._open.append(target)
        if self._handle is not None:
            _enter(self._handle, target.label, f"{_CALL_PREFIX}{index}")

    def post(self, module: nn.Module, args: tuple[Any, ...], *rest: Any) -> None:
        # (kwargs, output) normally; (output,) when PyTorch runs always-called hooks after the
        # forward raised.
        target = self._targets.get(id(module))
        if target is None or threading.get_ident() != self._thread:
            return
        # The call's place: the innermost open call is this one (ends come innermost first).
        opened = self._open
        if opened and opened[-1].module is module:
            target = opened.pop()
        if not target.open:
            return
        if len(rest) == 2:
            kwargs, output = rest
        else:
            kwargs, output = {}, rest[0]
        index = target.open.pop()
        if self._handle is not None:
            _exit(self._handle)
        record = self.layers[index]
        if record[4] is _LAZY:
            try:
                record[4], record[5] = self._own_tensors(module, target.attention, target.masks)
            except _Lazy:
                # Still uninitialized after its forward: no count to give.
                record[4], record[5] = _UNKNOWN_PARAMETERS, _UNKNOWN_BUFFERS
        record[2] = self._describe_input(args, kwargs)
        record[3] = out = describe_value(output)
        if self._script_members and id(module) in self._script_members and record[1] == 0:
            self._list_script_members(self._script_members[id(module)])
        if type(output) is torch.Tensor:
            self._last = (output, output.shape, output.requires_grad, out)
        if not (self.full and target.leaf):
            return
        if target.attention:
            record[6] = describe(module, _ordered_inputs(module, args, kwargs), output, attention=True)
            return
        # The common call, one positional tensor in and one out, without the general search.
        first_in = args[0] if args and not kwargs and type(args[0]) is torch.Tensor else None
        if first_in is None:
            first_in = first_tensor(_ordered_inputs(module, args, kwargs))
        first_out = output if type(output) is torch.Tensor else first_tensor(output)
        if first_in is not None and first_out is not None:
            if target.static is None:
                # Attributes do not change during the forward: one descriptor per module.
                target.static = family(module)
            record[6] = [list(first_in.shape), list(first_out.shape)]
