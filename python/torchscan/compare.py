"""compare_reports: the difference between two AnalysisReports, computed by the native core."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ._native import ops
from .report import ReportDiff

__all__ = ["compare_reports"]


# serde_json, which reads the encoded reports, refuses more than 128 levels; a tuple takes two.
# A report is a dozen levels deep: deeper is a malformed document or a cycle.
_MAX_DEPTH = 100


class _TooDeep(Exception):
    """Raised at the depth limit; each level on the way out adds its key, to name the field."""

    def __init__(self) -> None:
        super().__init__()
        self.path: list[str] = []


def _encode(value: Any, depth: int = 0) -> Any:
    """JSON for the core, keeping what JSON cannot say detectable (the core names the field)."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"\0float": repr(value)}
    if depth >= _MAX_DEPTH:
        raise _TooDeep
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            return {"\0nonstr": True}
        encoded: dict[str, Any] = {}
        key: Any = None
        try:
            for key, item in value.items():
                encoded[key] = _encode(item, depth + 1)
        except _TooDeep as error:
            error.path.append(f"[{key!r}]")
            raise
        return encoded
    if isinstance(value, (list, tuple)):
        step = 1 if isinstance(value, list) else 2
        items: list[Any] = []
        try:
            for item in value:
                items.append(_encode(item, depth + step))
        except _TooDeep as error:
            error.path.append(f"[{len(items)}]")
            raise
        return items if step == 1 else {"\0tuple": items}
    return {"\0type": type(value).__name__}


def _encode_report(report: Any, side: str) -> str:
    if isinstance(report, Mapping) and "totals" not in report and "total" in report and "by_operator" in report:
        raise ValueError(
            f"{side} is a FlopReport (from measure_flops), not an AnalysisReport: compare_reports compares "
            "AnalysisReports (from crawl_module or summary)"
        )
    try:
        return json.dumps(_encode(report))
    except _TooDeep as error:
        path = error.path[::-1]
        shown = "".join(path[:6]) + ("[...]" if len(path) > 6 else "")
        raise ValueError(
            f"{side}{shown} is nested too deeply (more than {_MAX_DEPTH} levels): a malformed report, or one that "
            "contains itself"
        ) from None


def compare_reports(before: Any, after: Any) -> ReportDiff:
    """Compares two reports (this package's or torchscan 0.2's) without modifying them.

    Totals are all diffed; layer calls match on ``(path, call_index)``: ``added``/``removed``
    carry the metrics of the unmatched calls, ``changed`` only the metrics that differ. A
    ``delta`` is a number only when both sides are complete; otherwise the worse status wins
    (a metric missing on one side is ``unavailable``).

    Raises:
        TypeError: a report (or one of its fields) has the wrong type; the message names it.
        ValueError: an invalid metric, a duplicated layer call, different or unknown schema
            versions, a metric whose unit/scope/method differs between the reports (a method may
            differ where one side has no number: ``not_applicable``, ``not_requested``), a
            FlopReport given for an AnalysisReport, or a document nested too deeply (a cycle).
    """
    diff: ReportDiff = json.loads(ops.compare_reports(_encode_report(before, "before"), _encode_report(after, "after")))
    return diff
