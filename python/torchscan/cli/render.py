"""The `torchscan` command's rendering: the summary and totals of an analysis, the table of a
comparison, and JSON and CSV output."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from .._diagnostics import group_diagnostics
from ..process import MemoryStats
from ..report import AnalysisReport, MetricResult, ReportDiff, TrainingStepReport
from ..utils import call_order, format_flops, format_info
from .training import TrainingStep

__all__ = [
    "STDOUT",
    "diff_text",
    "flops_text",
    "memory_text",
    "summary_text",
    "training_report",
    "training_text",
    "write_csv",
    "write_json",
]

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


# What each total measures, beside its value in the command's totals.
TOTAL_MEANINGS = {
    "parameters": "parameter elements",
    "trainable_parameters": "parameters with requires_grad",
    "frozen_parameters": "parameters without requires_grad",
    "parameter_bytes": "parameter storage",
    "buffer_elements": "buffer elements (running statistics, masks...)",
    "buffer_bytes": "buffer storage",
    "module_flops": "FLOPs by per-module formulas (torchscan 0.2's method)",
    "macs": "multiply-accumulates by per-module formulas",
    "dmas": "memory accesses by per-module formulas",
    "operator_flops": "FLOPs of the operators that ran (the FLOPs column)",
    "effective_macs": "MACs of the weights pruning masks keep",
    "effective_parameters": "parameters pruning masks keep",
}


def totals_text(report: AnalysisReport) -> str:
    totals: Mapping[str, MetricResult] = report["totals"]
    rows = [["Total", "Value", "Unit", "Status", "Measures"]]
    for name in ordered(totals):
        metric = totals[name]
        row = [
            name,
            metric_text(metric),
            metric.get("unit", ""),
            metric.get("status", ""),
            TOTAL_MEANINGS.get(name, ""),
        ]
        rows.append(row)
    lines = ["Totals (>= N: partial, a lower bound)", *(f"  {line}" for line in table(rows, {1}))]
    lines += diagnostics_lines(report.get("diagnostics", []))
    return "\n".join(lines)


# Layers listed by name for one grouped diagnostic; the rest are counted.
LISTED_LAYERS = 3


def diagnostics_lines(diagnostics: Sequence[Mapping[str, Any]]) -> list[str]:
    """The diagnostics, one line per distinct (severity, code, message): a module type without
    formulas in 24 layers is one line naming its metrics and a few of the layers, not 72."""
    groups = group_diagnostics(diagnostics)
    if not groups:
        return []
    lines = [f"Diagnostics ({len(diagnostics)}, {len(groups)} distinct):"]
    for (severity, code, message), where in groups.items():
        parts = []
        if where["operator"]:
            parts.append(f"operator {', '.join(printable(o) for o in where['operator'])}")
        paths = [printable(p) or "(root)" for p in where["path"]]
        if paths:
            listed = ", ".join(paths[:LISTED_LAYERS])
            more = f" and {len(paths) - LISTED_LAYERS} more" if len(paths) > LISTED_LAYERS else ""
            parts.append(f"{'layers' if len(paths) > 1 else 'layer'} {listed}{more}")
        parts.append(f"{'metrics' if len(where['metric']) > 1 else 'metric'} {', '.join(where['metric'])}")
        lines.append(f"  {severity}: {code} ({'; '.join(parts)}): {printable(message)}")
    return lines


def printable(text: str) -> str:
    """`text` without raw control characters (a layer name can hold an escape sequence)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def summary_text(report: AnalysisReport, max_depth: int | None, receptive_field: bool, width: int | None) -> str:
    """The detailed layer table of ``report`` down to ``max_depth``, then its totals. With
    ``width`` (a terminal's, or --width) the name, shape and type columns narrow to fit it;
    "mid" marks a shortened name with "[...]"."""
    # Without a width (a file or a pipe) nothing is cut.
    wrap = "mid" if width is not None else None
    table_text = format_info(report, wrap, receptive_field, max_width=width, max_depth=max_depth)
    return f"{table_text}\n{totals_text(report)}"


def flops_text(report: AnalysisReport, by: str, max_depth: int | None, width: int | None) -> str:
    """--flops-by: the operator FLOPs of the analysed forward (`operator_flops`) as a table."""
    flops = report["operator_flops"]
    table = format_flops(flops, by, max_depth=max_depth, max_width=width, call_order=call_order(report))  # type: ignore[arg-type]
    return f"Operator FLOPs by {by}:\n{table}"


def megabytes(count: int) -> str:
    return f"{count / 1e6:,.2f} MB"


def memory_text(stats: MemoryStats, what: str) -> str:
    """A peak memory measurement, in MB (10^6 bytes), with the exact byte count."""
    # The CPU keeps no count of what was allocated before (baseline 0): nothing to say "above".
    before = f" above the {megabytes(stats['baseline_bytes'])} held before" if stats["baseline_bytes"] else ""
    return f"  {what}: {megabytes(stats['delta_bytes'])} ({stats['delta_bytes']:,} bytes){before}; {stats['metric']}"


