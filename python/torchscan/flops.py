"""measure_flops and count_flops: count the FLOPs of every operator a workload dispatches.

The counting happens natively (C++ observer, Rust core); Python only opens the session, names
the modules whose calls label the work (``_labels.py``), and prices calls of operators that the
caller maps to its own formulas (``custom_mapping``), after the workload has finished.
"""

from __future__ import annotations

import bisect
import json
import operator
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Literal, NamedTuple

import torch
from torch import nn
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter

from ._guards import Guard, hold
from ._labels import _compiled_original, _root_name
from ._names import escape_name
from ._native import ops
from ._parse import parse_report
from ._session import NativeSession, kept_report
from .distributed import process_context
from .report import FlopReport

__all__ = ["FlopCounter", "count_flops", "measure_flops"]

CustomFormula = Callable[..., int]
Threads = Literal["current", "all"]


class _Config(NamedTuple):
    """What a session is opened with: the caller's formulas by qualified operator name
    (``{name: (packet name, formula)}``), the root modules whose calls label the work (``None``:
    every module called), and the native session's configuration (JSON, built once)."""

    formulas: dict[str, tuple[str, CustomFormula]]
    roots: list[nn.Module] | None
    native: str


def measure_flops(
    workload: Callable[[], Any],
    *,
    modules: nn.Module | Iterable[nn.Module] | None = None,
    custom_mapping: Mapping[Any, CustomFormula] | None = None,
    threads: Threads = "current",
) -> FlopReport:
    """Runs ``workload()`` exactly once and returns the FLOPs of every operator it dispatched.

    Args:
        workload: a zero-argument callable (forward, backward, optimizer step, ...).
        modules: the root module(s) whose calls label ``by_module`` (``ResNet``,
            ``ResNet.layer1.0.conv1``). By default every module the workload calls is labelled,
            the outermost by its class name. Given, the report's ``uncalled_modules`` lists the
            roots' modules holding parameters that made no call (labels by hooks) or ran no
            operator (labels by frames: no ``by_module`` entry, none inside them), and
            ``format_flops`` gives each a row of 0 FLOPs.
        custom_mapping: ``{torch.ops.ns.op: formula}`` for this call only; ``formula(*inputs,
            out_shape=...)`` receives tensor arguments as ``torch.Size`` and other positional
            arguments as values (PyTorch's flop-counter convention) and returns FLOPs per call.
            It overrides the built-in formula of that operator.
        threads: ``"current"`` (default) counts the calling thread and the autograd threads it
            hands backward work to; arithmetic that other threads (a thread pool) run meanwhile is
            reported missing (``unfollowed_threads``, total partial). ``"all"`` counts every
            thread of the process while the workload runs (other threads' forward work has no
            module label).

    Returns:
        The FlopReport. ``total`` is complete only when every operator observed is counted or
        known to do no arithmetic; otherwise it is partial and ``diagnostics`` names the rest.

    The workload's exceptions propagate unchanged; the session is closed and every hook removed
    whatever happens.
    """
    if not callable(workload):
        raise TypeError(f"workload must be a zero-argument callable, got {type(workload).__name__}")
    session = _Session(_config(modules, custom_mapping, threads))
    session.start()
    try:
        workload()
        uncalled = session.uncalled()
    except BaseException:
        session.abort()
        raise
    report: FlopReport = parse_report(session.finish())
    return _with_uncalled(report, uncalled)


