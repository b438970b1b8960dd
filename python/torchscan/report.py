"""Report types (TypedDicts) and the MetricResult constructor of the v0.2 contract.

The native core emits these shapes as JSON; the types here describe them for type checkers and
readers. Every numeric metric carries a status: read `value` only when it is `complete`.
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired[...] from evaluated
# annotations, so that `__required_keys__` and `__optional_keys__` are right at runtime.
from typing import Any, Literal, NotRequired, TypedDict

__all__ = [
    "AnalysisReport",
    "Communication",
    "Diagnostic",
    "DistributedContext",
    "FlopContext",
    "FlopReport",
    "IgnoredOperator",
    "IntegerOps",
    "LayerChanges",
    "LayerDiff",
    "LayerReport",
    "LayerSnapshot",
    "MergedReport",
    "MetricDiff",
    "MetricResult",
    "MetricStatus",
    "RateResult",
    "ReportDiff",
    "StepTiming",
    "ThroughputReport",
    "Traffic",
    "UncalledModule",
    "metric_result",
]

MetricStatus = Literal["complete", "partial", "unavailable"]


class MetricResult(TypedDict):
    status: MetricStatus
    value: int | float | None
    known_value: int | float | None
    unit: str
    scope: str
    method: str


class Diagnostic(TypedDict):
    code: str
    severity: Literal["warning", "error"]
    metric: str
    message: str
    path: NotRequired[str]
    operator: NotRequired[str]


class DistributedContext(TypedDict):
    """This rank's place in a ``torch.distributed`` job."""

    rank: int
    world_size: int
    backend: str


class FlopContext(TypedDict):
    torch_version: str
    torchscan_version: str
    method: str
    #: Present when measured inside an initialized ``torch.distributed`` job (schema version 2).
    distributed: NotRequired[DistributedContext]


class Traffic(TypedDict):
    calls: int
    bytes_sent: int
    bytes_received: int


class PhaseTraffic(Traffic):
    status: MetricStatus


class Communication(TypedDict):
    """What this rank's collectives moved, by the ``ring`` conventions of docs/distributed.md.
    complete: exact; partial: lower bounds (a diagnostic names what is missing)."""

    status: MetricStatus
    convention: Literal["ring"]
    calls: int
    bytes_sent: int
    bytes_received: int
    by_operator: dict[str, Traffic]
    by_phase: dict[str, PhaseTraffic]
    by_module: dict[str, Traffic]


class IgnoredOperator(TypedDict):
    calls: int
    reason: str


class IntegerOps(TypedDict):
    """The integer arithmetic of quantized kernels (``quantized::linear``, ``aten::_int_mm``, ...):
    2 operations per integer multiply-accumulate, 1 per quantized elementwise result."""

    status: MetricStatus
    value: int | None
    known_value: int | None
    unit: Literal["integer_ops"]
    #: Operator packet -> integer operations of its calls.
    by_operator: dict[str, int]


class FlopReport(TypedDict):
    schema_version: int
    context: FlopContext
    total: MetricResult
    #: Module label -> counted FLOPs, children included (as torchscan 0.2 and PyTorch give them).
    by_module: dict[str, int]
    #: Module label -> whether its number is complete (additive to 0.2).
    by_module_status: dict[str, MetricStatus]
    #: Module call -> FLOPs, for sessions that push call scopes (``torch.ops.torchscan.push_scope``);
    #: crawl_module moves these into its layers.
    by_call: NotRequired[dict[str, MetricResult]]
    #: Operator packet ("aten.mm") -> FLOPs of the counted operators (as in 0.2).
    by_operator: dict[str, int]
    #: Operator packet -> calls of the counted operators (additive).
    operator_calls: dict[str, int]
    by_category: dict[str, int]
    by_phase: dict[str, MetricResult]
    ignored_operators: dict[str, IgnoredOperator]
    diagnostics: list[Diagnostic]
    #: Integer operations of quantized kernels, apart from FLOPs; present when one ran.
    integer_ops: NotRequired[IntegerOps]
    #: This rank's torch.distributed collectives; present when one ran (schema version 2).
    communication: NotRequired[Communication]
    #: The labels of the modules that hold parameters and were never called (``format_flops``
    #: gives each a row): ``crawl_module``'s; ``measure_flops`` and ``count_flops`` given
    #: ``modules=``: those that made no call (labels by hooks) or ran no operator (by frames);
    #: absent when there are none.
    uncalled_modules: NotRequired[list[str]]


class LayerReport(TypedDict):
    path: str
    call_index: int
    name: str
    depth: int
    type: str
    #: The module's other paths, when it is registered under several names (``path`` is the one
    #: under the module that made this call).
    aliases: NotRequired[list[str]]
    #: True when the call materialized the module's parameters (a lazy module).
    lazy: NotRequired[bool]
    #: True for a submodule of a TorchScript module: listed from the module tree (structure,
    #: parameters, buffers); its calls are not seen, so it has no ``input`` or ``output``.
    scripted: NotRequired[bool]
    input: NotRequired[dict[str, Any]]
    output: NotRequired[dict[str, Any]]
    #: ``trainable``, ``frozen``, ``bytes``, ``shared``; a pruned module's call adds
    #: ``effective`` (what its masks keep of the parameters counted here).
    parameters: dict[str, int | bool | None]
    buffers: dict[str, int | bool | None]
    metrics: dict[str, MetricResult]


class UncalledModule(TypedDict):
    """A module that holds parameters and was never called (``AnalysisReport.uncalled_modules``):
    the tensors it holds that no call counted, as a layer's ``parameters`` and ``buffers``."""

    path: str
    name: str
    depth: int
    type: str
    parameters: dict[str, int | bool | None]
    buffers: dict[str, int | bool | None]


