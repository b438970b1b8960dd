"""compare_reports: the difference between two AnalysisReports, computed by the native core."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from . import _wire as _encoder
from ._native import ops
from ._parse import parse_report
from .report import ReportDiff

__all__ = ["compare_reports"]

# The one schema version this package reads and writes (torchscan 0.2's too).
_SUPPORTED = 1
_I64 = range(-(2**63), 2**63)
_METRIC_NUMBERS = ("value", "known_value")
_METRIC_TEXTS = ("unit", "scope", "method")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _mapping(value: object, location: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{location} must be a mapping")
    return value


def _unicode(text: str, location: str) -> str:
    """`text`, unless it holds a lone surrogate, which no JSON reader takes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{location} is not valid Unicode (a lone surrogate at position {error.start})") from None
    return text


def _named(value: object, location: str) -> Mapping[str, Any]:
    """A mapping whose keys are names (totals, a layer's metrics)."""
    mapping = _mapping(value, location)
    if not all(isinstance(key, str) for key in mapping):
        raise TypeError(f"{location} keys must be strings")
    for key in mapping:
        _unicode(key, f"{location} key {key!r}")
    return mapping


def _number(value: object, location: str) -> int | float | None:
    if value is None or _is_int(value):
        return value  # type: ignore[return-value]
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{location} must be a finite number or None")
        return value
    raise TypeError(f"{location} must be a number or None")


def _metric(value: object, location: str) -> dict[str, Any]:
    """The fields of a metric that the comparison reads, type-checked; the core checks their
    meaning (required fields, status, the status invariant) in the order it always has."""
    metric = _mapping(value, location)
    wire: dict[str, Any] = {}
    if "status" in metric:
        status = metric["status"]
        # Any other object (or a text no status spells) is not a status: the core says which are.
        wire["status"] = status if isinstance(status, str) and status.isascii() else None
    for field in _METRIC_NUMBERS:
        if field in metric:
            wire[field] = _number(metric[field], f"{location}[{field!r}]")
    for field in _METRIC_TEXTS:
        if field in metric:
            if not isinstance(metric[field], str):
                raise TypeError(f"{location}[{field!r}] must be a string")
            wire[field] = _unicode(metric[field], f"{location}[{field!r}]")
    return wire


def _metrics(value: object, location: str) -> dict[str, Any]:
    return {name: _metric(metric, f"{location}[{name!r}]") for name, metric in _named(value, location).items()}


def _layer(value: object, location: str) -> dict[str, Any]:
    layer = _mapping(value, location)
    path = layer.get("path")
    if not isinstance(path, str):
        raise TypeError(f"{location}['path'] must be a string")
    _unicode(path, f"{location}['path']")
    call_index = layer.get("call_index")
    if not _is_int(call_index):
        raise TypeError(f"{location}['call_index'] must be an integer")
    if call_index not in _I64:
        raise ValueError(f"{location}['call_index'] is out of range, got {call_index}")
    return {"path": path, "call_index": call_index, "metrics": _metrics(layer.get("metrics"), f"{location}['metrics']")}


def _version(report: Mapping[Any, Any], side: str) -> int:
    version = report.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version not in _I64:
        raise TypeError(f"{side}['schema_version'] must be an integer")
    return version


def _checked_wire(report: Mapping[Any, Any], side: str) -> str:
    """The comparison's input document: only the fields it reads (the schema version, the totals,
    and each layer call's path, index and metrics), as plain JSON, each field checked and any
    problem named by its location. Everything else a report holds (context, inputs,
    diagnostics) does not enter the comparison, whatever it contains."""
    totals = _metrics(report.get("totals"), f"{side}['totals']")
    layers = report.get("layers")
    if not isinstance(layers, list):
        raise TypeError(f"{side}['layers'] must be a list")
    document = {
        "schema_version": report["schema_version"],
        "totals": totals,
        "layers": [_layer(layer, f"{side}['layers'][{i}]") for i, layer in enumerate(layers)],
    }
    return json.dumps(document, allow_nan=False, check_circular=False)


def _wire(report: Mapping[Any, Any], side: str) -> str:
    """A report of plain data (every report this package writes, and one read back with
    ``json.load``) is encoded by the C extension at C speed; anything else, by the walker that
    names what is wrong."""
    encoded = _encoder.encode(report)
    return encoded if encoded is not None else _checked_wire(report, side)


def _report(value: object, side: str) -> Mapping[Any, Any]:
    report = _mapping(value, side)
    if "totals" not in report and "total" in report and "by_operator" in report:
        raise ValueError(
            f"{side} is a FlopReport (from measure_flops), not an AnalysisReport: compare_reports compares "
            "AnalysisReports (from crawl_module or summary)"
        )
    return report


def compare_reports(before: Any, after: Any) -> ReportDiff:
    """Compares two reports (this package's or torchscan 0.2's) without modifying them.

    Totals are all diffed; layer calls match on ``(path, call_index)``: ``added``/``removed``
    carry the metrics of the unmatched calls, ``changed`` only the metrics that differ. A
    ``delta`` is a number only when both sides are complete; otherwise the worse status wins
    (a metric missing on one side is ``unavailable``). A metric measured differently by the two
    reports (another unit, scope or method: the operator FLOPs of a torchscan 0.2 report against
    one of this version) is torchscan 0.2's ``ValueError`` ("incompatible method for metric
    'operator_flops' of the totals: ...") when both sides have a number; when one side has
    none, it is ``unavailable`` in the diff, with a ``reason`` saying why.

    The schema versions are checked first: reports of different versions are not read further.

    Raises:
        TypeError: a report (or one of its fields) has the wrong type; the message names it.
        ValueError: an invalid metric, a metric measured differently on the two sides
            (``incompatible unit|scope|method ...``), a duplicated layer call, different or
            unknown schema versions, or a FlopReport given for an AnalysisReport.
    """
    reports = _report(before, "before"), _report(after, "after")
    versions = _version(reports[0], "before"), _version(reports[1], "after")
    if versions[0] != versions[1]:
        raise ValueError(f"schema versions differ: {versions[0]} != {versions[1]}")
    if versions[0] != _SUPPORTED:
        raise ValueError(f"unsupported schema version: {versions[0]}")
    diff: ReportDiff = parse_report(ops.compare_reports(_wire(reports[0], "before"), _wire(reports[1], "after")))
    return diff
