"""An AnalysisReport as one self-contained HTML page (``torchscan --html``, ``utils.format_html``).

Everything the page shows is in the file: inline CSS, an inline SVG drawn here, and a few lines
of inline script for the details panel; nothing is fetched when it is viewed. The page holds:
the totals with their statuses; an icicle of the module tree (each call a box as wide as its
share of the operator FLOPs, under its parent, coloured by the status of its count); the
operator FLOPs by category as bars; the diagnostics, grouped; and the layers that cost most.
Every number also sits in a ``data-value`` attribute (exact), which is what the tests compare
with the report.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any

from ._diagnostics import group_diagnostics
from .utils import _module_tree

__all__ = ["format_html"]

# The icicle's size in SVG units (it scales to the page's width).
WIDTH, ROW = 1000.0, 26.0
# Boxes narrower than this get no label (their details are in the tooltip and the panel).
LABEL_MIN = 46.0
# The costliest layers listed under the icicle.
TOP_LAYERS = 25

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1d2330; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px; }
.context { color: #5a6270; margin-bottom: 16px; }
table { border-collapse: collapse; } td, th { padding: 3px 10px; text-align: left; }
th { border-bottom: 1px solid #c8ccd4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.status-complete { color: #1a7f37; } .status-partial { color: #b35900; } .status-unavailable { color: #8a8f98; }
svg { width: 100%; height: auto; border: 1px solid #e3e6eb; }
svg rect { stroke: #fff; stroke-width: 1; cursor: pointer; } svg text { font-size: 11px; pointer-events: none; }
rect.complete { fill: #6fa8dc; } rect.partial { fill: #f0a35e; } rect.unavailable { fill: #c9ccd2; }
rect:hover { fill-opacity: 0.75; }
.legend span { display: inline-block; margin-right: 16px; } .swatch { width: 12px; height: 12px;
  display: inline-block; vertical-align: -1px; margin-right: 4px; }
#details { min-height: 22px; margin: 6px 0; color: #333; }
.bar { background: #6fa8dc; height: 14px; display: inline-block; vertical-align: middle; }
.diagnostic { margin: 2px 0; }
"""

SCRIPT = """
document.querySelectorAll('svg rect[data-path]').forEach(function (box) {
  box.addEventListener('click', function () {
    var panel = document.getElementById('details');
    panel.textContent = box.getAttribute('data-path') + ' (' + box.getAttribute('data-type') + '): ' +
      Number(box.getAttribute('data-value')).toLocaleString('en-US') + ' FLOPs, ' +
      box.getAttribute('data-share') + ' of the total, ' + box.getAttribute('data-status');
  });
});
document.body.setAttribute('data-ready', String(document.querySelectorAll('svg rect[data-path]').length));
"""


def _text(value: object) -> str:
    return html.escape(str(value), quote=True)


def _number(value: int | float | None) -> str:
    if value is None:
        return "?"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.6g}"


def _shown(metric: Mapping[str, Any] | None) -> tuple[str, int | float | None]:
    """A metric's text (exact; `>= N` when partial) and the number it stands for."""
    if metric is None:
        return "-", None
    status = metric.get("status")
    if status == "complete":
        return _number(metric.get("value")), metric.get("value")
    if status == "partial":
        known = metric.get("known_value")
        return f">= {_number(known)}", known
    return "unavailable", None


def _flops(row: Mapping[str, Any]) -> tuple[int, str]:
    """A tree row's operator FLOPs (the number it stands for) and status."""
    metric = row.get("operator_flops")
    if metric is None:
        return 0, "unavailable"
    value = metric.get("value") if metric.get("status") == "complete" else metric.get("known_value")
    return int(value or 0), str(metric.get("status", "unavailable"))


