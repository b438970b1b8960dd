"""The `optimizer` phase: torch.optim's global step hooks mark where each optimizer step starts
and ends in every counting session open on the stepping thread, and the core moves the work
counted between the marks out of `forward` into `by_phase["optimizer"]`.

The hooks (``torch.optim.optimizer.register_optimizer_step_pre_hook``/``post_hook``) are
installed while a session is open and removed with the last one: nothing runs per operator,
and an optimizer step outside any session runs no torchscan code. A step that raises runs no
post hook; its work stays in `forward` (the session is usually abandoned with it). Steps that
`torch.compile` traces are not marked (their work stays in `forward`, as before).
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from ._guards import hold
from ._native import ops

__all__ = ["OPTIMIZER_STEP_BEGIN", "OPTIMIZER_STEP_END", "session_closed", "session_opened"]

# The core's reserved labels (src/session/mod.rs): pushed as scopes, read as marks.
OPTIMIZER_STEP_BEGIN = "\0optimizer_step_begin"
OPTIMIZER_STEP_END = "\0optimizer_step_end"


# The sessions counting now, each with its thread (a step is marked in its own thread's sessions),
# and the two hooks, installed exactly while a session is listed. Both change under `_lock`, held
# by a guard (`_guards.c`): a `with lock:` that an interrupt hits on its last line skips
# `__exit__` and leaves the lock held, deadlocking the next session. Every change ends with
# `_sync`, so an interrupt between two lines leaves at worst a state the next call repairs.
_lock = threading.Lock()
_sessions: dict[int, int] = {}
_hooks: list[Any] = []


def _mark(label: str) -> None:
    if torch.compiler.is_compiling():
        return
    thread = threading.get_ident()
    for handle, owner in list(_sessions.items()):
        if owner != thread:
            continue
        try:
            ops.push_scope(handle, label)
        except RuntimeError:  # a session an interrupt left listed: never the step's failure
            session_closed(handle)


def _begin(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    _mark(OPTIMIZER_STEP_BEGIN)


def _end(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    _mark(OPTIMIZER_STEP_END)


def _sync() -> None:
    """The hooks installed while a session is listed, removed when none is (under `_lock`)."""
    if _sessions:
        if not _hooks:
            _hooks.append(register_optimizer_step_pre_hook(_begin))
        if len(_hooks) == 1:
            _hooks.append(register_optimizer_step_post_hook(_end))
    while not _sessions and _hooks:
        _hooks.pop().remove()


def session_opened(handle: int) -> None:
    """A session started counting on this thread: its optimizer steps are marked."""
    with hold(_lock):
        _sessions[handle] = threading.get_ident()
        _sync()


def session_closed(handle: int) -> None:
    """The session stopped counting (or was freed); once or more for each :func:`session_opened`."""
    with hold(_lock):
        _sessions.pop(handle, None)
        _sync()
