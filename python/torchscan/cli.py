"""The `torchscan` command: a model's summary from an import path, and report comparison.

    torchscan [MODEL] [--input-shape 3,224,224 ...] [--dtype D] [--device D] [--max-depth N]
              [--mode {full,structure}] [--receptive-field] [--strict] [--json PATH|-]
    torchscan compare BEFORE.json AFTER.json [--json PATH|-]

Exit status: 0 success; 2 usage error (bad option, MODEL that cannot be imported or built, bad
shape, dtype or device); 1 analysis failure (the model's forward raised, an incomplete analysis
with --strict, a report that cannot be read or compared), with the message on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import torch
from torch import nn

from .compare import compare_reports
from .crawler import crawl_module
from .errors import IncompleteAnalysisError
from .report import AnalysisReport, MetricResult, ReportDiff
from .utils import aggregate_info, format_info

__all__ = ["ExampleNet", "main"]

STDOUT = "-"
Shape = tuple[int, ...]


class ExampleNet(nn.Module):
    """The built-in model `torchscan` analyses without MODEL: a small image classifier (two
    convolution blocks with batch norm, ReLU and pooling, then a linear head) for 3x32x32 images.
    Every layer has a module formula, so its report is complete."""

    input_shape = (3, 32, 32)

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(32, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.classifier(self.features(x))
        return out


# ---- argument types (argparse turns their ArgumentTypeError into a usage error) ----


def _shape(text: str) -> Shape:
    """`3,224,224` -> (3, 224, 224): one input's shape without the batch dimension."""
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(
            f"invalid shape {text!r}: expected comma-separated non-negative integers without the batch "
            "dimension, like 3,224,224"
        )
    return tuple(int(part) for part in parts)


def _dtype(text: str) -> torch.dtype:
    """`float16` or `torch.float16` -> torch.float16."""
    name = text.removeprefix("torch.")
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise argparse.ArgumentTypeError(
            f"unknown dtype {text!r}: expected a torch dtype name like float32 or bfloat16"
        )
    return dtype


def _device(text: str) -> torch.device:
    try:
        return torch.device(text)
    except RuntimeError as error:
        raise argparse.ArgumentTypeError(f"invalid device {text!r}: {error}") from None


def _depth(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"invalid depth {text!r}: expected a non-negative integer")
    return int(text)


# ---- parsers ----


def _analyse_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Analyse one forward pass of a PyTorch model and print its layer table and totals "
            f"(parameters, module-formula and operator FLOPs, MACs, DMAs). Compare two saved reports with "
            f"'{prog} compare BEFORE.json AFTER.json'."
        ),
        epilog=(
            "MODEL is imported from the current directory or the installed packages, then called with no "
            "arguments (a module instance is used as is). Without MODEL, a small built-in example network "
            f"(torchscan.cli:ExampleNet) is analysed with input shape {','.join(map(str, ExampleNet.input_shape))}."
        ),
    )
    parser.add_argument(
        "model",
        nargs="?",
        metavar="MODEL",
        help="import path of an nn.Module class or zero-argument factory: 'torchvision.models:resnet18', "
        "'mypkg.nets:Net' (default: the built-in example network)",
    )
    parser.add_argument(
        "--input-shape",
        action="append",
        type=_shape,
        metavar="SHAPE",
        help="shape of one input without the batch dimension (a batch of 1 is added), e.g. 3,224,224; "
        "repeat for a model that takes several inputs",
    )
    parser.add_argument(
        "--dtype",
        action="append",
        type=_dtype,
        metavar="DTYPE",
        help="dtype of the generated inputs (float32, bfloat16, int64, ...): once for all inputs, or once per "
        "--input-shape (default: the model's first parameter's dtype); a floating dtype also casts the model's "
        "floating-point parameters and buffers",
    )
    parser.add_argument(
        "--device",
        type=_device,
        help="device to run on (cpu, cuda, cuda:1, ...); the model is moved there (default: where it was built)",
    )
    parser.add_argument("--max-depth", type=_depth, metavar="N", help="show layers down to depth N (root: 0)")
    parser.add_argument(
        "--mode",
        choices=("full", "structure"),
        default="full",
        help="'structure' records hierarchy, shapes and parameters only, without counting compute (default: full)",
    )
    parser.add_argument("--receptive-field", action="store_true", help="add the receptive-field column")
    parser.add_argument(
        "--strict", action="store_true", help="exit with status 1 when any total is incomplete or a diagnostic exists"
    )
    parser.add_argument(
        "--json",
        metavar="PATH",
        help="write the AnalysisReport as JSON to PATH; '-' writes only the JSON to stdout (no table)",
    )
    return parser


