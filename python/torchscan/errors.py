"""Exceptions of the public API."""

from __future__ import annotations

from typing import Any

__all__ = ["IncompleteAnalysisError"]


class IncompleteAnalysisError(RuntimeError):
    """Raised by strict analyses when a requested metric is not complete; carries the report."""

    def __init__(self, message: str, report: Any) -> None:
        super().__init__(message)
        self.report = report
