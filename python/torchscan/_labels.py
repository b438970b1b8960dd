"""Module labels: which module's call each operator ran in (``by_module``), one mechanism for
eager calls, compiled graphs and every session of the process.

Names are given once per measurement: a root module by its class name, its submodules by dotted
attribute path (as PyTorch's ModuleTracker names them; a name holding a dot, a backslash or a lone
surrogate is escaped, ``_names.py``), sent to the native session with the
modules' identities. From then on every module call costs one native call at its start and one
at its end (``_hooks.c``): the session finds the label by identity and pushes or pops it. The
sessions labelling a thread's module calls are kept natively per thread, so calls on other
threads cost a lookup that finds nothing.

Labelling by frames (the default where the build supports it: CPython 3.11): instead of module
hooks, the native session reads, at each forward operator, which module calls are open on its
thread from the interpreter's frames (each frame running ``nn.Module._call_impl`` is one; the
walk is in ``_hooks.c``, ``src/host_frames.rs``). Module calls then cost nothing at all, and no
global hook changes how PyTorch or Dynamo runs a module. A module call that dispatches no operator
(an ``nn.Identity``) leaves no trace in the frames an operator sees: hooks list it in
``by_module`` with 0 FLOPs, frames do not. ``TORCHSCAN_MODULE_LABELS=hooks`` selects hooks.

Compiled code: a ``torch.compile`` wrapper takes the label of the module it wraps (eager and
compiled models are labelled alike). The global hooks are two module-level functions shared by
every session, which return at once while Dynamo traces them: no graph break, no guard on a
session's objects. Priced compiled graphs place their work by the module identities their nodes
carry (``_compiled.py``, ``src/session/priced.rs``), with the same names.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import Any, Protocol

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ._guards import Group, Guard
from ._names import escape_name
from ._native import ops

try:
    from . import _hooks
except ImportError as error:  # pragma: no cover - only on a broken install
    raise ImportError(
        "torchscan's module hooks extension (torchscan._hooks) is missing; install the package with "
        "`pip install --no-build-isolation .` from a source checkout"
    ) from error

__all__ = [
    "ModuleLabels",
    "Recorder",
    "compiled_runs",
    "enter_modules",
    "exit_modules",
    "labelling",
    "name_compiled_frame",
    "register",
    "start_labels",
]


def _root_name(module: nn.Module) -> str:
    original = _compiled_original(module)
    return escape_name(type(module if original is None else original).__name__)


def _compiled_original(module: nn.Module) -> nn.Module | None:
    """The module a ``torch.compile`` wrapper (``OptimizedModule``) runs, else ``None``."""
    # The type first: a missing attribute costs nn.Module.__getattr__ an exception.
    if type(module).__name__ != "OptimizedModule":
        return None
    original = getattr(module, "_orig_mod", None)
    return original if isinstance(original, nn.Module) else None


class ModuleLabels:
    """The module labels of one session, on the thread that opened it; they label calls while
    registered (``register("_labellers", labels)``).

    ``roots``: the modules whose calls are labelled (with their submodules); ``None`` labels every
    module the workload calls, each outermost one named by its class name when first called. The
    session must have been opened with ``"modules": "named"`` or ``"all"`` to match (from then
    on the native hooks of its thread reach it, until it closes). The named modules are held
    alive as long as this object (a freed module's identity could be reused by another object).
    """

    def __init__(self, handle: int, roots: list[nn.Module] | None) -> None:
        self._handle = handle
        self._thread = threading.get_ident()
        self._named: dict[int, nn.Module] = {}
        self._open_roots = roots is None
        for root in roots or []:
            self.name_root(root)

    @property
    def handle(self) -> int:
        return self._handle

    def name_root(self, root: nn.Module) -> None:
        """Names `root` and its submodules in the session (natively, one call): depth first,
        each child by its attribute name (as ``named_children``: once per parent, ``None``
        entries skipped); a module reached twice keeps the name it was given last."""
        self._named.update(_hooks.name_tree(self._handle, root, _root_name(root)))

    def name_unnamed(self, module: nn.Module, inside: bool | None = None) -> bool:
        """The first call of a module this session has not named (it labels every module): named
        as a root (the native hook then enters its call). A graph module called inside a labelled
        call (`inside`; by default, whether the session has a call open), or inside a priced
        compiled graph's run, is built by a compiler or a control-flow operator (AOTAutograd's
        forward and backward, torch.cond's branches): not one of the user's modules, it is
        passed over (False). One named since it was asked about (by frames, several calls open
        at one operator are asked about at once: naming the outer one named those in its tree)
        keeps its name."""
        if id(module) in self._named:
            return True
        if isinstance(module, torch.fx.GraphModule) and (
            (ops.open_module_calls(self._handle) if inside is None else inside) or getattr(compiled_runs, "depth", 0)
        ):
            return False
        self.name_root(module)
        return True

    def name_compiled_frame(self, modules: Iterable[nn.Module]) -> None:
        """A compiled graph that runs `modules` (the compiled frame's own) is about to run on this
        thread: with open roots, an unnamed one is named as eager mode's hook would have named it
        when called (a module compiled in place, or passed to a compiled function, runs no hook)."""
        if self._open_roots and threading.get_ident() == self._thread:
            for module in modules:
                if id(module) not in self._named:
                    self.name_root(module)

    def enter_modules(self, modules: list[int]) -> int:
        """The calls of `modules` (identities, outermost first) inside a compiled graph run node
        by node: each one this session named and has not open already is entered."""
        if threading.get_ident() != self._thread:
            return 0
        return int(ops.enter_modules(self._handle, modules))

    def exit_modules(self, count: int) -> None:
        if count:
            ops.exit_modules(self._handle, count)


# The open labellers of all threads (a tuple, replaced whole: readers iterate a snapshot); the
# two global hooks are installed while there is at least one labeller or recorder. Both tuples
# and the hooks change together, in one native step (`_hooks_group`, below), so that an
# interrupt cannot leave one without the other.
_labellers: tuple[ModuleLabels, ...] = ()
# The open labellers that label by frames (no hooks; a tuple replaced whole, in `_frames_group`).
_frame_labellers: tuple[ModuleLabels, ...] = ()


def labelling() -> bool:
    """Whether any session labels module calls now."""
    return bool(_labellers or _frame_labellers)


def _all_labellers() -> tuple[ModuleLabels, ...]:
    return _labellers + _frame_labellers if _frame_labellers else _labellers


def _name_unnamed(handle: int, module: nn.Module, inside: bool | None = None) -> bool:
    """Called natively for a session that has not named `module` (the pre-hook at its call, or
    the first operator of its call when labelling by frames): whether it is named now."""
    for labels in _all_labellers():
        if labels.handle == handle:
            return labels.name_unnamed(module, inside)
    return False


# Each frame running this code is a module call (what the frame walker looks for).
_CALL_IMPL_CODE = nn.Module._call_impl.__code__
_hooks.bind(ops.module_hooks(), _name_unnamed, nn.Module, escape_name, _CALL_IMPL_CODE)


def _frames_wanted() -> bool:
    choice = os.environ.get("TORCHSCAN_MODULE_LABELS", "")
    if choice not in ("", "frames", "hooks"):
        raise ValueError(f"TORCHSCAN_MODULE_LABELS must be 'frames' or 'hooks', got {choice!r}")
    # A `_call_impl` replaced since (a tool's wrapper) may not run the code the walker knows:
    # hooks then, which PyTorch's module-call path calls whatever wraps it.
    call_impl = getattr(nn.Module._call_impl, "__code__", None)
    return choice != "hooks" and call_impl is _CALL_IMPL_CODE and _hooks.frames_supported()


def start_labels(handle: int, roots: list[nn.Module] | None) -> tuple[Guard, bool]:
    """Labels the module calls of session `handle` (opened on this thread) from now on, until the
    guard is released: by frames where the build can and no call of a module it labels is open
    already (the frames would show a call the hooks never saw start); by hooks otherwise. The
    guard, and whether the labels are by frames (then a module call that runs no operator has
    no ``by_module`` entry)."""
    labels = ModuleLabels(handle, roots)
    if _frames_wanted():
        open_now = _hooks.open_modules()
        if not any(module in labels._named or roots is None for module in open_now) and _hooks.label_by_frames(handle):
            return Guard(_frames_group.add, _frames_group.remove, "_frame_labellers", labels), True
    return register("_labellers", labels), False


_native_pre = _hooks.pre
_native_post = _hooks.post

# Dynamo constant-folds this while tracing a hook, so the hook traces to nothing.
_is_compiling = torch.compiler.is_compiling


class Recorder(Protocol):
    """Python work per module call beside the labels (``crawl_module``'s layer records): called
    by the same two global hooks, after the native labels at a call's start and before them at
    its end."""

    def pre(self, module: nn.Module, args: tuple[Any, ...]) -> None: ...

    def post(self, module: nn.Module, args: tuple[Any, ...], *rest: Any) -> None: ...


# The recorders of all threads (a tuple, replaced whole, as `_labellers`).
_recorders: tuple[Recorder, ...] = ()


def register(kind: str, member: ModuleLabels | Recorder) -> Guard:
    """Adds `member` to ``_labellers`` or ``_recorders`` (`kind`), with the global hooks when it
    is the first; the guard's release (or its collection) takes it out again, with the hooks
    when it was the last."""
    return Guard(_hooks_group.add, _hooks_group.remove, kind, member)


# The hooks build no Python object when no recorder runs (measure_flops, count_flops): no
# iterator over an empty tuple, no tuple of variable arguments.
def _module_pre_hook(module: nn.Module, args: tuple[Any, ...]) -> None:
    if _is_compiling():
        return
    _native_pre(module, args)
    if _recorders:
        for recorder in _recorders:
            recorder.pre(module, args)


_NO_OUTPUT: Any = object()


def _module_post_hook(module: nn.Module, args: tuple[Any, ...], kwargs: Any, output: Any = _NO_OUTPUT) -> None:
    # (kwargs, output) normally; (output,) alone when PyTorch runs always-called hooks after the
    # forward raised.
    if _is_compiling():
        return
    if _recorders:
        rest = (kwargs,) if output is _NO_OUTPUT else (kwargs, output)
        for recorder in reversed(_recorders):
            recorder.post(module, args, *rest)
    _native_post(module, args)


# Dynamo guards a compiled frame on the keys of the global hook dicts. register_module_*_hook
# takes a new key each time, so every measurement would recompile the model; the hooks are put
# in under two keys reserved once (as register_module_forward_hook does, always_call=True).
_module_hooks = nn.modules.module
_PRE_HOOK_KEY = RemovableHandle(_module_hooks._global_forward_pre_hooks).id
_POST_HOOK_KEY = RemovableHandle(_module_hooks._global_forward_hooks).id


_hooks_group = Group(
    globals(),
    ("_labellers", "_recorders"),
    [
        (_module_hooks._global_forward_pre_hooks, _PRE_HOOK_KEY, _module_pre_hook),
        (_module_hooks._global_forward_hooks, _POST_HOOK_KEY, _module_post_hook),
        (_module_hooks._global_forward_hooks_always_called, _POST_HOOK_KEY, True),
        # The forward hook sees the call's keyword arguments (the recorders describe them).
        (_module_hooks._global_forward_hooks_with_kwargs, _POST_HOOK_KEY, True),
    ],
)


# Labelling by frames needs no hook: the group only keeps the labellers.
_frames_group = Group(globals(), ("_frame_labellers",), [])


# Per thread: how many priced compiled graphs are running (`_compiled._run_priced`).
compiled_runs = threading.local()


def enter_modules(modules: list[int]) -> list[tuple[ModuleLabels, int]]:
    """Enters, for every session labelling this thread, the calls of `modules` (identities,
    outermost first) that it named and that are not open already; what each entered (for
    exit_modules)."""
    return [(labels, labels.enter_modules(modules)) for labels in _all_labellers()]


def exit_modules(entered: list[tuple[ModuleLabels, int]]) -> None:
    for labels, count in reversed(entered):
        labels.exit_modules(count)


def name_compiled_frame(modules: Iterable[nn.Module]) -> None:
    """See ``ModuleLabels.name_compiled_frame``; for every open labeller."""
    for labels in _all_labellers():
        labels.name_compiled_frame(modules)


# Called as a frame of its own under Dynamo's frame callback (a module compiled in place whose
# own call Dynamo does not trace), a hook would be compiled, with `_is_compiling` folded to True:
# a hook that labels nothing. Dynamo runs these frames as they are; inlined into a traced call,
# they still trace to nothing.
def _run_hooks_as_written() -> None:
    from torch._dynamo.eval_frame import set_code_exec_strategy  # type: ignore[attr-defined]
    from torch._dynamo.types import FrameAction, FrameExecStrategy  # type: ignore[attr-defined]

    # SKIP for the frames they call too: a skipped frame's callees would be compiled otherwise.
    # The same for the naming that labelling by frames asks for from inside an operator, which
    # may run in an eager frame of a compiled region (where Dynamo's callback is set).
    for hook in (_module_pre_hook, _module_post_hook, _name_unnamed):
        set_code_exec_strategy(hook.__code__, FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))


_run_hooks_as_written()