def _compare_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{prog} compare",
        description="Compare two AnalysisReport JSON files (written with --json): totals and per-layer changes.",
        epilog="A change is exact only when both sides are complete; '>= N' marks a partial value (a lower bound).",
    )
    parser.add_argument("before", metavar="BEFORE.json", type=Path, help="the reference report")
    parser.add_argument("after", metavar="AFTER.json", type=Path, help="the report to compare with it")
    parser.add_argument(
        "--json", metavar="PATH", help="write the ReportDiff as JSON to PATH; '-' writes only the JSON to stdout"
    )
    return parser


# ---- the model ----


def _load_object(spec: str) -> Any:
    """`pkg.mod:Attr.sub` (or `pkg.mod.Attr`) -> the object. Raises ValueError naming the problem."""
    if ":" in spec:
        module_name, _, attribute = spec.partition(":")
    else:
        module_name, _, attribute = spec.rpartition(".")
    if not module_name or not attribute:
        raise ValueError(f"invalid MODEL {spec!r}: expected an import path like 'package.module:ClassOrFactory'")
    # As `python -m`, uvicorn and pytest do: modules in the current directory are importable.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as error:
        raise ValueError(f"cannot import MODEL {spec!r}: {type(error).__name__}: {error}") from error
    for name in attribute.split("."):
        try:
            value = getattr(value, name)
        except AttributeError:
            raise ValueError(f"cannot import MODEL {spec!r}: {module_name} has no attribute {attribute!r}") from None
    return value


def _build_model(spec: str) -> nn.Module:
    target = _load_object(spec)
    if isinstance(target, nn.Module):
        return target
    if not callable(target):
        raise ValueError(f"MODEL {spec!r} is a {type(target).__name__}, not an nn.Module class or factory")
    try:
        model = target()
    except Exception as error:
        raise ValueError(
            f"cannot build MODEL {spec!r} by calling it with no arguments: {type(error).__name__}: {error}"
        ) from error
    if not isinstance(model, nn.Module):
        raise ValueError(f"MODEL {spec!r} returned a {type(model).__name__}, not an nn.Module")
    return model


def _check_device(device: torch.device) -> None:
    """A device string can be well-formed and still absent (cuda on a CPU-only machine)."""
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as error:
        raise ValueError(f"device {str(device)!r} is not available: {error}") from None


# ---- output ----


def _number(value: int | float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.6g}"


def _metric_text(metric: Mapping[str, Any] | None) -> str:
    """A MetricResult for people: the number when complete, `>= known` when partial (a lower
    bound, never a silent total), `unavailable` otherwise."""
    if metric is None:
        return "-"
    status = metric.get("status")
    if status == "complete":
        return _number(metric["value"])
    if status == "partial":
        return f">= {_number(metric['known_value'])}"
    if metric.get("method") == "not_requested":
        return "not requested"
    return "unavailable"


# The order people read totals in: size first, then compute; later additions sort after.
_TOTAL_ORDER = (
    "parameters",
    "trainable_parameters",
    "frozen_parameters",
    "parameter_bytes",
    "buffer_elements",
    "buffer_bytes",
    "module_flops",
    "macs",
    "dmas",
    "operator_flops",
)


