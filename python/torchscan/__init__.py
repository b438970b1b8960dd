"""torchscan: exact, complete FLOP accounting for PyTorch models, counted natively."""

from __future__ import annotations

from . import _compiled, modules, process, report, utils
from ._native import ops as _ops
from .compare import compare_reports
from .crawler import crawl_module, summary
from .errors import IncompleteAnalysisError
from .flops import FlopCounter, count_flops, measure_flops
from .report import (
    AnalysisReport,
    Diagnostic,
    FlopReport,
    LayerReport,
    MetricResult,
    ReportDiff,
    metric_result,
)
from .throughput import PEAK_FLOPS, Throughput, peak_flops

__version__: str = _ops.torchscan_version()  # Cargo.toml's, through the native core

_compiled.install()

__all__ = [
    "PEAK_FLOPS",
    "AnalysisReport",
    "Diagnostic",
    "FlopCounter",
    "FlopReport",
    "IncompleteAnalysisError",
    "LayerReport",
    "MetricResult",
    "ReportDiff",
    "Throughput",
    "compare_reports",
    "count_flops",
    "crawl_module",
    "measure_flops",
    "metric_result",
    "modules",
    "peak_flops",
    "process",
    "report",
    "summary",
    "utils",
]
