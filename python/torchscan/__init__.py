"""torchscan: exact, complete FLOP accounting for PyTorch models, counted natively."""

from __future__ import annotations

from . import _compiled, distributed, modules, process, report, utils
from ._native import ops as _ops
from .compare import compare_reports
from .crawler import crawl_module, summary
from .distributed import gather_reports, merge_reports
from .errors import IncompleteAnalysisError
from .flops import FlopCounter, count_flops, measure_flops
from .report import (
    AnalysisReport,
    Diagnostic,
    FlopReport,
    LayerReport,
    MergedReport,
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
    "MergedReport",
    "MetricResult",
    "ReportDiff",
    "Throughput",
    "compare_reports",
    "count_flops",
    "crawl_module",
    "distributed",
    "gather_reports",
    "measure_flops",
    "merge_reports",
    "metric_result",
    "modules",
    "peak_flops",
    "process",
    "report",
    "summary",
    "utils",
]
