"""One native counting session on the current thread: the one lifecycle measure_flops,
count_flops and crawl_module share.

``start`` opens the session (and installs its module labels, when it labels); ``stop`` ends
the counting; then exactly one of ``end`` (a finishing native call that turns the session into a
report) or ``abort`` (nothing) frees it. Whatever raises, the labels are removed and no native
session is left behind; ``abort`` is safe at any point, and more than once.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from ._labels import ModuleLabels
from ._native import ops

__all__ = ["NativeSession"]


class NativeSession:
    def __init__(self, config: str, *, labels: bool, roots: list[nn.Module] | None = None) -> None:
        """``config``: the session's configuration (JSON). ``labels``: install module labels for
        ``roots`` (``None``: every module called); crawl_module labels its calls itself."""
        self._config = config
        self._label = labels
        self._roots = roots
        self.handle = 0
        self._closed = False
        self._labels: ModuleLabels | None = None

    def start(self) -> None:
        self.handle = ops.open_session(self._config)
        if not self._label:
            return
        try:
            self._labels = ModuleLabels(self.handle, self._roots)
            self._labels.install()
        except BaseException:
            self.abort()
            raise

    def stop(self) -> str:
        """Stops counting (labels first): the calls awaiting custom formulas, as JSON."""
        try:
            self._remove_labels()
        finally:
            self._closed = True
            pending: str = ops.close_session(self.handle)
        return pending

    def end(self, finisher: Callable[[int], str]) -> str:
        """Frees the session through ``finisher(handle)``, which builds its report; stops counting
        first if :meth:`stop` was not called (then ``finisher`` must be one that closes too, like
        ``end_session``). The session is discarded if anything raises."""
        try:
            if self._closed:
                report = finisher(self.handle)
            else:
                try:
                    self._remove_labels()
                finally:
                    self._closed = True
                    report = finisher(self.handle)
        except BaseException:
            self.abort()
            raise
        self.handle = 0
        return report

    def abort(self) -> None:
        """Stops counting and frees the session without a report (the work raised)."""
        try:
            self._remove_labels()
        finally:
            handle, self.handle = self.handle, 0
            if handle:
                ops.discard_session(handle)

    def __del__(self) -> None:
        # A session whose owner is collected without ending it (a counter entered and dropped, a
        # generator never closed) is freed, on whatever thread the collector runs (the native
        # layer discards another thread's session there).
        if self.handle:
            try:
                self.abort()
            except Exception:
                pass

    def _remove_labels(self) -> None:
        labels, self._labels = self._labels, None
        if labels is not None:
            labels.remove()
