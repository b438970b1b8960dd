"""What `summary` prints: the layer table of a report, and a depth-limited view of it."""

from __future__ import annotations

import copy
import json
from typing import Any

from ._native import ops
from .report import AnalysisReport

__all__ = ["aggregate_info", "format_info"]


def format_info(
    report: AnalysisReport | dict[str, Any],
    wrap_mode: str | None = "mid",
    receptive_field: bool = False,
    effective_rf_stats: bool = False,
    *,
    max_width: int | None = None,
) -> str:
    """The table `summary` prints for ``report`` (rendered by the native core). ``max_width``
    (a terminal's width, say) narrows the Layer, Output Shape and Type columns to fit it."""
    if wrap_mode not in ("mid", "end", None):
        raise ValueError(f"wrap_mode must be 'mid', 'end' or None, got {wrap_mode!r}")
    if max_width is not None and (not isinstance(max_width, int) or isinstance(max_width, bool) or max_width < 1):
        raise ValueError(f"max_width must be a positive integer or None, got {max_width!r}")
    return ops.format_info(
        json.dumps(report), wrap_mode or "", bool(receptive_field), bool(effective_rf_stats), max_width or 0
    )


def aggregate_info(report: AnalysisReport, max_depth: int) -> AnalysisReport:
    """A copy of ``report`` whose layers stop at ``max_depth`` (totals unchanged)."""
    if not isinstance(max_depth, int) or isinstance(max_depth, bool):
        raise TypeError(f"max_depth must be an integer, got {type(max_depth).__name__}")
    if max_depth < 0:
        raise ValueError(f"max_depth must be non-negative, got {max_depth}.")
    layers = report["layers"]
    if layers and not any(layer["depth"] == max_depth for layer in layers):
        deepest = max(layer["depth"] for layer in layers)
        raise ValueError(f"max_depth {max_depth} is higher than the module depth ({deepest}).")
    view = copy.deepcopy(report)
    view["layers"] = [layer for layer in view["layers"] if layer["depth"] <= max_depth]
    return view
