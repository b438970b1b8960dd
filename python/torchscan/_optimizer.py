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

from ._native import ops

__all__ = ["OPTIMIZER_STEP_BEGIN", "OPTIMIZER_STEP_END", "session_closed", "session_opened"]

# The core's reserved labels (src/session/mod.rs): pushed as scopes, read as marks.
OPTIMIZER_STEP_BEGIN = "\0optimizer_step_begin"
OPTIMIZER_STEP_END = "\0optimizer_step_end"


class _Open(threading.local):
    def __init__(self) -> None:
        self.handles: list[int] = []


_open = _Open()
_lock = threading.Lock()
_count = 0
_hooks: list[Any] = []


def _mark(label: str) -> None:
    if torch.compiler.is_compiling():
        return
    for handle in list(_open.handles):
        try:
            ops.push_scope(handle, label)
        except RuntimeError:  # a session an interrupt left listed: never the step's failure
            session_closed(handle)


def _begin(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    _mark(OPTIMIZER_STEP_BEGIN)


def _end(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    _mark(OPTIMIZER_STEP_END)


def session_opened(handle: int) -> None:
    """A session started counting on this thread: its optimizer steps are marked."""
    global _count
    _open.handles.append(handle)
    with _lock:
        _count += 1
        if _count == 1:
            _hooks[:] = [register_optimizer_step_pre_hook(_begin), register_optimizer_step_post_hook(_end)]


def session_closed(handle: int) -> None:
    """The session stopped counting (or was freed); once for each :func:`session_opened`."""
    global _count
    try:
        _open.handles.remove(handle)
    except ValueError:
        return
    with _lock:
        _count -= 1
        if _count == 0:
            for hook in _hooks:
                hook.remove()
            _hooks.clear()