class _Session:
    """A counting session of measure_flops or count_flops: the shared native lifecycle
    (``_session.py``) with this configuration's module labels and custom formulas."""

    def __init__(self, config: _Config) -> None:
        self._formulas = config.formulas
        self._roots = config.roots
        self._native = NativeSession(config.native, labels=True, roots=config.roots)

    def start(self) -> None:
        self._native.start()

    def uncalled(self) -> _Uncalled | None:
        """After the workload: the named roots' modules that may have made no call
        (:func:`_uncalled_candidates`); None without named roots."""
        if self._roots is None:
            return None
        return _uncalled_candidates(self._roots, self._native.by_frames)

    def finish(self) -> str:
        """Stops counting and builds the report (its JSON; parsed by whoever reads it); custom
        formulas are priced only now, so that their own work is never counted as the
        workload's."""
        if not self._formulas:
            # Without custom formulas, closing and finishing are one native call.
            return self._native.end(ops.end_session)
        try:
            results = json.dumps(_price(json.loads(self._native.stop()), self._formulas))
        except BaseException:
            self._native.abort()
            raise
        return self._native.end(lambda handle: ops.finish_session(handle, results))

    def keep(self) -> Guard | None:
        """Stops counting and keeps the session with its report unbuilt (``kept_report`` builds
        it); None when custom formulas must be priced now, which :meth:`finish` does."""
        if self._formulas:
            return None
        return self._native.keep()

    def abort(self) -> None:
        """Stops counting and frees the session without a report (the work raised)."""
        self._native.abort()


class FlopCounter:
    """The context-manager form of measure_flops, for work that is not one callable: a training
    loop's forward, backward and optimizer step, say. Build it with :func:`count_flops`.

    Counting covers what the current thread (and the autograd threads it starts) dispatches
    between entering and leaving the ``with`` block; ``report()`` is then the same FlopReport
    measure_flops would give for that work. A counter counts one block: enter a new one for the
    next count.
    """

    def __init__(
        self,
        modules: nn.Module | Iterable[nn.Module] | None = None,
        custom_mapping: Mapping[Any, CustomFormula] | None = None,
        threads: Threads = "current",
    ) -> None:
        # Validated here, so that a bad argument fails before any work runs.
        self._session = _Session(_config(modules, custom_mapping, threads))
        self._state: Literal["ready", "counting", "done", "failed"] = "ready"
        # The report, built by the first report() from the kept session (a loop that counts
        # every step and reads few reports pays for a report only when it reads one); then its
        # JSON, parsed by each report(). Counts with custom formulas are priced, and their
        # report built, when the block exits (the formulas must not run inside a later block).
        self._kept: Guard | None = None
        self._report: str | None = None
        # The named roots' modules that may have made no call, listed when the block exits.
        self._uncalled: _Uncalled | None = None

    def __enter__(self) -> FlopCounter:
        if self._state != "ready":
            raise RuntimeError(
                "this count_flops counter was already entered (a counter counts one `with` block); "
                "use a new torchscan.count_flops() for another count"
            )
        self._session.start()
        self._state = "counting"
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            # The block's exception propagates unchanged (returning None does not swallow it).
            self._state = "failed"
            self._session.abort()
            return
        try:
            self._uncalled = self._session.uncalled()
        except BaseException:
            self._state = "failed"
            self._session.abort()
            raise
        try:
            self._kept = self._session.keep()
            if self._kept is None:
                self._report = self._session.finish()
        except BaseException:
            self._state = "failed"
            raise
        self._state = "done"

    def report(self) -> FlopReport:
        """The FlopReport of the counted block (a fresh copy on each call).

        Raises:
            RuntimeError: the block has not been entered, has not exited yet, or raised.
        """
        if self._state == "done":
            if self._report is None:
                with hold(_FIRST_READ):  # two threads reading one counter build its report once
                    kept, self._kept = self._kept, None
                    if kept is not None:
                        self._report = kept_report(kept)
            if self._report is not None:
                report: FlopReport = parse_report(self._report)
                return _with_uncalled(report, self._uncalled)
        raise RuntimeError(_NO_REPORT[self._state])


_FIRST_READ = threading.Lock()


_NO_REPORT = {
    "ready": "count_flops has no report: nothing was counted yet (use `with torchscan.count_flops() as counter:`, "
    "then call counter.report() after the block)",
    "counting": "count_flops has no report while counting: call counter.report() after the `with` block exits",
    "failed": "count_flops has no report: the counted block (or finishing the count) raised an exception",
    "done": "count_flops has no report: building it failed (the first report() call raised the error)",
}


