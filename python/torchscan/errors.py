"""Exceptions of the public API."""

from __future__ import annotations

from typing import Any

__all__ = ["IncompleteAnalysisError"]


class IncompleteAnalysisError(RuntimeError):
    """Raised by strict analyses when a requested metric is not complete; carries the report and
    the names of the incomplete metrics (``metrics``)."""

    def __init__(self, message: str, report: Any, metrics: list[str] | None = None) -> None:
        super().__init__(message)
        self.report = report
        self.metrics: list[str] = list(metrics or [])