# The phases of a training step, in the order they run.
PHASES = ("forward", "backward", "optimizer")


def training_phases(step: TrainingStep) -> list[tuple[str, str, Mapping[str, Any]]]:
    """The step's phases in the order they run, then its total: (key, name, MetricResult)."""
    phases = step.flops["by_phase"]
    names = {"optimizer": f"optimizer step ({step.optimizer_name})"}
    rows = [(key, names.get(key, key), phases[key]) for key in PHASES if key in phases]
    return [*rows, ("total", "total", step.flops["total"])]


def training_report(step: TrainingStep) -> TrainingStepReport:
    """The step as the AnalysisReport's `training` (schema: TrainingStep)."""
    document: TrainingStepReport = {"optimizer": step.optimizer_name, "flops": step.flops}
    if step.memory is not None:
        document["memory"] = dict(step.memory)
    return document


def training_text(step: TrainingStep, width: int | None, by: str | None) -> str:
    """--train: the step's FLOPs by phase (forward, backward, optimizer step) and in total."""
    rows: list[list[str]] = [["Phase", "FLOPs", "Status"]]
    for _, name, metric in training_phases(step):
        rows.append([name, metric_text(metric), metric["status"]])
    lines = [
        "Training step (--train: forward in training mode, loss, backward, optimizer step)",
        *(f"  {line}" for line in table(rows, {1})),
    ]
    lines += diagnostics_lines(step.flops["diagnostics"])
    if by is not None:
        lines += ["", f"Training step FLOPs (forward, backward and optimizer) by {by}:"]
        lines.append(format_flops(step.flops, by, max_width=width))  # type: ignore[arg-type]
    if step.memory is not None:
        lines += ["Peak memory of the training step (a second step, counted apart):"]
        lines.append(memory_text(step.memory, f"step on {step.memory['device']}"))
    return "\n".join(lines)


def _write(text: str, destination: str, out: TextIO) -> None:
    if destination == STDOUT:
        out.write(text)
    else:
        Path(destination).write_text(text, encoding="utf-8")


# The CSV's metric columns: each layer call's value (empty when the layer has no such metric),
# and its status beside the operator FLOPs.
CSV_METRICS = ("operator_flops", "module_flops", "macs", "dmas", "receptive_field")


def _cell(metric: Mapping[str, Any] | None) -> str:
    """A metric as a CSV cell: the value when complete, the known lower bound when partial."""
    if metric is None:
        return ""
    value = metric.get("value") if metric.get("status") == "complete" else metric.get("known_value")
    return "" if value is None else str(value)


def _shape(meta: Mapping[str, Any] | None) -> str:
    if meta is None:
        return ""
    if meta.get("kind") == "tensor":
        return "x".join(str(d) for d in meta["shape"]) or "scalar"
    items = meta.get("items")
    if isinstance(items, list):
        inner = [_shape(item.get("value", item)) if isinstance(item, Mapping) else "" for item in items]
        return "(" + ", ".join(inner) + ")"
    return str(meta.get("kind", ""))


