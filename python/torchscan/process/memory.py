"""measure_peak_memory: the peak of PyTorch memory a workload holds.

CPU: counted from PyTorch's own allocator events by the native reporter (every tensor and
operator allocation through PyTorch's CPU allocator, on this thread and the autograd threads
it hands work to); exact, cheap, and not RSS. CUDA: the caching allocator's statistics.
Apple MPS: what the MPS allocator holds from the Metal driver (``torch.mps``), as torchscan 0.2
measured it; MPS keeps no peak statistic, see ``_measure_mps``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NotRequired, TypedDict

import torch

from .._guards import Guard
from .._native import ops

__all__ = ["MemoryStats", "measure_peak_memory"]

_memory_start = ops.memory_start.default._op
_memory_stop = ops.memory_stop.default._op


class MemoryStats(TypedDict):
    device: str
    #: ``pytorch_tensor_bytes`` (CPU), ``pytorch_reserved_bytes`` (CUDA) or
    #: ``pytorch_driver_allocated_bytes`` (MPS).
    metric: str
    #: What was live at the start as far as PyTorch lets it be seen: 0 on the CPU, where
    #: PyTorch keeps no count of the bytes allocated before the measurement.
    baseline_bytes: int
    peak_bytes: int
    #: The peak of bytes the workload itself held above ``baseline_bytes``.
    delta_bytes: int
    #: CUDA only: the peak of bytes allocated to tensors (the reserved figure includes cache).
    allocated_peak_bytes: NotRequired[int]
    #: MPS only: the bytes allocated to tensors when the workload ended (MPS has no peak of it).
    allocated_end_bytes: NotRequired[int]


def _device(device: object) -> torch.device:
    if isinstance(device, torch.device):
        return device
    if isinstance(device, str):
        try:
            return torch.device(device)
        except RuntimeError as error:
            raise RuntimeError(f"device {device!r} is not a device PyTorch knows: {error}") from None
    raise TypeError(f"device must be a torch.device or a string like 'cpu' or 'cuda:0', got {type(device).__name__}")


def measure_peak_memory(workload: Callable[[], Any], *, device: torch.device | str) -> MemoryStats:
    """Runs ``workload()`` exactly once and returns the peak of PyTorch memory it held.

    Raises:
        TypeError: ``workload`` is not callable, or ``device`` is neither a torch.device nor a str.
        RuntimeError: the device (or its index) is not available, or a profiler already holds
            this thread's profiler slot (CPU).
        NotImplementedError: a backend other than CPU, CUDA and MPS.
    """
    if not callable(workload):
        raise TypeError(f"workload must be a zero-argument callable, got {type(workload).__name__}")
    dev = _device(device)
    if dev.type == "cpu":
        if dev.index not in (None, 0):
            raise RuntimeError(f"device {dev} is not available: there is one CPU device, 'cpu'")
        return _measure_cpu(workload)
    if dev.type == "cuda":
        return _measure_cuda(workload, dev)
    if dev.type == "mps":
        return _measure_mps(workload, dev)
    raise NotImplementedError(f"measure_peak_memory supports the cpu, cuda and mps devices, not {dev.type!r}")


def _measure_cpu(workload: Callable[[], Any]) -> MemoryStats:
    # The measurement (and the thread's profiler slot it holds) is owned by a guard from the
    # instant it starts: an interrupt anywhere cannot leak it (torchscan/_guards.c).
    measurement = Guard(_memory_start, _memory_stop)
    try:
        workload()
    finally:
        stats: MemoryStats = json.loads(measurement.release())
    return stats


def _measure_cuda(workload: Callable[[], Any], dev: torch.device) -> MemoryStats:
    if not torch.cuda.is_available():
        raise RuntimeError(f"device {dev} is not available: torch.cuda.is_available() is False")
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if index >= count:
        raise RuntimeError(f"device cuda:{index} is not available: this process sees {count} CUDA device(s)")
    torch.cuda.synchronize(index)
    baseline = torch.cuda.memory_reserved(index)
    torch.cuda.reset_peak_memory_stats(index)
    workload()
    torch.cuda.synchronize(index)
    peak = torch.cuda.max_memory_reserved(index)
    return MemoryStats(
        device=f"cuda:{index}",
        metric="pytorch_reserved_bytes",
        baseline_bytes=baseline,
        peak_bytes=peak,
        delta_bytes=max(peak - baseline, 0),
        allocated_peak_bytes=torch.cuda.max_memory_allocated(index),
    )


def _measure_mps(workload: Callable[[], Any], dev: torch.device) -> MemoryStats:
    """Apple MPS: the bytes the MPS allocator holds from the Metal driver, before and after the
    workload (``torch.mps.driver_allocated_memory``, synchronized). The allocator keeps the
    blocks a workload frees in its cache, so what it holds at the end is the high-water mark of
    what it reserved, like CUDA's ``pytorch_reserved_bytes``; MPS keeps no peak statistic, so a
    cache the allocator's garbage collector trimmed during the workload (under memory pressure,
    see PYTORCH_MPS_HIGH_WATERMARK_RATIO) is not seen. One device: ``mps`` or ``mps:0``."""
    backend = torch.backends.mps
    if not backend.is_available():
        why = "not built into this PyTorch" if not backend.is_built() else "no MPS device is available"
        raise RuntimeError(f"device {dev} is not available: {why} (torch.backends.mps.is_available() is False)")
    if dev.index not in (None, 0):
        raise RuntimeError(f"device {dev} is not available: there is one MPS device, 'mps'")
    torch.mps.synchronize()
    baseline = torch.mps.driver_allocated_memory()
    workload()
    torch.mps.synchronize()
    held = torch.mps.driver_allocated_memory()
    peak = max(held, baseline)
    return MemoryStats(
        device="mps",
        metric="pytorch_driver_allocated_bytes",
        baseline_bytes=baseline,
        peak_bytes=peak,
        delta_bytes=peak - baseline,
        allocated_end_bytes=torch.mps.current_allocated_memory(),
    )
