"""Achieved FLOP/s and model FLOPs utilization (MFU) of counted, timed steps::

    meter = torchscan.Throughput(peak_flops=torchscan.peak_flops("H100-SXM", torch.bfloat16))
    for x, y in loader:
        with meter.step():
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
    report = meter.report()   # FLOP/s over all steps, and MFU

Each step is a ``count_flops`` block (every operator it dispatches, forward, backward and optimizer)
timed from its start to its end; the report sums the steps' FLOPs and seconds, so it is the
average rate over them, and their FLOPs by phase (``by_phase``: ``forward``, ``backward`` and
``optimizer``, the work of ``torch.optim`` steps, each summed over the steps that have it, as
``count_flops`` reports them for one step). Only each step's total, phases and time are kept (no
FlopReport per step), unless ``keep_steps=True`` asks for the per-step figures (each with its
own ``by_phase``). The time includes the counting itself (about
0.5 us per operator on a CPU, `docs/performance.md`), so the rate is a slight underestimate where
operators are tiny; on CUDA the clock is read after synchronizing the device, so that a step's
time covers its kernels.

MFU is the achieved rate over the device's peak: pass ``peak_flops`` (FLOP/s), or look one up in
:data:`PEAK_FLOPS` with :func:`peak_flops`. The table holds dense (no sparsity) peaks from the
vendors' datasheets (where a datasheet gives the sparse figure, half of it).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

import torch
from torch import nn

from ._native import ops
from .flops import CustomFormula, FlopCounter, Threads
from .report import ThroughputReport

__all__ = ["PEAK_FLOPS", "Throughput", "peak_flops"]

_T = 1e12
# Dense peak FLOP/s per device and dtype ("tfloat32": float32 matmuls on tensor cores, as with
# torch.backends.cuda.matmul.allow_tf32). Sources: NVIDIA's H100, H200, A100, L4, A10 and V100
# datasheets, AMD's MI300X datasheet.
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H100-SXM": {"bfloat16": 989.5 * _T, "float16": 989.5 * _T, "tfloat32": 494.5 * _T, "float32": 67 * _T},
    "H100-PCIe": {"bfloat16": 756.5 * _T, "float16": 756.5 * _T, "tfloat32": 378 * _T, "float32": 51 * _T},
    "H200-SXM": {"bfloat16": 989.5 * _T, "float16": 989.5 * _T, "tfloat32": 494.5 * _T, "float32": 67 * _T},
    "A100": {"bfloat16": 312 * _T, "float16": 312 * _T, "tfloat32": 156 * _T, "float32": 19.5 * _T},
    "L4": {"bfloat16": 121 * _T, "float16": 121 * _T, "tfloat32": 60 * _T, "float32": 30.3 * _T},
    "A10": {"bfloat16": 125 * _T, "float16": 125 * _T, "tfloat32": 62.5 * _T, "float32": 31.2 * _T},
    "V100-SXM2": {"float16": 125 * _T, "float32": 15.7 * _T},
    "MI300X": {"bfloat16": 1307.4 * _T, "float16": 1307.4 * _T, "tfloat32": 653.7 * _T, "float32": 163.4 * _T},
}

_DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def peak_flops(device: str, dtype: str | torch.dtype = "bfloat16") -> float:
    """The dense peak FLOP/s of ``device`` (a key of :data:`PEAK_FLOPS`) for ``dtype``
    (``torch.bfloat16``, ``torch.float16``, ``torch.float32`` or their names, or ``"tfloat32"``).

    Raises:
        ValueError: an unknown device or a dtype the table has no peak for, naming what it has.
    """
    if device not in PEAK_FLOPS:
        raise ValueError(f"no peak for device {device!r}; known: {', '.join(sorted(PEAK_FLOPS))}")
    name = _DTYPE_NAMES.get(dtype, dtype) if isinstance(dtype, torch.dtype) else dtype
    peaks = PEAK_FLOPS[device]
    if not isinstance(name, str) or name not in peaks:
        raise ValueError(f"no {device} peak for dtype {dtype!r}; known: {', '.join(sorted(peaks))}")
    return peaks[name]


class Throughput:
    """Times counted steps and reports their FLOP/s and MFU (see the module docstring).

    Args:
        peak_flops: the device's peak FLOP/s for MFU (``peak_flops("A100", torch.bfloat16)``);
            ``None``: MFU is unavailable.
        modules, custom_mapping, threads: as in :func:`torchscan.count_flops`, for every step.
        keep_steps: keep each step's FLOPs, phases and seconds in the report (``per_step``).
        synchronize: synchronize CUDA before each reading of the clock; ``None`` (default):
            when CUDA is initialized.
        clock: the clock, in seconds (``time.perf_counter``).
    """

    def __init__(
        self,
        *,
        peak_flops: float | None = None,
        modules: nn.Module | Iterable[nn.Module] | None = None,
        custom_mapping: Mapping[Any, CustomFormula] | None = None,
        threads: Threads = "current",
        keep_steps: bool = False,
        synchronize: bool | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if peak_flops is not None and (
            isinstance(peak_flops, bool)
            or not isinstance(peak_flops, int | float)
            or not math.isfinite(peak_flops)
            or peak_flops <= 0
        ):
            raise ValueError(f"peak_flops must be a positive number of FLOP/s or None, got {peak_flops!r}")
        if synchronize not in (None, True, False):
            raise ValueError(f"synchronize must be True, False or None, got {synchronize!r}")
        if not callable(clock):
            raise TypeError(f"clock must be a callable returning seconds, got a {type(clock).__name__}")
        # Checked now (a bad argument fails before any step runs); each step builds its own.
        FlopCounter(modules=modules, custom_mapping=custom_mapping, threads=threads)
        self._modules, self._custom_mapping, self._threads = modules, custom_mapping, threads
        self._peak = None if peak_flops is None else float(peak_flops)
        self._keep_steps = bool(keep_steps)
        self._synchronize = synchronize
        self._clock = clock
        self._steps: list[dict[str, Any]] = []
        self._open = False

    @property
    def steps(self) -> int:
        """Steps timed so far (a step that raised is not one)."""
        return sum(int(record.get("count", 1)) for record in self._steps)

    def step(self) -> _Step:
        """A ``with`` block counted and timed as one step."""
        return _Step(self)

    def report(self) -> ThroughputReport:
        """FLOP/s (and MFU) over the steps timed so far."""
        text = ops.throughput_report(json.dumps(self._steps), self._peak or 0.0, self._keep_steps)
        report: ThroughputReport = json.loads(text)
        return report

    def _fold(self) -> None:
        """Without ``keep_steps``, the steps so far become one record (their FLOPs and phases summed by the
        core's rules, their seconds summed, their number kept) once FOLD_AT have gathered: a
        long loop holds a bounded record, and the report is the one the steps apart would give (the
        seconds up to floating-point rounding)."""
        if self._keep_steps or len(self._steps) < FOLD_AT:
            return
        folded = json.loads(ops.throughput_report(json.dumps(self._steps), 0.0, False))
        self._steps = [
            {
                "flops": folded["flops"],
                "by_phase": folded["by_phase"],
                "seconds": folded["seconds"],
                "count": folded["steps"],
            }
        ]

    def _now(self) -> float:
        synchronize = self._synchronize
        if synchronize is None:
            synchronize = torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        if synchronize:
            torch.cuda.synchronize()
        now = self._clock()
        if isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now):
            raise ValueError(f"the clock must return finite seconds, got {now!r}")
        return float(now)


# Step records a Throughput without keep_steps gathers before folding them into one.
FOLD_AT = 256


class _Step:
    def __init__(self, meter: Throughput) -> None:
        self._meter = meter
        self._counter = FlopCounter(meter._modules, meter._custom_mapping, meter._threads)
        self._start = 0.0

    def __enter__(self) -> _Step:
        if self._meter._open:
            raise RuntimeError("a Throughput step is already open: steps do not nest")
        self._counter.__enter__()
        self._meter._open = True
        try:
            # After the count starts: opening the session is not the step's time.
            self._start = self._meter._now()
        except BaseException:
            self._meter._open = False
            self._counter.__exit__(RuntimeError, None, None)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        meter = self._meter
        try:
            # Before the count ends: assembling its report is not the step's time.
            end = meter._now() if exc_type is None else 0.0
        except BaseException:
            self._counter.__exit__(RuntimeError, None, None)
            meter._open = False
            raise
        meter._open = False
        self._counter.__exit__(exc_type, exc, tb)
        if exc_type is not None:
            return  # a step that raised is not timed; its exception propagates
        seconds = end - self._start
        if seconds < 0:
            raise ValueError(f"the clock went backwards during a step ({seconds} s)")
        counted = self._counter.report()
        meter._steps.append({"flops": counted["total"], "by_phase": counted["by_phase"], "seconds": seconds})
        meter._fold()
