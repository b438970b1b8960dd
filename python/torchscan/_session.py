"""One native counting session on the current thread: the one lifecycle measure_flops,
count_flops and crawl_module share.

``start`` opens the session (and registers its module labels, when it labels); ``stop`` ends
the counting; then exactly one of ``end`` (a finishing native call that turns the session into a
report) or ``abort`` (nothing) frees it. Whatever raises, the labels are removed and no native
session is left behind; ``abort`` is safe at any point, and more than once.

The session and the labels' registration are each owned by a guard (``_guards.c``) from the
instant they exist: an interrupt that lands anywhere (between a native call and the line that
would have stored its result, on the last line of a ``finally``) cannot leak them; at worst they
are given back when this object is collected.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from ._guards import Guard
from ._labels import start_labels
from ._native import ops
from ._optimizer import session_closed, session_opened

__all__ = ["NativeSession", "kept_report"]

# The operators' C entry points: a guard calls them with no Python line in between.
_open = ops.open_session.default._op
_discard = ops.discard_session.default._op
_end_kept = ops.end_kept.default._op
_drop_kept = ops.drop_kept.default._op


class NativeSession:
    def __init__(self, config: str, *, labels: bool, roots: list[nn.Module] | None = None) -> None:
        """``config``: the session's configuration (JSON). ``labels``: register module labels for
        ``roots`` (``None``: every module called); crawl_module labels its calls itself."""
        self._config = config
        self._label = labels
        self._roots = roots
        self._marked = 0
        self._session: Guard | None = None
        self._registration: Guard | None = None
        self._closed = False
        #: Whether the module labels are read from the frames (else hooks); set by `start`.
        self.by_frames = False

    @property
    def handle(self) -> int:
        """The session's handle while this object owns it, else 0."""
        session = self._session
        return int(session.value) if session is not None and session.held else 0

    def start(self) -> None:
        self._session = Guard(_open, _discard, self._config)
        # Its optimizer steps are marked (the `optimizer` phase) until it stops counting.
        self._marked = self.handle
        session_opened(self._marked)
        if not self._label:
            return
        try:
            self._registration, self.by_frames = start_labels(self.handle, self._roots)
        except BaseException:
            self.abort()
            raise

    def stop(self) -> str:
        """Stops counting (labels first): the calls awaiting custom formulas, as JSON."""
        self._remove_labels()
        self._closed = True
        pending: str = ops.close_session(self.handle)
        return pending

    def end(self, finisher: Callable[[int], str]) -> str:
        """Frees the session through ``finisher(handle)``, which builds its report; stops counting
        first if :meth:`stop` was not called (then ``finisher`` must be one that closes too, like
        ``end_session``). The session is discarded if anything raises."""
        try:
            if not self._closed:
                self._remove_labels()
                self._closed = True
            report = finisher(self.handle)
        except BaseException:
            self.abort()
            raise
        session = self._session
        if session is not None:
            session.detach()  # freed by the finisher
        return report

    def keep(self) -> Guard:
        """Stops counting and keeps the session with its report unbuilt (a session without
        custom formulas): the guard holds its id among the kept sessions, for
        :func:`kept_report`, and frees it unread when released or collected. The session is
        discarded if anything raises."""
        try:
            if not self._closed:
                self._remove_labels()
                self._closed = True
            kept = Guard(_end_kept, _drop_kept, self.handle)
        except BaseException:
            self.abort()
            raise
        session = self._session
        if session is not None:
            session.detach()  # moved to the kept sessions
        return kept

    def abort(self) -> None:
        """Stops counting and frees the session without a report (the work raised)."""
        self._remove_labels()
        session, self._session = self._session, None
        if session is not None:
            session.release()

    def _remove_labels(self) -> None:
        marked, self._marked = self._marked, 0
        if marked:
            session_closed(marked)
        registration, self._registration = self._registration, None
        if registration is not None:
            registration.release()


def kept_report(kept: Guard) -> str:
    """The FlopReport (JSON) of the session :meth:`NativeSession.keep` kept, built now; the
    kept session is freed (the guard has nothing left to release)."""
    report: str = ops.kept_report(kept.value)
    kept.detach()
    return report
