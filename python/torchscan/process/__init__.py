"""Process-level measurements of a workload."""

from .memory import MemoryStats, measure_peak_memory

__all__ = ["MemoryStats", "measure_peak_memory"]
