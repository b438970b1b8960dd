"""torchscan: exact, complete FLOP accounting for PyTorch models, counted natively."""

from __future__ import annotations

from .errors import IncompleteAnalysisError
from .flops import measure_flops
from .report import Diagnostic, FlopReport, MetricResult, metric_result

__version__ = "0.3.0"

__all__ = [
    "Diagnostic",
    "FlopReport",
    "IncompleteAnalysisError",
    "MetricResult",
    "measure_flops",
    "metric_result",
]
