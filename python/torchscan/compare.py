"""compare_reports: the difference between two AnalysisReports, computed by the native core."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ._native import ops
from .report import ReportDiff

__all__ = ["compare_reports"]


def _encode(value: Any) -> Any:
    """JSON for the core, keeping what JSON cannot say detectable (the core names the field)."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"\0float": repr(value)}
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            return {"\0nonstr": True}
        return {key: _encode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_encode(item) for item in value]
    if isinstance(value, tuple):
        return {"\0tuple": [_encode(item) for item in value]}
    return {"\0type": type(value).__name__}


def compare_reports(before: Any, after: Any) -> ReportDiff:
    """Compares two reports (this package's or torchscan 0.2's) without modifying them.

    Totals are all diffed; layer calls match on ``(path, call_index)``: ``added``/``removed``
    carry the metrics of the unmatched calls, ``changed`` only the metrics that differ. A
    ``delta`` is a number only when both sides are complete; otherwise the worse status wins
    (a metric missing on one side is ``unavailable``).

    Raises:
        TypeError: a report (or one of its fields) has the wrong type; the message names it.
        ValueError: an invalid metric, a duplicated layer call, different or unknown schema
            versions, or a metric whose unit/scope/method differs between the reports.
    """
    return json.loads(ops.compare_reports(json.dumps(_encode(before)), json.dumps(_encode(after))))