def _ordered(names: Sequence[str] | Mapping[str, Any]) -> list[str]:
    rank = {name: i for i, name in enumerate(_TOTAL_ORDER)}
    return sorted(names, key=lambda name: (rank.get(name, len(rank)), name))


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    """Rows of cells as aligned text (numbers right-aligned), first row as the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def _totals_text(report: AnalysisReport) -> str:
    totals: Mapping[str, MetricResult] = report["totals"]
    rows = [["Total", "Value", "Unit", "Status"]]
    for name in _ordered(totals):
        metric = totals[name]
        rows.append([name, _metric_text(metric), metric.get("unit", ""), metric.get("status", "")])
    lines = ["Totals (>= N: partial, a lower bound)", *(f"  {line}" for line in _table(rows, {1}))]
    diagnostics = report.get("diagnostics", [])
    if diagnostics:
        lines.append(f"Diagnostics ({len(diagnostics)}):")
        for d in diagnostics:
            where = [f"metric {d['metric']}"]
            if "path" in d:
                where.insert(0, f"layer {d['path'] or '(root)'}")
            if "operator" in d:
                where.insert(0, f"operator {d['operator']}")
            lines.append(f"  {d['severity']}: {d['code']} ({', '.join(where)}): {d['message']}")
    return "\n".join(lines)


def _summary_text(view: AnalysisReport, report: AnalysisReport, receptive_field: bool) -> str:
    """The layer table of ``view`` (the report limited to --max-depth), then the totals of the
    whole ``report``."""
    # The core sizes each column from its content up to a fixed cap, then narrows the name,
    # shape and type columns to the terminal's width; "mid" marks a shortened name with "[...]".
    width = shutil.get_terminal_size().columns
    return f"{format_info(view, 'mid', receptive_field, max_width=width)}\n{_totals_text(report)}"


def _write_json(document: Mapping[str, Any], destination: str, out: TextIO) -> None:
    text = json.dumps(document, indent=2) + "\n"
    if destination == STDOUT:
        out.write(text)
    else:
        Path(destination).write_text(text)


class _Failure(Exception):
    """An analysis or comparison failure: exit status 1, message on stderr."""


# ---- commands ----


def _model(parser: argparse.ArgumentParser, options: argparse.Namespace) -> tuple[nn.Module, str, list[Shape]]:
    """The model to analyse, its name for messages, and its input shapes."""
    if options.model is None:
        return ExampleNet(), "torchscan.cli:ExampleNet", options.input_shape or [ExampleNet.input_shape]
    if not options.input_shape:
        parser.error(f"--input-shape is required with MODEL {options.model!r} (for example --input-shape 3,224,224)")
    try:
        return _build_model(options.model), options.model, options.input_shape
    except ValueError as error:
        parser.error(str(error))


def _place(
    parser: argparse.ArgumentParser, model: nn.Module, options: argparse.Namespace, inputs: int
) -> torch.dtype | list[torch.dtype] | None:
    """Moves/casts the model as --dtype and --device ask; returns crawl_module's ``dtype``."""
    dtypes: list[torch.dtype] = options.dtype or []
    if len(dtypes) not in (0, 1, inputs):
        parser.error(f"give --dtype once or once per --input-shape ({len(dtypes)} dtypes for {inputs} shapes)")
    # `--dtype bfloat16` means analysing the model in bfloat16: one floating dtype also casts the
    # model's floating-point parameters and buffers (integer inputs, like token ids, do not).
    floating = {d for d in dtypes if d.is_floating_point}
    if len(floating) == 1:
        model.to(floating.pop())
    if options.device is not None:
        try:
            _check_device(options.device)
        except ValueError as error:
            parser.error(str(error))
        model.to(options.device)
    if not dtypes:
        return None
    return dtypes[0] if len(dtypes) == 1 else dtypes


def _depth_view(parser: argparse.ArgumentParser, report: AnalysisReport, max_depth: int | None) -> AnalysisReport:
    if max_depth is None:
        return report
    try:
        return aggregate_info(report, max_depth)
    except ValueError as error:
        parser.error(f"argument --max-depth: {error}")


def _analyse(parser: argparse.ArgumentParser, argv: list[str], out: TextIO) -> int:
    options = parser.parse_args(argv)
    model, spec, shapes = _model(parser, options)
    dtype = _place(parser, model, options, len(shapes))
    input_shape = shapes[0] if len(shapes) == 1 else shapes
    incomplete: IncompleteAnalysisError | None = None
    try:
        report = crawl_module(
            model, input_shape, dtype, device=options.device, strict=options.strict, mode=options.mode
        )
    except IncompleteAnalysisError as error:  # --strict: still shown and written, then exit 1
        report, incomplete = error.report, error
    except Exception as error:
        raise _Failure(f"analysis of {spec} failed: {type(error).__name__}: {error}") from error
    view = _depth_view(parser, report, options.max_depth)
    if options.json is not None:
        _write_json(report, options.json, out)
    if options.json != STDOUT:
        out.write(_summary_text(view, report, options.receptive_field) + "\n")
    if incomplete is not None:
        written = f"; the report was written to {options.json}" if options.json not in (None, STDOUT) else ""
        raise _Failure(f"--strict: {str(incomplete).rstrip('.')}{written}")
    return 0


