"""measure_flops and count_flops: count the FLOPs of every operator a workload dispatches.

The counting happens natively (C++ observer, Rust core); Python only opens the session, labels
module calls through global module hooks, and prices calls of operators that the caller maps to
its own formulas (``custom_mapping``), after the workload has finished.
"""

from __future__ import annotations

import copy
import json
import operator
import threading
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Literal, NamedTuple, Protocol

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ._native import ops
from .report import FlopReport

__all__ = ["FlopCounter", "count_flops", "measure_flops"]

CustomFormula = Callable[..., int]
Threads = Literal["current", "all"]


class _Config(NamedTuple):
    """What a session is opened with: the caller's formulas by qualified operator name
    (``{name: (packet name, formula)}``) and the threads it counts."""

    formulas: dict[str, tuple[str, CustomFormula]]
    threads: Threads


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
            the outermost by its class name.
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
    roots = _roots(modules)
    config = _config(custom_mapping, threads)
    return count_operators(workload, lambda handle: _ModuleLabels(handle, roots), config)


class ScopeDriver(Protocol):
    """Installs what pushes and pops scopes into a session while the workload runs."""

    def install(self) -> None: ...

    def remove(self) -> None: ...


class _Session:
    """One native counting session on the current thread, with its scope driver.

    ``start`` opens the session and installs the driver; then exactly one of ``finish`` (the
    FlopReport) or ``abort`` (nothing) ends it. Both remove the driver and leave no native
    session behind, whatever raises. measure_flops and count_flops share this sequence.
    """

    def __init__(self, scopes: Callable[[int], ScopeDriver], config: _Config) -> None:
        self._scopes = scopes
        self._formulas = config.formulas
        self._threads = config.threads
        self._handle = 0
        self._driver: ScopeDriver | None = None

    def start(self) -> None:
        config = json.dumps(
            {"torch_version": torch.__version__, "custom_operators": sorted(self._formulas), "threads": self._threads}
        )
        self._handle = ops.open_session(config)
        try:
            self._driver = self._scopes(self._handle)
            self._driver.install()
        except BaseException:
            self.abort()
            raise

    def finish(self) -> FlopReport:
        """Stops counting and builds the report; custom formulas are priced only now, so that
        their own work is never counted as the workload's."""
        try:
            try:
                self._remove_driver()
            finally:
                pending = ops.close_session(self._handle)
            results = _price(json.loads(pending), self._formulas)
            report: FlopReport = json.loads(ops.finish_session(self._handle, json.dumps(results)))
        except BaseException:
            ops.discard_session(self._handle)
            raise
        return report

    def abort(self) -> None:
        """Stops counting and frees the session without a report (the work raised)."""
        try:
            self._remove_driver()
        finally:
            ops.discard_session(self._handle)

    def _remove_driver(self) -> None:
        driver, self._driver = self._driver, None
        if driver is not None:
            driver.remove()


def count_operators(
    workload: Callable[[], Any],
    scopes: Callable[[int], ScopeDriver],
    config: _Config,
) -> FlopReport:
    """One native counting session around ``workload()``, finished into its FlopReport.
    ``scopes(handle)`` builds the hooks that label the work (module labels for by_module)."""
    session = _Session(scopes, config)
    session.start()
    try:
        workload()
    except BaseException:
        session.abort()
        raise
    return session.finish()


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
        roots = _roots(modules)
        self._session = _Session(lambda handle: _ModuleLabels(handle, roots), _config(custom_mapping, threads))
        self._state: Literal["ready", "counting", "done", "failed"] = "ready"
        self._report: FlopReport | None = None

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
        if self._state == "done" and self._report is not None:
            return copy.deepcopy(self._report)
        raise RuntimeError(_NO_REPORT[self._state])