def write_csv(report: AnalysisReport, destination: str, out: TextIO) -> None:
    """The layer table as CSV: one row per layer call, full paths and exact numbers, then one
    per module never called that holds parameters (`_uncalled_rows`)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        [
            "path",
            "call_index",
            "depth",
            "type",
            "output_shape",
            "parameters",
            "trainable_parameters",
            "buffers",
            *CSV_METRICS,
            "operator_flops_status",
            "memory_bytes",
        ]
    )
    for layer in report["layers"]:
        params = layer["parameters"]
        trainable, frozen = params.get("trainable"), params.get("frozen")
        owned = trainable + frozen if trainable is not None and frozen is not None else ""
        metrics = layer["metrics"]
        flops = metrics.get("operator_flops")
        writer.writerow(
            [
                layer["path"],
                layer["call_index"],
                layer["depth"],
                layer["type"],
                _shape(layer.get("output")),
                owned,
                "" if trainable is None else trainable,
                "" if layer["buffers"].get("elements") is None else layer["buffers"]["elements"],
                *(_cell(metrics.get(name)) for name in CSV_METRICS),
                "" if flops is None else flops.get("status", ""),
                "",
            ]
        )
    for row in _uncalled_rows(report):
        writer.writerow(row)
    for row in _run_rows(report):
        writer.writerow(row)
    _write(buffer.getvalue(), destination, out)


def _uncalled_rows(report: AnalysisReport) -> list[list[object]]:
    """A row per module that holds parameters and was never called (the report's
    `uncalled_modules`, in `named_modules()` order), after the layer calls: `call_index` empty
    (no call), no output shape, the tensors it holds that no call counted, operator FLOPs 0
    with status `complete` as the table shows them (both empty in structure mode, where no
    operator is counted), the other metrics empty (a module's estimates are of a call)."""
    counted = report["operator_flops"]["context"].get("method") != "not_requested"
    flops, status = (0, "complete") if counted else ("", "")
    blank = [""] * (len(CSV_METRICS) - 1)
    rows: list[list[object]] = []
    for module in report.get("uncalled_modules", []):
        params = module["parameters"]
        trainable, frozen = params.get("trainable"), params.get("frozen")
        owned = trainable + frozen if trainable is not None and frozen is not None else ""
        elements = module["buffers"].get("elements")
        rows.append(
            [
                module["path"],
                "",
                module["depth"],
                module["type"],
                "",
                owned,
                "" if trainable is None else trainable,
                "" if elements is None else elements,
                flops,
                *blank,
                status,
                "",
            ]
        )
    return rows


def _run_rows(report: AnalysisReport) -> list[list[object]]:
    """The run's other results after the layer calls: a `training_step` row per phase of the
    --train step and its total (operator FLOPs), a `peak_memory` row per --memory measurement
    (memory_bytes: the bytes held above the baseline, `delta_bytes`)."""
    blank = [""] * (len(CSV_METRICS) - 1)
    rows: list[list[object]] = []
    training = report.get("training")
    if training is not None:
        flops = training["flops"]
        phases = [(name, flops["by_phase"][name]) for name in PHASES if name in flops["by_phase"]]
        for name, metric in [*phases, ("total", flops["total"])]:
            rows.append([name, "", "", "training_step", "", "", "", "", _cell(metric), *blank, metric["status"], ""])
    measured = [("forward", report.get("memory"))]
    if training is not None:
        measured.append(("training_step", training.get("memory")))
    for name, stats in measured:
        if stats is not None:
            rows.append([name, "", "", "peak_memory", "", "", "", "", "", *blank, "", stats["delta_bytes"]])
    return rows


def write_json(document: Mapping[str, Any], destination: str, out: TextIO) -> None:
    _write(json.dumps(document, indent=2) + "\n", destination, out)


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


def _bytes_cell(traffic: Mapping[str, Any] | None) -> list[str]:
    if traffic is None:
        return ["0", "0", "0"]
    mark = "" if traffic.get("status", "complete") == "complete" else ">= "
    return [number(traffic["calls"]), mark + number(traffic["bytes_sent"]), mark + number(traffic["bytes_received"])]


def merged_text(merged: Mapping[str, Any]) -> str:
    """A MergedReport for people: the job's totals, one row per rank, the imbalance."""
    context = merged["context"]
    lines = [
        f"Job: {context['world_size']} rank(s)" + (f", backend {context['backend']}" if context.get("backend") else ""),
        f"  FLOPs (all ranks): {metric_text(merged['total'])}",
    ]
    communication = merged.get("communication")
    if communication is not None:
        calls, sent, received = _bytes_cell(communication)
        lines.append(f"  Collectives (all ranks): {calls} call(s), {sent} bytes sent, {received} bytes received")
    timed = merged.get("throughput")
    if timed is not None:
        rate = timed["flops_per_second"]
        shown = rate["value"] if rate["status"] == "complete" else rate["known_value"]
        mark = "" if rate["status"] == "complete" else ">= "
        lines.append(f"  FLOP/s (job): {mark + number(shown) if shown is not None else 'unavailable'}")
        mfu = timed["mfu"]
        if mfu["status"] != "unavailable":
            value = mfu["value"] if mfu["status"] == "complete" else mfu["known_value"]
            lines.append(f"  MFU (job): {'' if mfu['status'] == 'complete' else '>= '}{value:.2%}")
    header = ["Rank", "FLOPs", "Calls", "Bytes sent", "Bytes received"]
    if timed is not None:
        header.append("Seconds")
    rows = [header]
    for rank in merged["ranks"]:
        row = [str(rank["rank"]), metric_text(rank["flops"]), *_bytes_cell(rank.get("communication"))]
        if timed is not None:
            row.append(number(rank["seconds"]))
        rows.append(row)
    lines += [f"  {line}" for line in table(rows, set(range(1, len(header))))]
    imbalance = merged.get("flops_imbalance")
    loaded = f"Most loaded: rank {merged['most_loaded_rank']}"
    if imbalance is not None:
        loaded += f" (FLOPs {imbalance:+.1%} over the mean)"
    if merged.get("slowest_rank") is not None:
        loaded += f"; slowest: rank {merged['slowest_rank']}"
        # No imbalance when no rank timed anything (every ThroughputReport has 0 seconds).
        if merged.get("seconds_imbalance") is not None:
            loaded += f" (seconds {merged['seconds_imbalance']:+.1%} over the mean)"
    lines.append(loaded)
    lines += diagnostics_lines(merged.get("diagnostics", []))
    return "\n".join(lines)