def _load_report(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as error:
        raise _Failure(f"cannot read {path}: {error.strerror or error}") from error
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise _Failure(f"{path} is not valid JSON: {error}") from error


def _layer_name(entry: Mapping[str, Any]) -> str:
    path = entry["path"] or "(root)"
    # A module called more than once: its later calls are told apart by their call index.
    return f"{path} (call {entry['call_index']})" if entry["call_index"] else path


def _delta_text(diff: Mapping[str, Any]) -> str:
    delta = diff.get("delta")
    if delta is None:
        return "?"
    return f"+{_number(delta)}" if delta > 0 else _number(delta)


def _diff_row(name: str, metric: str, diff: Mapping[str, Any]) -> list[str]:
    before, after = _metric_text(diff.get("before")), _metric_text(diff.get("after"))
    return [name, metric, before, after, _delta_text(diff), diff["status"]]


# What an added or removed layer call is summarised by: its FLOPs when it has them.
_HEADLINE_METRICS = ("operator_flops", "module_flops", "calls")


def _snapshot_row(entry: Mapping[str, Any], added: bool) -> list[str]:
    metrics = entry["metrics"]
    metric = next((m for m in _HEADLINE_METRICS if m in metrics), None) or next(iter(_ordered(metrics)), "")
    value = _metric_text(metrics[metric]) if metric else "-"
    before, after = ("-", value) if added else (value, "-")
    status = metrics[metric]["status"] if metric else "-"
    return [
        f"{'+' if added else '-'} {_layer_name(entry)}",
        metric,
        before,
        after,
        "added" if added else "removed",
        status,
    ]


def _diff_text(diff: ReportDiff) -> str:
    header = ["Metric", "Before", "After", "Change", "Status"]
    totals = diff["totals"]
    shown = [name for name in _ordered(totals) if totals[name].get("delta") != 0]
    inexact = sum(1 for name in shown if totals[name].get("delta") is None)
    lines = [f"Totals: {len(shown) - inexact} changed, {inexact} not exact, {len(totals) - len(shown)} unchanged"]
    if shown:
        rows = [header, *(_diff_row("", name, totals[name])[1:] for name in shown)]
        lines += [f"  {line}" for line in _table(rows, {1, 2, 3})]
    layers = diff["layers"]
    counts = {kind: len(layers[kind]) for kind in ("added", "removed", "changed")}
    lines.append(f"Layers: {counts['added']} added, {counts['removed']} removed, {counts['changed']} changed")
    rows = [["Layer", *header]]
    for entry in layers["changed"]:
        rows += [_diff_row(_layer_name(entry), m, entry["metrics"][m]) for m in _ordered(entry["metrics"])]
    rows += [_snapshot_row(entry, added=True) for entry in layers["added"]]
    rows += [_snapshot_row(entry, added=False) for entry in layers["removed"]]
    if len(rows) > 1:
        lines += [f"  {line}" for line in _table(rows, {2, 3, 4})]
    if inexact or any(row[4] == "?" for row in rows[1:]):
        lines.append("Change '?': not exact, because a side is partial (>= N, a lower bound) or unavailable.")
    return "\n".join(lines)


def _compare(parser: argparse.ArgumentParser, argv: list[str], out: TextIO) -> int:
    options = parser.parse_args(argv)
    for path in (options.before, options.after):
        if not path.is_file():
            parser.error(f"report file not found: {path}")
    before, after = _load_report(options.before), _load_report(options.after)
    try:
        diff = compare_reports(before, after)
    except (TypeError, ValueError) as error:
        raise _Failure(f"cannot compare {options.before} with {options.after}: {error}") from error
    if options.json is not None:
        _write_json(diff, options.json, out)
    if options.json != STDOUT:
        out.write(_diff_text(diff) + "\n")
    return 0


def _exit_status(code: object) -> int:
    """SystemExit's code as an exit status (argparse exits 0 for --help, 2 for usage errors)."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def main(argv: list[str] | None = None, *, prog: str = "torchscan") -> int:
    """Runs the command line ``argv`` (default: ``sys.argv[1:]``) and returns the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    command: Callable[[argparse.ArgumentParser, list[str], TextIO], int]
    if args[:1] == ["compare"]:
        parser, command, args = _compare_parser(prog), _compare, args[1:]
    else:
        parser, command = _analyse_parser(prog), _analyse
    try:
        return command(parser, args, sys.stdout)
    except _Failure as failure:
        sys.stdout.flush()
        print(f"{parser.prog}: error: {failure}", file=sys.stderr)
        return 1
    except OSError as error:  # writing --json PATH
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
    except SystemExit as exit_:
        return _exit_status(exit_.code)
