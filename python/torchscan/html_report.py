"""An AnalysisReport as one self-contained HTML page (``torchscan --html``, ``utils.format_html``).

Everything the page shows is in the file: inline CSS, an inline SVG drawn here, and a few lines
of inline script for the details panel; nothing is fetched when it is viewed. The page holds:
an icicle of the module tree (each call a box as wide as its share of the operator FLOPs, under
its parent, labelled wherever the name fits; a complete count is shaded by its share of the
FLOPs, darker for more, a partial or unavailable one coloured by its status); the operator FLOPs
by category as bars; the totals in the command's table order; the training step and peak memory
when the run measured them (``torchscan --train --memory``); the diagnostics, grouped; the
layers that cost most; and every layer call in a table with a search box. Numbers read in human
units (8.22 GFLOPs, 11.7 MB) with the exact value beside or in the tooltip; every number also
sits in a ``data-value`` attribute (exact), which is what the tests compare with the report.
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
# Boxes narrower than this get no label (their details are in the tooltip and the panel); a
# label is cut to the characters that fit (about 6.2 units each at the labels' font size).
LABEL_MIN = 14.0
CHAR_WIDTH = 6.2
# The shade of a complete box: lightness from LIGHTEST (no FLOPs) to DARKEST (all of them), on
# the square root of its share, so that small layers are still told apart.
LIGHTEST, DARKEST = 90.0, 38.0
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
svg text.dark { fill: #fff; }
rect.complete { fill: #6fa8dc; } rect.partial { fill: #f0a35e; } rect.unavailable { fill: #c9ccd2; }
rect:hover { fill-opacity: 0.75; }
.shade { display: inline-block; width: 120px; height: 12px; vertical-align: -1px; margin-right: 4px;
  background: linear-gradient(to right, hsl(212, 60%, 90%), hsl(212, 60%, 38%)); }
#search { margin: 4px 0 8px; padding: 3px 6px; width: 320px; }
tr.hidden { display: none; } td.indent { white-space: pre; }
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
      box.getAttribute('data-human') + ' (' + Number(box.getAttribute('data-value')).toLocaleString('en-US') +
      ' FLOPs), ' + box.getAttribute('data-share') + ' of the total, ' + box.getAttribute('data-status');
  });
});
var search = document.getElementById('search');
function filterLayers() {
  var words = search.value.toLowerCase().split(/\\s+/).filter(Boolean), shown = 0;
  document.querySelectorAll('#layers tr[data-row]').forEach(function (row) {
    var text = (row.getAttribute('data-row') + ' ' + row.getAttribute('data-type')).toLowerCase();
    var keep = words.every(function (word) { return text.indexOf(word) >= 0; });
    row.classList.toggle('hidden', !keep);
    shown += keep ? 1 : 0;
  });
  document.getElementById('shown').textContent = String(shown);
}
search.addEventListener('input', filterLayers);
// A filter in the address (page.html#layer1) is applied on opening: a link to a part of the model.
if (location.hash.length > 1) { search.value = decodeURIComponent(location.hash.slice(1)); }
filterLayers();
document.body.setAttribute('data-ready', String(document.querySelectorAll('svg rect[data-path]').length));
"""


def _text(value: object) -> str:
    return html.escape(str(value), quote=True)


def _number(value: int | float | None) -> str:
    if value is None:
        return "?"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.6g}"


_PREFIXES = ("", "K", "M", "G", "T", "P", "E")


def human(value: int | float | None, unit: str = "FLOPs") -> str:
    """`8_220_000_000` -> `8.22 GFLOPs`: three significant digits and an SI prefix (powers of
    1000, as the command's MB are 10^6 bytes)."""
    if value is None:
        return "?"
    scaled, index = float(value), 0
    while abs(scaled) >= 999.5 and index < len(_PREFIXES) - 1:
        scaled, index = scaled / 1000, index + 1
    text = f"{scaled:.3g}" if index else f"{value:,}" if isinstance(value, int) else f"{scaled:.3g}"
    return f"{text} {_PREFIXES[index]}{unit}"


# A total's unit -> how its human form reads: `8.22 GFLOPs`, `11.7 M elements`, `46.8 MB`.
_HUMAN_UNITS = {"FLOPs": "FLOPs", "MACs": "MACs", "DMAs": "DMAs", "elements": " elements", "bytes": "B"}


