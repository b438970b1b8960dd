"""The `torchscan` command: a model's summary from an import path, and report comparison.

    torchscan [MODEL] [--input-shape 3,224,224 ...] [--dtype D] [--device D] [--max-depth N]
              [--mode {full,structure}] [--receptive-field] [--flops-by {module,operator,category}]
              [--strict] [--json PATH|-]
    torchscan compare BEFORE.json AFTER.json [--json PATH|-]

Exit status: 0 success; 2 usage error (bad option, MODEL that cannot be imported or built, bad
shape, dtype or device); 1 analysis failure (the model's forward raised, an incomplete analysis
with --strict, a report that cannot be read or compared), with the message on stderr.

This file parses the command line and runs the commands; `models.py` loads the model,
`render.py` writes the text and JSON output.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import torch
from torch import nn

from ..compare import compare_reports
from ..crawler import crawl_module
from ..errors import IncompleteAnalysisError
from ..report import AnalysisReport
from ..utils import aggregate_info
from .models import build_model, check_device
from .render import STDOUT, diff_text, flops_text, summary_text, write_json

__all__ = ["ExampleNet", "main"]

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
        "--flops-by",
        choices=("module", "operator", "category"),
        help="after the table, the operator FLOPs by module (the tree, to --max-depth), operator or category, "
        "with each row's share of the total",
    )
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
        return build_model(options.model), options.model, options.input_shape
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
            check_device(options.device)
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
    if options.flops_by is not None and options.mode == "structure":
        parser.error("argument --flops-by: --mode structure counts no operator FLOPs")
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
        write_json(report, options.json, out)
    if options.json != STDOUT:
        out.write(summary_text(view, report, options.receptive_field) + "\n")
        if options.flops_by is not None:
            out.write("\n" + flops_text(report, options.flops_by, options.max_depth) + "\n")
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
        write_json(diff, options.json, out)
    if options.json != STDOUT:
        out.write(diff_text(diff) + "\n")
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