class TrainingStepReport(TypedDict):
    """``torchscan MODEL --train``: one training step, counted (``by_phase``: forward,
    backward, optimizer); ``memory``: the peak memory of a second step (with ``--memory``)."""

    optimizer: str
    flops: FlopReport
    #: torchscan.measure_peak_memory's MemoryStats.
    memory: NotRequired[dict[str, Any]]


class AnalysisReport(TypedDict):
    schema_version: int
    context: dict[str, Any]
    inputs: dict[str, Any]
    layers: list[LayerReport]
    operator_flops: FlopReport
    totals: dict[str, MetricResult]
    diagnostics: list[Diagnostic]
    #: Only in ``torchscan MODEL --train --json`` reports.
    training: NotRequired[TrainingStepReport]
    #: Only in ``torchscan MODEL --memory --json`` reports: the forward's MemoryStats.
    memory: NotRequired[dict[str, Any]]
    #: The modules of ``named_modules()`` that hold parameters and were never called, in that
    #: order (every table gives each a row); absent when there are none.
    uncalled_modules: NotRequired[list[UncalledModule]]


class MetricDiff(TypedDict):
    status: MetricStatus
    delta: int | float | None
    before: MetricResult | None
    after: MetricResult | None
    # Why the sides cannot be compared (another unit, scope or method); status is "unavailable".
    reason: NotRequired[str]


class LayerSnapshot(TypedDict):
    path: str
    call_index: int
    metrics: dict[str, MetricResult]


class LayerDiff(TypedDict):
    path: str
    call_index: int
    metrics: dict[str, MetricDiff]


class LayerChanges(TypedDict):
    added: list[LayerSnapshot]
    removed: list[LayerSnapshot]
    changed: list[LayerDiff]


class RateResult(TypedDict):
    """A rate (``FLOP/s``) or a fraction (MFU), with the status rules of every metric."""

    status: MetricStatus
    value: float | None
    known_value: float | None
    unit: Literal["FLOP/s", "fraction"]


class StepTiming(TypedDict):
    flops: MetricResult
    by_phase: NotRequired[dict[str, MetricResult]]
    seconds: float
    count: NotRequired[int]


class ThroughputReport(TypedDict):
    """``torchscan.Throughput.report()`` (schemas/throughput_report.json)."""

    schema_version: int
    steps: int
    seconds: float
    flops: MetricResult
    by_phase: dict[str, MetricResult]
    flops_per_second: RateResult
    peak_flops_per_second: float | None
    mfu: RateResult
    per_step: NotRequired[list[StepTiming]]


class RankTraffic(Traffic):
    status: MetricStatus


class RankFigures(TypedDict):
    rank: int
    flops: MetricResult
    communication: RankTraffic | None
    seconds: NotRequired[float]
    flops_per_second: NotRequired[RateResult]
    mfu: NotRequired[RateResult]


class MergedThroughput(TypedDict):
    seconds: float
    flops: MetricResult
    by_phase: dict[str, MetricResult]
    flops_per_second: RateResult
    peak_flops_per_second: float | None
    mfu: RateResult


class MergedReport(TypedDict):
    """``torchscan.merge_reports`` / ``gather_reports`` (schemas/merged_report.json)."""

    schema_version: int
    context: dict[str, Any]
    total: MetricResult
    by_phase: dict[str, MetricResult]
    by_module: dict[str, int]
    by_module_status: dict[str, MetricStatus]
    by_operator: dict[str, int]
    operator_calls: dict[str, int]
    by_category: dict[str, int]
    ignored_operators: dict[str, IgnoredOperator]
    communication: Communication | None
    ranks: list[RankFigures]
    most_loaded_rank: int
    slowest_rank: int | None
    flops_imbalance: float | None
    seconds_imbalance: float | None
    throughput: NotRequired[MergedThroughput]
    diagnostics: list[Diagnostic]


class ReportDiff(TypedDict):
    schema_version: int
    totals: dict[str, MetricDiff]
    layers: LayerChanges


_STATUSES = ("complete", "partial", "unavailable")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def metric_result(
    *,
    status: MetricStatus,
    unit: str,
    scope: str,
    method: str,
    value: int | float | None = None,
    known_value: int | float | None = None,
) -> MetricResult:
    """Builds a MetricResult, enforcing the status invariant.

    complete: ``value`` is a number and ``known_value`` equals it (defaults to it);
    partial: ``value`` is None and ``known_value`` a number (the lower bound);
    unavailable: both None. Anything else is a ValueError.
    """
    if status not in _STATUSES:
        raise ValueError(f"status must be one of {', '.join(_STATUSES)}, got {status!r}")
    for name, text in (("unit", unit), ("scope", scope), ("method", method)):
        if not isinstance(text, str) or not text:
            raise ValueError(f"{name} must be a non-empty string, got {type(text).__name__}")
    if status == "complete":
        if not _is_number(value):
            raise ValueError("a complete metric needs a numeric value")
        if known_value is None:
            known_value = value
        if known_value != value:
            raise ValueError(f"a complete metric needs known_value == value, got {known_value} != {value}")
    elif status == "partial":
        if value is not None:
            raise ValueError("a partial metric has no value (value must be None)")
        if not _is_number(known_value):
            raise ValueError("a partial metric needs a numeric known_value (its lower bound)")
    elif value is not None or known_value is not None:
        raise ValueError("an unavailable metric has neither value nor known_value")
    return MetricResult(status=status, value=value, known_value=known_value, unit=unit, scope=scope, method=method)