def _human_metric(metric: Mapping[str, Any]) -> str:
    """A total for people: `8.22 GFLOPs`, `>= 8.22 GFLOPs` when partial; a unit without a
    human form (calls, receptive-field pixels) as the exact number."""
    text, value = _shown(metric)
    unit = _HUMAN_UNITS.get(str(metric.get("unit", "")))
    if value is None or unit is None:
        return text
    shown = human(value, unit.strip()) if not unit.startswith(" ") else human(value, "").rstrip() + unit
    return f">= {shown}" if metric.get("status") == "partial" else shown


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


def _kind(row: Mapping[str, Any]) -> str:
    """What a tree row is: its type; a module never called that holds parameters says so, and a
    container never called itself is named as one."""
    if row.get("uncalled"):
        return f"{row['type']}, never called"
    return str(row["type"] or "container, not called itself")


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
        kind = _kind(row)
        fraction = flops / total
        share = f"{100 * fraction:.1f}%"
        title = f"{name} ({kind}): {human(flops)} ({flops:,} FLOPs), {share}, {status}"
        # A complete count is shaded by its share (colour says where the FLOPs are even when
        # every count is complete); partial and unavailable keep their status colours.
        lightness = LIGHTEST - (LIGHTEST - DARKEST) * fraction**0.5
        fill = f' style="fill:hsl(212, 60%, {lightness:.1f}%)"' if status == "complete" else ""
        label = ""
        room = int((width - 6) / CHAR_WIDTH)
        if width >= LABEL_MIN and room >= 1:
            shown = row["name"] if depth else name
            with_flops = f"{shown} ({human(flops)})"
            shown = with_flops if len(with_flops) <= room else shown
            shown = shown if len(shown) <= room else shown[: max(room - 1, 1)] + "\u2026"
            dark = ' class="dark"' if fill and lightness < 60 else ""
            label = f'<text{dark} x="{x + 3:.2f}" y="{depth * ROW + 17:.2f}">{_text(shown)}</text>'
        boxes.append(
            f'<rect class="{_text(status)}"{fill} x="{x:.2f}" y="{depth * ROW:.2f}" width="{width:.2f}" '
            f'height="{ROW - 1:.2f}" data-path="{_text(name)}" data-type="{_text(kind)}" '
            f'data-value="{flops}" data-human="{_text(human(flops))}" data-share="{share}" '
            f'data-status="{_text(status)}"><title>{_text(title)}</title></rect>{label}'
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
    """The totals in the order the command's table prints them (size, then compute)."""
    from .cli.render import TOTAL_MEANINGS, ordered

    rows = []
    totals = report["totals"]
    for name in ordered(totals):
        metric = totals[name]
        text, value = _shown(metric)
        status = metric.get("status", "")
        rows.append(
            f'<tr data-total="{_text(name)}"><td>{_text(name)}</td><td class="num">{_text(_human_metric(metric))}</td>'
            f'<td class="num" data-value="{_text("" if value is None else value)}">{_text(text)}</td>'
            f'<td>{_text(metric.get("unit", ""))}</td><td class="status-{_text(status)}">{_text(status)}</td>'
            f"<td>{_text(TOTAL_MEANINGS.get(name, ''))}</td></tr>"
        )
    head = "<tr><th>Total</th><th>Value</th><th>Exact</th><th>Unit</th><th>Status</th><th>Measures</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


# The phases of a training step, in the order they run.
_PHASES = ("forward", "backward", "optimizer")


def _memory_row(what: str, stats: Mapping[str, Any]) -> str:
    delta, baseline = int(stats["delta_bytes"]), int(stats["baseline_bytes"])
    before = f"bytes above the {human(baseline, 'B')} held before" if baseline else "bytes the workload held"
    return (
        f'<tr data-memory="{_text(what)}"><td>{_text(what)} on {_text(stats["device"])}</td>'
        f'<td class="num">{_text(human(delta, "B"))}</td><td class="num" data-value="{delta}">{delta:,}</td>'
        # The CPU keeps no count of what was held before (baseline 0): nothing to say "above".
        f"<td>{_text(before)}</td>"
        f"<td>{_text(stats['metric'])}</td></tr>"
    )


def _measured(report: Mapping[str, Any]) -> str:
    """The training step (--train) and peak memory (--memory) the run measured; empty when
    it measured neither."""
    parts = []
    training = report.get("training")
    if training is not None:
        flops = training["flops"]
        phases = [(name, flops["by_phase"][name]) for name in _PHASES if name in flops["by_phase"]]
        rows = []
        for name, metric in [*phases, ("total", flops["total"])]:
            text, value = _shown(metric)
            status = metric.get("status", "")
            label = f"optimizer step ({training['optimizer']})" if name == "optimizer" else name
            rows.append(
                f'<tr data-phase="{_text(name)}"><td>{_text(label)}</td>'
                f'<td class="num">{_text(_human_metric({**metric, "unit": "FLOPs"}))}</td>'
                f'<td class="num" data-value="{_text("" if value is None else value)}">{_text(text)}</td>'
                f'<td class="status-{_text(status)}">{_text(status)}</td></tr>'
            )
        head = "<tr><th>Phase</th><th>FLOPs</th><th>Exact</th><th>Status</th></tr>"
        parts.append(
            "<h2>Training step: forward in training mode, loss, backward, optimizer step</h2>"
            f'<table id="training">{head}{"".join(rows)}</table>'
        )
    measured = [("forward", report.get("memory"))]
    if training is not None:
        measured.append(("training step", training.get("memory")))
    memory = [_memory_row(what, stats) for what, stats in measured if stats is not None]
    if memory:
        head = "<tr><th>Peak memory of</th><th>Held</th><th>Bytes</th><th></th><th>Metric</th></tr>"
        parts.append(f'<h2>Peak memory</h2><table id="memory">{head}{"".join(memory)}</table>')
    return "".join(parts)


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
            f'<td class="num">{_text(human(flops))}</td><td class="num" data-value="{flops}">{flops:,}</td>'
            f'<td class="status-{_text(status)}">{_text(status)}</td>'
            f'<td class="num">{owned:,}</td></tr>'
        )
    head = "<tr><th>Layer</th><th>Type</th><th>Operator FLOPs</th><th>Exact</th><th>Status</th><th>Parameters</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def _layers(report: Mapping[str, Any]) -> str:
    """The whole module tree (the one every table is drawn from: containers never called
    included, calls in call order), indented by depth, with a search box over names and types."""
    tree = _module_tree(report)
    total = sum(_flops(row)[0] for row in tree if row["parent"] is None)
    rows = []
    for row in tree:
        flops, status = _flops(row)
        kind = _kind(row)
        layer = None if row["layer"] is None else report["layers"][row["layer"]]
        # A container never called itself has no call index: "-".
        call = str(layer["call_index"]) if layer is not None else "-"
        path = row["path"] or "(root)"
        share = f"{100 * flops / total:.1f}%" if total else "-"
        rows.append(
            f'<tr data-row="{_text(row["path"])}" data-call="{call}" data-type="{_text(kind)}">'
            f'<td class="indent">{"  " * int(row["depth"])}{_text(path)}'
            f"{' (call ' + call + ')' if call not in ('0', '-') else ''}</td>"
            f'<td>{_text(row["type"] or "-")}</td><td class="num">{int(row["parameters"] or 0):,}</td>'
            f'<td class="num" title="{flops:,} FLOPs">{_text(human(flops))}</td>'
            f'<td class="num" data-value="{flops}">{flops:,}</td><td class="num">{share}</td>'
            f'<td class="status-{_text(status)}">{_text(status)}</td></tr>'
        )
    head = (
        "<tr><th>Layer</th><th>Type</th><th>Parameters</th><th>Operator FLOPs</th><th>Exact</th><th>Share</th>"
        "<th>Status</th></tr>"
    )
    search = (
        '<input id="search" type="search" placeholder="filter by name or type (conv, layer1.0, Linear)" '
        f'aria-label="filter the layers"> <span id="shown">{len(tree)}</span> of {len(tree)} rows'
    )
    return f'{search}<table id="layers">{head}{"".join(rows)}</table>'


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
    legend = '<span><i class="shade"></i>complete: lighter to darker, a smaller to a larger share</span>' + "".join(
        f'<span><i class="swatch" style="background:{colour}"></i>{status}</span>'
        for status, colour in (("partial", "#f0a35e"), ("unavailable", "#c9ccd2"))
    )
    operator = report["totals"].get("operator_flops")
    headline = _human_metric(operator) if operator is not None else "-"
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
        f'operator FLOPs <b id="headline" title="{_text(_shown(operator)[0])}">{_text(headline)}</b></div>'
        f"<h2>Where the operator FLOPs are: the module tree</h2>"
        f'<div class="legend">{legend} (width: share of the operator FLOPs; {rows} levels; click a box)</div>'
        f'<div id="details"></div>{icicle}'
        f"<h2>Operator FLOPs by category</h2>{_categories(report)}"
        f"<h2>Totals</h2>{_totals(report)}"
        f"{_measured(report)}"
        f"<h2>Diagnostics</h2>{_diagnostics(report)}"
        f"<h2>Costliest layers</h2>{_top_layers(report)}"
        f"<h2>Every layer call</h2>{_layers(report)}"
        f'<script type="application/json" id="torchscan-report">{embedded}</script>'
        f"<script>{SCRIPT}</script></body></html>\n"
    )