def _icicle(report: Mapping[str, Any]) -> tuple[str, int]:
    """The module tree (the one every table is drawn from: containers never called included,
    calls in call order) as an SVG icicle; and its depth (rows)."""
    rows = _module_tree(report)
    children: list[list[int]] = [[] for _ in range(len(rows) + 1)]
    for index, row in enumerate(rows):
        children[-1 if row["parent"] is None else row["parent"]].append(index)
    total = max(sum(_flops(rows[i])[0] for i in children[-1]), 1)
    boxes: list[str] = []
    deepest = 0

    def place(index: int, x: float, width: float, depth: int) -> None:
        nonlocal deepest
        row = rows[index]
        flops, status = _flops(row)
        deepest = max(deepest, depth)
        name = row["path"] or row["name"]
        kind = row["type"] or "container, not called itself"
        share = f"{100 * flops / total:.1f}%"
        title = f"{name} ({kind}): {flops:,} FLOPs, {share}, {status}"
        label = ""
        if width >= LABEL_MIN:
            shown = row["name"] if depth else name
            room = max(int(width / 6.5) - 1, 1)
            shown = shown if len(shown) <= room else shown[: max(room - 1, 1)] + "\u2026"
            label = f'<text x="{x + 4:.2f}" y="{depth * ROW + 17:.2f}">{_text(shown)}</text>'
        boxes.append(
            f'<rect class="{_text(status)}" x="{x:.2f}" y="{depth * ROW:.2f}" width="{width:.2f}" '
            f'height="{ROW - 1:.2f}" data-path="{_text(name)}" data-type="{_text(kind)}" '
            f'data-value="{flops}" data-share="{share}" data-status="{_text(status)}">'
            f"<title>{_text(title)}</title></rect>{label}"
        )
        offset = x
        for child in children[index]:
            child_flops = _flops(rows[child])[0]
            if flops > 0 and child_flops > 0:
                child_width = width * child_flops / flops
                place(child, offset, child_width, depth + 1)
                offset += child_width

    offset = 0.0
    for root in children[-1]:
        root_flops = _flops(rows[root])[0]
        if root_flops > 0:
            place(root, offset, WIDTH * root_flops / total, 0)
            offset += WIDTH * root_flops / total
    height = (deepest + 1) * ROW
    svg = (
        f'<svg id="icicle" viewBox="0 0 {WIDTH:.0f} {height:.0f}" xmlns="http://www.w3.org/2000/svg" '
        f'role="img" aria-label="operator FLOPs by module">{"".join(boxes)}</svg>'
    )
    return svg, deepest + 1


def _totals(report: Mapping[str, Any]) -> str:
    rows = []
    for name, metric in report["totals"].items():
        text, value = _shown(metric)
        status = metric.get("status", "")
        rows.append(
            f'<tr data-total="{_text(name)}"><td>{_text(name)}</td>'
            f'<td class="num" data-value="{_text("" if value is None else value)}">{_text(text)}</td>'
            f'<td>{_text(metric.get("unit", ""))}</td><td class="status-{_text(status)}">{_text(status)}</td></tr>'
        )
    return "<table><tr><th>Total</th><th>Value</th><th>Unit</th><th>Status</th></tr>" + "".join(rows) + "</table>"


def _categories(report: Mapping[str, Any]) -> str:
    by_category: Mapping[str, int] = report.get("operator_flops", {}).get("by_category", {})
    if not by_category:
        return "<p>No operator FLOPs were counted.</p>"
    whole = max(sum(by_category.values()), 1)
    rows = []
    for name, value in sorted(by_category.items(), key=lambda item: (-item[1], item[0])):
        share = 100 * value / whole
        rows.append(
            f'<tr data-category="{_text(name)}"><td>{_text(name)}</td>'
            f'<td class="num" data-value="{value}">{value:,}</td><td class="num">{share:.1f}%</td>'
            f'<td><span class="bar" style="width:{max(share * 4, 1):.1f}px"></span></td></tr>'
        )
    head = "<tr><th>Category</th><th>FLOPs</th><th>Share</th><th></th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def _diagnostics(report: Mapping[str, Any]) -> str:
    groups = group_diagnostics(report.get("diagnostics", []))
    if not groups:
        return "<p>None: every metric is complete.</p>"
    items = []
    for (severity, code, message), where in groups.items():
        places = where["operator"] + [path or "(root)" for path in where["path"]]
        listed = ", ".join(places[:5]) + (f" and {len(places) - 5} more" if len(places) > 5 else "")
        items.append(
            f'<li class="diagnostic"><b>{_text(severity)}</b> {_text(code)}: {_text(message)}'
            f"{' (' + _text(listed) + ')' if listed else ''}</li>"
        )
    return f"<ul>{''.join(items)}</ul>"