def count_flops(
    modules: nn.Module | Iterable[nn.Module] | None = None,
    custom_mapping: Mapping[Any, CustomFormula] | None = None,
    threads: Threads = "current",
) -> FlopCounter:
    """Counts the FLOPs of every operator dispatched inside a ``with`` block::

        with torchscan.count_flops() as counter:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
        report = counter.report()

    Args:
        modules: as in measure_flops: the root module(s) whose calls label ``by_module``.
        custom_mapping: as in measure_flops: ``{torch.ops.ns.op: formula}`` for this count only.
        threads: as in measure_flops: ``"current"`` or ``"all"``.

    Returns:
        A FlopCounter; after its block exits, ``counter.report()`` is the FlopReport (equal to
        what measure_flops reports for the same work). An exception raised in the block
        propagates unchanged, and the counting session and module hooks are removed either way.
    """
    return FlopCounter(modules=modules, custom_mapping=custom_mapping, threads=threads)


class _Uncalled(NamedTuple):
    """The modules of the named roots that hold parameters of their own, as listed after the
    workload (``named_modules()`` order): per module, the label ``by_module`` gives it and the
    labels of all its places; and whether the labels were read from frames."""

    modules: list[tuple[str, list[str]]]
    by_frames: bool


_WHOLE = (nn.MultiheadAttention,)
_UNINITIALIZED = (UninitializedParameter, UninitializedBuffer)


def _uncalled_candidates(roots: list[nn.Module], by_frames: bool) -> _Uncalled:
    """The modules below the named roots that could be listed as making no call, by
    ``crawl_module``'s rules (``_Recorder.uncalled``): they hold parameters of their own; a root
    is not listed, nor a module inside a ``MultiheadAttention`` or a root ``nn.Transformer``
    (their call takes the whole module), nor a lazy one whose tensors are uninitialized. Labels
    as the session named them (``_hooks.c`` ``name_tree``: each place of a module by its escaped
    attribute path under the root's class name, a ``torch.compile`` wrapper as the module it
    wraps; a module reached twice keeps its last name), so a module registered under two names
    is called when either label is."""
    places: dict[int, list[str]] = {}
    first: list[tuple[nn.Module, bool]] = []
    for root in roots:
        whole_root = isinstance(_compiled_original(root) or root, nn.Transformer)
        stack: list[tuple[nn.Module, str, bool, bool]] = [(root, _root_name(root), whole_root, True)]
        while stack:
            module, label, inside, is_root = stack.pop()
            original = _compiled_original(module)
            if original is not None:
                stack.append((original, label, inside, is_root))
                continue
            known = places.get(id(module))
            if known is None:
                places[id(module)] = [label]
                if not is_root:
                    first.append((module, inside))
            else:
                known.append(label)
            below = inside or isinstance(module, _WHOLE)
            children, seen = [], set()
            for key, child in module._modules.items():
                if child is None or not isinstance(key, str) or id(child) in seen:
                    continue
                seen.add(id(child))
                children.append((child, f"{label}.{escape_name(key)}", below, False))
            stack.extend(reversed(children))
    listed = []
    for module, inside in first:
        if inside or not any(p is not None for p in module._parameters.values()):
            continue
        tensors = [*module._parameters.values(), *module._buffers.values()]
        if any(isinstance(t, _UNINITIALIZED) for t in tensors):
            continue  # a lazy module: its size is unknown (crawl_module leaves it out too)
        labels = places[id(module)]
        listed.append((labels[-1], labels))
    return _Uncalled(listed, by_frames)


def _with_uncalled(report: FlopReport, uncalled: _Uncalled | None) -> FlopReport:
    """``report`` with ``uncalled_modules``: the listed modules that made no call (by hooks:
    none of their labels in ``by_module``, where every call has an entry, 0 when it ran no
    operator), or ran no operator (by frames, which cannot tell a call that ran no operator
    from no call: no entry for them and none for a module inside them)."""
    if uncalled is None or not uncalled.modules:
        return report
    keys = set(report["by_module"]) | set(report["by_module_status"])
    prefixes = sorted(keys) if uncalled.by_frames else []
    out = []
    for label, labels in uncalled.modules:
        if any(name in keys for name in labels):
            continue
        if uncalled.by_frames and any(_has_below(prefixes, f"{name}.") for name in labels):
            continue
        out.append(label)
    if out:
        report["uncalled_modules"] = out
    return report


