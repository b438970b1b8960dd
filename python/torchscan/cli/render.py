"""The `torchscan` command's rendering: the summary and totals of an analysis, the table of a
comparison, and JSON output."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from ..report import AnalysisReport, MetricResult, ReportDiff
from ..utils import format_flops, format_info

__all__ = ["STDOUT", "diff_text", "summary_text", "write_json"]

STDOUT = "-"


def number(value: int | float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.6g}"


def metric_text(metric: Mapping[str, Any] | None) -> str:
    """A MetricResult for people: the number when complete, `>= known` when partial (a lower
    bound, never a silent total), `unavailable` otherwise."""
    if metric is None:
        return "-"
    status = metric.get("status")
    if status == "complete":
        return number(metric["value"])
    if status == "partial":
        return f">= {number(metric['known_value'])}"
    if metric.get("method") == "not_requested":
        return "not requested"
    return "unavailable"


# The order people read totals in: size first, then compute; later additions sort after.
TOTAL_ORDER = (
    "parameters",
    "trainable_parameters",
    "frozen_parameters",
    "parameter_bytes",
    "buffer_elements",
    "buffer_bytes",
    "module_flops",
    "macs",
    "dmas",
    "operator_flops",
)


def ordered(names: Sequence[str] | Mapping[str, Any]) -> list[str]:
    rank = {name: i for i, name in enumerate(TOTAL_ORDER)}
    return sorted(names, key=lambda name: (rank.get(name, len(rank)), name))


def table(rows: list[list[str]], right: set[int]) -> list[str]:
    """Rows of cells as aligned text (numbers right-aligned), first row as the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def totals_text(report: AnalysisReport) -> str:
    totals: Mapping[str, MetricResult] = report["totals"]
    rows = [["Total", "Value", "Unit", "Status"]]
    for name in ordered(totals):
        metric = totals[name]
        rows.append([name, metric_text(metric), metric.get("unit", ""), metric.get("status", "")])
    lines = ["Totals (>= N: partial, a lower bound)", *(f"  {line}" for line in table(rows, {1}))]
    diagnostics = report.get("diagnostics", [])
    if diagnostics:
        lines.append(f"Diagnostics ({len(diagnostics)}):")
        for d in diagnostics:
            where = [f"metric {d['metric']}"]
            if "path" in d:
                where.insert(0, f"layer {d['path'] or '(root)'}")
            if "operator" in d:
                where.insert(0, f"operator {d['operator']}")
            lines.append(f"  {d['severity']}: {d['code']} ({', '.join(where)}): {d['message']}")
    return "\n".join(lines)


def summary_text(view: AnalysisReport, report: AnalysisReport, receptive_field: bool) -> str:
    """The layer table of ``view`` (the report limited to --max-depth), then the totals of the
    whole ``report``."""
    # The core sizes each column from its content up to a fixed cap, then narrows the name,
    # shape and type columns to the terminal's width; "mid" marks a shortened name with "[...]".
    width = shutil.get_terminal_size().columns
    return f"{format_info(view, 'mid', receptive_field, max_width=width)}\n{totals_text(report)}"


def flops_text(report: AnalysisReport, by: str, max_depth: int | None) -> str:
    """--flops-by: the operator FLOPs of the analysed forward (`operator_flops`) as a table."""
    width = shutil.get_terminal_size().columns
    table = format_flops(report["operator_flops"], by, max_depth=max_depth, max_width=width)  # type: ignore[arg-type]
    return f"Operator FLOPs by {by}:\n{table}"


def write_json(document: Mapping[str, Any], destination: str, out: TextIO) -> None:
    text = json.dumps(document, indent=2) + "\n"
    if destination == STDOUT:
        out.write(text)
    else:
        Path(destination).write_text(text)


def layer_name(entry: Mapping[str, Any]) -> str:
    path = entry["path"] or "(root)"
    # A module called more than once: its later calls are told apart by their call index.
    return f"{path} (call {entry['call_index']})" if entry["call_index"] else path


def delta_text(diff: Mapping[str, Any]) -> str:
    delta = diff.get("delta")
    if delta is None:
        return "?"
    return f"+{number(delta)}" if delta > 0 else number(delta)


def diff_row(name: str, metric: str, diff: Mapping[str, Any]) -> list[str]:
    before, after = metric_text(diff.get("before")), metric_text(diff.get("after"))
    return [name, metric, before, after, delta_text(diff), diff["status"]]


# What an added or removed layer call is summarised by: its FLOPs when it has them.
HEADLINE_METRICS = ("operator_flops", "module_flops", "calls")


def snapshot_row(entry: Mapping[str, Any], added: bool) -> list[str]:
    metrics = entry["metrics"]
    metric = next((m for m in HEADLINE_METRICS if m in metrics), None) or next(iter(ordered(metrics)), "")
    value = metric_text(metrics[metric]) if metric else "-"
    before, after = ("-", value) if added else (value, "-")
    status = metrics[metric]["status"] if metric else "-"
    return [
        f"{'+' if added else '-'} {layer_name(entry)}",
        metric,
        before,
        after,
        "added" if added else "removed",
        status,
    ]


def diff_text(diff: ReportDiff) -> str:
    header = ["Metric", "Before", "After", "Change", "Status"]
    totals = diff["totals"]
    shown = [name for name in ordered(totals) if totals[name].get("delta") != 0]
    inexact = sum(1 for name in shown if totals[name].get("delta") is None)
    lines = [f"Totals: {len(shown) - inexact} changed, {inexact} not exact, {len(totals) - len(shown)} unchanged"]
    if shown:
        rows = [header, *(diff_row("", name, totals[name])[1:] for name in shown)]
        lines += [f"  {line}" for line in table(rows, {1, 2, 3})]
    layers = diff["layers"]
    counts = {kind: len(layers[kind]) for kind in ("added", "removed", "changed")}
    lines.append(f"Layers: {counts['added']} added, {counts['removed']} removed, {counts['changed']} changed")
    rows = [["Layer", *header]]
    for entry in layers["changed"]:
        rows += [diff_row(layer_name(entry), m, entry["metrics"][m]) for m in ordered(entry["metrics"])]
    rows += [snapshot_row(entry, added=True) for entry in layers["added"]]
    rows += [snapshot_row(entry, added=False) for entry in layers["removed"]]
    if len(rows) > 1:
        lines += [f"  {line}" for line in table(rows, {2, 3, 4})]
    if inexact or any(row[4] == "?" for row in rows[1:]):
        lines.append("Change '?': not exact, because a side is partial (>= N, a lower bound) or unavailable.")
    return "\n".join(lines)