_NO_REPORT = {
    "ready": "count_flops has no report: nothing was counted yet (use `with torchscan.count_flops() as counter:`, "
    "then call counter.report() after the block)",
    "counting": "count_flops has no report while counting: call counter.report() after the `with` block exits",
    "failed": "count_flops has no report: the counted block (or finishing the count) raised an exception",
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


def _config(custom_mapping: object, threads: object) -> _Config:
    if not isinstance(threads, str):
        raise TypeError(f'threads must be "current" or "all", got {type(threads).__name__}')
    if threads not in ("current", "all"):
        raise ValueError(f'threads must be "current" or "all", got {threads!r}')
    return _Config(_formulas(custom_mapping), "all" if threads == "all" else "current")


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


def _root_name(module: nn.Module) -> str:
    original = _compiled_original(module)
    return type(module if original is None else original).__name__


# Dynamo constant-folds this while tracing a hook, so the hook traces to nothing.
_is_compiling = torch.compiler.is_compiling


def _compiled_original(module: nn.Module) -> nn.Module | None:
    """The module a ``torch.compile`` wrapper (``OptimizedModule``) runs, else ``None``."""
    # The type first: a missing attribute costs nn.Module.__getattr__ an exception.
    if type(module).__name__ != "OptimizedModule":
        return None
    original = getattr(module, "_orig_mod", None)
    return original if isinstance(original, nn.Module) else None


class _ModuleLabels:
    """Pushes a label per module call into the session, as PyTorch's ModuleTracker names them:
    the outermost module by its class name, its children by dotted attribute path.

    The hooks run on every module call, so they stay lean: labels are looked up by ``id`` (the
    modules are held alive in ``_names`` for the measurement only) and the native scope
    operators are bound once.

    Compiled code: a ``torch.compile`` wrapper takes the label of the module it wraps (eager and
    compiled models are labelled alike). The global hooks are two module-level functions shared
    by every session (see ``_module_pre_hook``) that return at once while Dynamo traces them, so
    they add no graph break, and no guard on a session's objects. Inside a compiled region Dynamo
    has inlined the submodules' calls, so the region's work goes to the compiled module's label.
    """

    _push = ops.push_scope.default
    _pop = ops.pop_scope.default

    def __init__(self, handle: int, roots: list[nn.Module] | None) -> None:
        self._handle = handle
        self._thread = threading.get_ident()
        self._names: dict[int, tuple[nn.Module, str]] = {}
        self._open_roots = roots is None
        self._stack: list[int] = []
        self._installed = False
        for root in roots or []:
            self._name_root(root)

    def _name_root(self, root: nn.Module) -> None:
        """Names `root` and its submodules, here and in the session (where compiled graphs that
        run them find their labels by module identity, see ``_compiled``)."""
        named: list[tuple[int, str]] = []
        self._name_tree(root, _root_name(root), named)
        ops.name_modules(self._handle, [m for m, _ in named], "\n".join(label for _, label in named))

    def _name_tree(self, module: nn.Module, name: str, named: list[tuple[int, str]]) -> None:
        self._names[id(module)] = (module, name)
        named.append((id(module), name))
        original = _compiled_original(module)
        if original is not None:
            self._name_tree(original, name, named)
            return
        for child_name, child in module.named_children():
            self._name_tree(child, f"{name}.{child_name}", named)

    def enter_modules(self, modules: list[int]) -> int:
        """The calls of `modules` (by identity, outermost first) inside a compiled graph run node
        by node: each one this labeller named and has not open already is pushed."""
        if threading.get_ident() != self._thread:
            return 0
        entered = 0
        for module in modules:
            entry = self._names.get(module)
            if entry is not None and module not in self._stack:
                self._push(self._handle, entry[1])
                self._stack.append(module)
                entered += 1
        return entered

    def exit_modules(self, count: int) -> None:
        for _ in range(count):
            self._stack.pop()
            self._pop(self._handle)

    def name_compiled_frame(self, modules: Iterable[nn.Module]) -> None:
        """A compiled graph that runs `modules` (the compiled frame's own) is about to run on this
        thread: with open roots, an unnamed one is named as eager mode's hook would have named it
        when called (a module compiled in place, or passed to a compiled function, runs no hook)."""
        if self._open_roots and threading.get_ident() == self._thread:
            for module in modules:
                if id(module) not in self._names:
                    self._name_root(module)

    def pre(self, module: nn.Module) -> None:
        if threading.get_ident() != self._thread:
            return
        entry = self._names.get(id(module))
        if entry is None:
            if not self._open_roots or (
                isinstance(module, torch.fx.GraphModule) and (self._stack or getattr(compiled_runs, "depth", 0))
            ):
                # A graph module called inside a labelled call that does not own it, or inside a
                # priced compiled graph's run, is built by a compiler or a control-flow operator
                # (AOTAutograd's forward and backward, torch.cond's branches): not one of the
                # user's modules.
                return
            self._name_root(module)
            entry = self._names[id(module)]
        self._push(self._handle, entry[1])
        self._stack.append(id(module))

    def post(self, module: nn.Module) -> None:
        if self._stack and self._stack[-1] == id(module) and threading.get_ident() == self._thread:
            self._stack.pop()
            self._pop(self._handle)

    def install(self) -> None:
        global _labellers
        with _hooks_lock:
            if not _labellers:
                _install_global_hooks()
            _labellers = (*_labellers, self)
            self._installed = True

    def remove(self) -> None:
        global _labellers
        with _hooks_lock:
            if self._installed:
                _labellers = tuple(labels for labels in _labellers if labels is not self)
                self._installed = False
                if not _labellers:
                    _remove_global_hooks()
        self._names.clear()


# The open labellers of all threads (a tuple, replaced whole: hooks iterate a snapshot); the two
# global hooks are installed while there is at least one.
_labellers: tuple[_ModuleLabels, ...] = ()
_hooks_lock = threading.Lock()

# Dynamo guards a compiled frame on the keys of the global hook dicts. register_module_*_hook
# takes a new key each time, so every measurement would recompile the model; the hooks are put
# in under two keys reserved once (as register_module_forward_hook does, always_call=True).
_module_hooks = nn.modules.module
_PRE_HOOK_KEY = RemovableHandle(_module_hooks._global_forward_pre_hooks).id
_POST_HOOK_KEY = RemovableHandle(_module_hooks._global_forward_hooks).id


def _install_global_hooks() -> None:
    _module_hooks._global_forward_pre_hooks[_PRE_HOOK_KEY] = _module_pre_hook
    _module_hooks._global_forward_hooks[_POST_HOOK_KEY] = _module_post_hook
    _module_hooks._global_forward_hooks_always_called[_POST_HOOK_KEY] = True


def _remove_global_hooks() -> None:
    _module_hooks._global_forward_pre_hooks.pop(_PRE_HOOK_KEY, None)
    _module_hooks._global_forward_hooks.pop(_POST_HOOK_KEY, None)
    _module_hooks._global_forward_hooks_always_called.pop(_POST_HOOK_KEY, None)


# Per thread: how many priced compiled graphs are running (`_compiled._run_priced`).
compiled_runs = threading.local()


def enter_modules(modules: list[int]) -> list[tuple[_ModuleLabels, int]]:
    """Pushes, for every labeller of this thread, the labels of `modules` (identities, outermost
    first) that it named and that are not open already; what each pushed (for exit_modules)."""
    return [(labels, labels.enter_modules(modules)) for labels in _labellers]


def exit_modules(entered: list[tuple[_ModuleLabels, int]]) -> None:
    for labels, count in reversed(entered):
        labels.exit_modules(count)


def name_compiled_frame(modules: Iterable[nn.Module]) -> None:
    """See ``_ModuleLabels.name_compiled_frame``; for every open labeller."""
    for labels in _labellers:
        labels.name_compiled_frame(modules)


def _module_pre_hook(module: nn.Module, args: Any) -> None:
    if _is_compiling():
        return
    for labels in _labellers:
        labels.pre(module)


def _module_post_hook(module: nn.Module, args: Any, output: Any) -> None:
    if _is_compiling():
        return
    for labels in reversed(_labellers):
        labels.post(module)


# Called as a frame of its own under Dynamo's frame callback (a module compiled in place whose
# own call Dynamo does not trace), a hook would be compiled, with `_is_compiling` folded to True:
# a hook that labels nothing. Dynamo runs these frames as they are; inlined into a traced call,
# they still trace to nothing.
def _run_hooks_as_written() -> None:
    from torch._dynamo.eval_frame import set_code_exec_strategy
    from torch._dynamo.types import FrameAction, FrameExecStrategy

    # SKIP for the frames they call too: a skipped frame's callees would be compiled otherwise.
    for hook in (_module_pre_hook, _module_post_hook):
        set_code_exec_strategy(hook.__code__, FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))


_run_hooks_as_written()
