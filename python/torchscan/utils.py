"""What `summary` prints: the layer table of a report, and a depth-limited view of it; the FLOPs
table of a FlopReport (``format_flops``)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ._native import ops
from .report import AnalysisReport, FlopReport

__all__ = ["aggregate_info", "call_order", "format_flops", "format_html", "format_info"]


def format_info(
    report: AnalysisReport | dict[str, Any],
    wrap_mode: str | None = "mid",
    receptive_field: bool = False,
    effective_rf_stats: bool = False,
    *,
    max_width: int | None = None,
    max_depth: int | None = None,
) -> str:
    """The table `summary` prints for ``report``, the one the ``torchscan`` command prints too
    (rendered by the native core).

    Rows are the module tree: each module call in call order under the module above it in its
    path, and a container that is never called itself (a ``ModuleList``) a row of its own (type
    ``-``). Columns Layer / Type / Output Shape / Param # / Buffers / Trainable / FLOPs (each
    call's operator FLOPs: exact; ``>= N`` partial, ``?`` unavailable), where a row's Param #,
    Buffers and FLOPs include those of the rows inside it; ``receptive_field`` adds the receptive
    field, ``effective_rf_stats`` the effective stride and padding. The root row is named by its
    type, as ``operator_flops.by_module`` labels it. Under it, torchscan 0.2's lines
    ``Trainable params: N``, ``Non-trainable params: N``, ``Total params: N``, the model size in
    MB (10^6 bytes), and one line per FLOPs, MACs and DMAs total naming its method.

    ``wrap_mode`` ``"mid"`` or ``"end"`` caps each column at torchscan 0.2's widths and shortens
    longer names there; ``None`` cuts nothing. ``max_width`` (a terminal's width, say) narrows the
    Layer, Output Shape and Type columns to fit it. ``max_depth`` shows the rows down to that
    depth, each still counting what it holds (``aggregate_info``'s view has lost the rows below,
    so its rows count only what is left)."""
    table_request(wrap_mode, receptive_field, effective_rf_stats, None, max_width)
    if max_depth is not None:
        _check_depth(max_depth)
    _layers(report, "format_info")
    if not isinstance(report.get("totals"), Mapping):
        raise ValueError("report['totals'] must be a mapping of the AnalysisReport's totals")
    text = _report_json(report, "an AnalysisReport")
    table: str = ops.format_info(
        text,
        wrap_mode or "",
        bool(receptive_field),
        bool(effective_rf_stats),
        max_width or 0,
        -1 if max_depth is None else max_depth,
    )
    return table


def _module_tree(report: AnalysisReport | Mapping[str, Any]) -> list[dict[str, Any]]:
    """The module tree every table is drawn from (``src/module_tree.rs``), in table order: per
    row ``path``, ``name``, ``depth``, ``layer`` (the call's index in ``report["layers"]``; None
    for a container never called itself), ``parent`` (a row index; None for a root), ``type``
    (None for such a container), the ``parameters``, ``trainable`` and ``buffers`` elements it
    holds, and its ``operator_flops`` metric (a container's: its children's summed)."""
    rows: list[dict[str, Any]] = json.loads(ops.module_tree(_report_json(report, "an AnalysisReport")))
    return rows


def call_order(report: AnalysisReport | Mapping[str, Any]) -> list[str]:
    """The module labels of ``report``'s layer calls (``operator_flops.by_module``'s keys: the
    root's type, then the dotted path), in call order: ``format_flops``'s ``call_order``."""
    layers = _layers(report, "call_order")
    root = next((layer.get("type") for layer in layers if isinstance(layer, Mapping) and layer.get("path") == ""), None)
    if not isinstance(root, str):
        return []
    labels: list[str] = []
    for layer in layers:
        path = layer.get("path") if isinstance(layer, Mapping) else None
        if isinstance(path, str):
            labels.append(f"{root}.{path}" if path else root)
    return labels


def format_html(report: AnalysisReport | dict[str, Any], title: str | None = None) -> str:
    """``report`` (``crawl_module``'s, full mode) as one self-contained HTML page: the totals,
    an icicle of the module tree sized by operator FLOPs and coloured by status, the FLOPs by
    category, the diagnostics and the costliest layers. Nothing is fetched when it is viewed::

        Path("report.html").write_text(torchscan.utils.format_html(report))
    """
    _layers(report, "format_html")
    if not isinstance(report.get("totals"), Mapping):
        raise ValueError("report['totals'] must be a mapping of the AnalysisReport's totals")
    from .html_report import format_html as render

    return render(report, title)


def format_flops(
    report: FlopReport | Mapping[str, Any],
    by: Literal["module", "operator", "category"] = "module",
    *,
    max_depth: int | None = None,
    max_width: int | None = None,
    call_order: Sequence[str] | None = None,
) -> str:
    """A FlopReport (what ``measure_flops``, ``count_flops``'s ``counter.report()`` and
    ``crawl_module``'s ``operator_flops`` give) as a text table, rendered by the native core::

        print(torchscan.utils.format_flops(report, by="module", max_depth=2))

    ``by="module"``: the module tree (each module's FLOPs include its children's, as in
    ``by_module``), each row with its share of the total and the status of its number, then the
    work no labelled module ran ("(outside the modules)": a loss or an optimizer step called
    outside the model; computed as the total less the root modules' counts); ``"operator"``: every
    counted operator with its calls, most FLOPs first; ``"category"``: the categories. The first
    line is the total and its status ("at least N" for a partial one: shares are then of its
    counted part); the last lines the phases and, for an incomplete count, where to read why.
    ``max_depth`` limits the module tree (0: the root modules alone); ``max_width`` (a terminal's
    width) shortens module and operator names so that the table fits it. A module above labelled
    ones that no call labelled (a ``ModuleList``, whose forward is its owner's loop) has a row
    of its own, its children's FLOPs summed. ``call_order``: module labels in call order
    (``torchscan.utils.call_order(analysis_report)`` for ``crawl_module``'s ``operator_flops``):
    siblings follow it; without it they are in tree order (indices as numbers). Control characters in
    names are written as escapes, never sent to the terminal raw.

    Raises:
        ValueError: ``by`` is not one of the three, ``max_width`` is not a positive integer, or
            ``report`` is not a FlopReport (an AnalysisReport: pass its ``operator_flops``).
        TypeError: ``max_depth`` is not an integer.
    """
    _check_choice("by", by, ("module", "operator", "category"))
    _check_width(max_width)
    if max_depth is not None:
        _check_depth(max_depth)
    if not isinstance(report, Mapping):
        raise ValueError(f"report must be a FlopReport (a mapping), got a {type(report).__name__}")
    if "operator_flops" in report and "layers" in report:
        raise ValueError(
            "format_flops takes a FlopReport; for crawl_module's AnalysisReport pass report['operator_flops']"
        )
    order = ""
    if call_order is not None:
        if isinstance(call_order, (str, bytes)) or not all(isinstance(label, str) for label in call_order):
            raise TypeError("call_order must be a sequence of module labels (strings)")
        order = json.dumps(list(call_order))
    text = _report_json(report, "a FlopReport")
    table: str = ops.format_flops(text, by, -1 if max_depth is None else max_depth, max_width or 0, order)
    return table


def table_request(
    wrap_mode: object, receptive_field: object, effective_rf_stats: object, max_depth: object, max_width: object
) -> dict[str, Any]:
    """The table options, checked, as the native core reads them (`summary` sends them with the
    analysis, so that the report is drawn in the same native call that assembles it)."""
    _check_choice("wrap_mode", wrap_mode, ("mid", "end", None))
    _check_width(max_width)
    if max_depth is not None:
        _check_depth(max_depth)
    return {
        "wrap_mode": wrap_mode,
        "receptive_field": bool(receptive_field),
        "effective_rf_stats": bool(effective_rf_stats),
        "max_depth": max_depth,
        "max_width": max_width,
    }


def _check_choice(name: str, value: object, choices: tuple[str | None, ...]) -> None:
    if value not in choices:
        # An option string is echoed; any other object only by its type (its repr may hold data).
        shown = repr(value) if isinstance(value, str) else f"a {type(value).__name__}"
        spelled = [repr(c) if c is not None else "None" for c in choices]
        allowed = f"{', '.join(spelled[:-1])} or {spelled[-1]}"
        raise ValueError(f"{name} must be {allowed}, got {shown}")


def _check_width(max_width: object) -> None:
    if max_width is not None and (not isinstance(max_width, int) or isinstance(max_width, bool) or max_width < 1):
        raise ValueError(f"max_width must be a positive integer or None, got {max_width!r}")


def _report_json(report: Mapping[str, Any], kind: str) -> str:
    """`report` as JSON for the native core, or the error that says why it is not JSON data."""
    try:
        return json.dumps(report, allow_nan=False)
    except ValueError as error:  # NaN/infinity, or a cycle
        raise ValueError(f"report holds a non-finite number or a cycle, which is not JSON data ({error})") from None
    except TypeError as error:
        raise TypeError(f"report holds a value that is not JSON data ({error})") from None
    except RecursionError:
        raise ValueError(f"report is nested too deeply to be {kind}") from None


def _check_depth(max_depth: object) -> None:
    if not isinstance(max_depth, int) or isinstance(max_depth, bool):
        raise TypeError(f"max_depth must be an integer, got {type(max_depth).__name__}")
    if max_depth < 0:
        raise ValueError(f"max_depth must be non-negative, got {max_depth}.")


def aggregate_info(report: AnalysisReport, max_depth: int) -> AnalysisReport:
    """A copy of ``report`` whose layers stop at ``max_depth`` (totals unchanged)."""
    _check_depth(max_depth)
    layers = _layers(report, "aggregate_info")
    for i, layer in enumerate(layers):
        depth = layer.get("depth") if isinstance(layer, Mapping) else None
        if not isinstance(depth, int) or isinstance(depth, bool):
            raise ValueError(f"report['layers'][{i}] must be a mapping with an integer 'depth'")
    if layers and not any(layer["depth"] == max_depth for layer in layers):
        deepest = max(layer["depth"] for layer in layers)
        raise ValueError(f"max_depth {max_depth} is higher than the module depth ({deepest}).")
    try:
        view = copy.deepcopy(report)
    except RecursionError:
        raise ValueError("report is nested too deeply to be an AnalysisReport") from None
    view["layers"] = [layer for layer in view["layers"] if layer["depth"] <= max_depth]
    return view


def _layers(report: object, caller: str) -> list[Any]:
    """``report["layers"]``, once ``report`` is known to look like an AnalysisReport."""
    if not isinstance(report, Mapping):
        raise TypeError(
            f"{caller} needs an AnalysisReport (a mapping, from crawl_module or summary), got {type(report).__name__}"
        )
    if "layers" not in report and "total" in report and "by_operator" in report:
        raise ValueError(
            f"{caller} needs an AnalysisReport (from crawl_module or summary), got a FlopReport (from measure_flops "
            "or count_flops): render it with torchscan.utils.format_flops(report)"
        )
    layers = report.get("layers")
    if not isinstance(layers, list):
        found = "it is missing" if "layers" not in report else f"got {type(layers).__name__}"
        raise ValueError(f"report['layers'] must be a list of the AnalysisReport's layer calls; {found}")
    return layers
