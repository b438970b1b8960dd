"""torch.compile's inductor backend: work the observer cannot see, made visible.

Inductor turns pointwise, reduction, normalization and pooling work into generated kernels that
never pass the dispatcher, so no RecordFunction event reports them. Each run of such a graph is
marked with one ``torchscan.inductor_graph`` event, which every session observing the thread
reports as uncounted compiled code (``uncounted_compiled_code``): the total is ``partial``, never
a silent undercount. The operators a compiled graph still dispatches (matrix products,
convolutions) are counted as usual.

The tracing torch.compile does on fake tensors is not counted either (the observer recognises
fake-tensor propagation), so eager-backend and aot_eager-backend runs count exactly what eager
mode counts, from the first call.

The mark is a wrapper around ``CompiledFxGraph.__call__`` (and ``CompiledAOTI.__call__``),
installed when ``torch._inductor.output_code`` is imported (now, or later through an import
hook), so that graphs compiled before a measurement started are marked too.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from ._native import ops

_OUTPUT_CODE = "torch._inductor.output_code"
_WRAPPED = "__torchscan_marks_runs__"
_lock = threading.Lock()


def _mark_runs(call: Callable[[Any, Sequence[Any]], Any]) -> Callable[[Any, Sequence[Any]], Any]:
    mark = ops.inductor_graph.default

    @functools.wraps(call)
    def __call__(self: Any, inputs: Sequence[Any]) -> Any:
        mark()
        return call(self, inputs)

    setattr(__call__, _WRAPPED, True)
    return __call__


def _wrap(module: ModuleType) -> None:
    with _lock:
        for name in ("CompiledFxGraph", "CompiledAOTI"):
            cls = getattr(module, name, None)
            call = vars(cls).get("__call__") if isinstance(cls, type) else None
            if call is not None and not getattr(call, _WRAPPED, False):
                cls.__call__ = _mark_runs(call)  # type: ignore[method-assign]


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Wraps the inductor classes right after their module is first executed."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != _OUTPUT_CODE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_and_wrap(module: ModuleType) -> None:
            exec_module(module)
            _wrap(module)

        loader.exec_module = exec_and_wrap  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Marks inductor graph runs from now on (idempotent)."""
    module = sys.modules.get(_OUTPUT_CODE)
    if module is not None:
        _wrap(module)
    elif not any(isinstance(finder, _WrapOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WrapOnImport())