def _top_layers(report: Mapping[str, Any]) -> str:
    """The costliest layer calls without sub-calls (the tree's leaves)."""
    tree = _module_tree(report)
    parents = {row["parent"] for row in tree}
    leaves = [row for index, row in enumerate(tree) if index not in parents and row["layer"] is not None]
    ranked = sorted(leaves, key=lambda row: (-_flops(row)[0], row["layer"]))[:TOP_LAYERS]
    rows = []
    for row in ranked:
        layer = report["layers"][row["layer"]]
        flops, status = _flops(row)
        params = layer["parameters"]
        owned = (params.get("trainable") or 0) + (params.get("frozen") or 0)
        rows.append(
            f'<tr data-layer="{_text(layer["path"])}"><td>{_text(layer["path"] or "(root)")}</td>'
            f"<td>{_text(layer['type'])}</td>"
            f'<td class="num" data-value="{flops}">{flops:,}</td>'
            f'<td class="status-{_text(status)}">{_text(status)}</td>'
            f'<td class="num">{owned:,}</td></tr>'
        )
    head = "<tr><th>Layer</th><th>Type</th><th>Operator FLOPs</th><th>Status</th><th>Parameters</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def format_html(report: Mapping[str, Any], title: str | None = None) -> str:
    """The page for an AnalysisReport (``crawl_module``'s, full mode)."""
    context = report.get("context", {})
    name = title or str(context.get("model_type", "model")).rsplit(".", 1)[-1]
    inputs = report.get("inputs", {})
    described = ", ".join(
        f"{'x'.join(map(str, a['shape']))} {str(a['dtype']).removeprefix('torch.')}"
        for a in [*inputs.get("args", []), *inputs.get("kwargs", {}).values()]
        if isinstance(a, Mapping) and a.get("kind") == "tensor"
    )
    icicle, rows = _icicle(report)
    legend = "".join(
        f'<span><i class="swatch" style="background:{colour}"></i>{status}</span>'
        for status, colour in (("complete", "#6fa8dc"), ("partial", "#f0a35e"), ("unavailable", "#c9ccd2"))
    )
    operator = report["totals"].get("operator_flops")
    headline, _ = _shown(operator)
    # The report itself, for readers that want the numbers: JSON with every "<" escaped, so that
    # nothing in it (a layer named "</script>") can end the block.
    embedded = json.dumps(report, sort_keys=True).replace("<", "\\u003c")
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>torchscan: {_text(name)}</title>'
        f"<style>{STYLE}</style></head><body>"
        f"<h1>torchscan report: {_text(name)}</h1>"
        f'<div class="context">{_text(context.get("model_type", ""))}; inputs {_text(described or "-")}; '
        f"torch {_text(context.get('torch_version', '?'))}, torchscan {_text(context.get('torchscan_version', '?'))}; "
        f'operator FLOPs <b id="headline">{_text(headline)}</b></div>'
        f"<h2>Where the operator FLOPs are: the module tree</h2>"
        f'<div class="legend">{legend} (width: share of the operator FLOPs; {rows} levels; click a box)</div>'
        f'<div id="details"></div>{icicle}'
        f"<h2>Operator FLOPs by category</h2>{_categories(report)}"
        f"<h2>Totals</h2>{_totals(report)}"
        f"<h2>Diagnostics</h2>{_diagnostics(report)}"
        f"<h2>Costliest layers</h2>{_top_layers(report)}"
        f'<script type="application/json" id="torchscan-report">{embedded}</script>'
        f"<script>{SCRIPT}</script></body></html>\n"
    )