def _has_below(sorted_keys: list[str], prefix: str) -> bool:
    """Whether a key of ``sorted_keys`` starts with ``prefix``."""
    at = bisect.bisect_left(sorted_keys, prefix)
    return at < len(sorted_keys) and sorted_keys[at].startswith(prefix)


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


def _config(modules: object, custom_mapping: object, threads: object) -> _Config:
    roots = _roots(modules)
    formulas = _formulas(custom_mapping)
    registered = {name: priced for name, priced in _registered_formulas().items() if name not in formulas}
    formulas.update(registered)
    if not isinstance(threads, str):
        raise TypeError(f'threads must be "current" or "all", got {type(threads).__name__}')
    if threads not in ("current", "all"):
        raise ValueError(f'threads must be "current" or "all", got {threads!r}')
    native: dict[str, Any] = {
        "torch_version": torch.__version__,
        "custom_operators": sorted(formulas),
        "registered_operators": sorted(registered),
        "threads": threads,
        "modules": "all" if roots is None else "named",
    }
    distributed = process_context()
    if distributed is not None:
        native["distributed"] = distributed
    return _Config(formulas, roots, _NATIVE_CONFIGS.get(native) or json.dumps(native))


class _NativeConfigs:
    """The native configuration of the common calls (no custom formulas), serialized once per
    threads, modules and place in a distributed job."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str, tuple[Any, ...] | None], str] = {}

    def get(self, native: dict[str, Any]) -> str | None:
        if native["custom_operators"]:
            return None
        place = native.get("distributed")
        where = None if place is None else (place["rank"], place["world_size"], place["backend"])
        key = (native["threads"], native["modules"], where)
        text = self._cache.get(key)
        if text is None:
            text = self._cache[key] = json.dumps(native)
        return text


_NATIVE_CONFIGS = _NativeConfigs()


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


# (the keys of torch.utils.flop_counter.flop_registry, the formulas taken from it) when last read.
_REGISTERED: tuple[tuple[Any, ...], dict[str, tuple[str, CustomFormula]]] = ((None,), {})


def _registered_formulas() -> dict[str, tuple[str, CustomFormula]]:
    """Formulas that libraries registered with PyTorch's flop counter
    (``torch.utils.flop_counter.register_flop_formula``) for operators outside ATen that the
    formula registry does not classify: such an operator is priced by its library's formula
    (category ``registered``) instead of being reported uncounted. ATen operators are the
    registry's alone. Read again whenever the flop counter's registry changes. A library that
    registers a formula imports the flop counter; until one has, there is nothing to read (and
    importing it here would cost every first measurement a fifth of a second)."""
    global _REGISTERED
    flop_counter = sys.modules.get("torch.utils.flop_counter")
    if flop_counter is None:
        return {}
    flop_registry = flop_counter.flop_registry
    keys = tuple(flop_registry)
    if _REGISTERED[0] == keys:
        return _REGISTERED[1]
    found: dict[str, tuple[str, CustomFormula]] = {}
    for key, formula in list(flop_registry.items()):
        if not isinstance(key, torch._ops.OpOverloadPacket):
            continue  # higher-order operators (flex attention) never reach the dispatcher as one call
        qualified = key._qualified_op_name
        if qualified.startswith("aten::") or ops.classify_operator(qualified)[0] != "unclassified":
            continue
        found[qualified] = (qualified.replace("::", ".", 1), _shape_formula(formula))
    _REGISTERED = (keys, found)
    return found


def _shape_formula(formula: Callable[..., int]) -> CustomFormula:
    """A flop-counter registry formula (``f(*args, out_val=...)``, whose shape wrapper reads
    shapes from tensors and passes anything else through) called as a custom formula is."""

    def priced(*shapes: Any, out_shape: Any = None) -> int:
        flops: int = formula(*shapes, out_val=out_shape)
        return flops

    return priced


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
