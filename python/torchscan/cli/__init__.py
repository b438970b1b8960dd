"""The `torchscan` command: a model's summary from an import path, and report comparison.

    torchscan [MODEL] [--kw NAME=VALUE ...] [--input [NAME:]DTYPE:SHAPE[:LOW..HIGH] ...]
              [--input-shape 3,224,224 ... [--dtype D ...]] [--batch-size N] [--device D]
              [--max-depth N] [--mode {full,structure}] [--receptive-field]
              [--flops-by {module,operator,category}] [--width COLUMNS] [--strict]
              [--json PATH|-] [--csv PATH|-]
    torchscan compare BEFORE.json AFTER.json [--json PATH|-]
    torchscan merge RANK.json... [--throughput RANK.json...] [--json PATH|-]

Exit status: 0 success; 2 usage error (bad option, MODEL that cannot be imported or built, bad
shape, dtype, device or output path); 1 analysis failure (the model's forward raised, an
incomplete analysis with --strict, a report that cannot be read or compared), with the message
on stderr.

This file runs the commands; `options.py` holds the parsers (torch-free, for a fast --help),
`models.py` loads the model, `inputs.py` generates its inputs, `render.py` writes the text, JSON
and CSV output.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import torch
from torch import nn

from .._hints import TOKEN_IDS, batch_hint, looks_like_a_shape_error, looks_like_float_token_ids
from ..compare import compare_reports
from ..crawler import crawl_module
from ..distributed import merge_reports
from ..errors import IncompleteAnalysisError
from ..report import AnalysisReport
from ..utils import format_html
from .inputs import GeneratedInputs, generate, resolve_dtype
from .models import build_model, check_device
from .options import EXAMPLE_INPUT_SHAPE, InputSpec, merge_kwargs, subcommand_parser
from .render import (
    STDOUT,
    diff_text,
    flops_text,
    memory_text,
    merged_text,
    summary_text,
    training_report,
    training_text,
    write_csv,
    write_json,
)
from .training import TrainingStep, forward_memory, train_step

__all__ = ["ExampleNet", "main"]

Shape = tuple[int, ...]


class ExampleNet(nn.Module):
    """The built-in model `torchscan` analyses without MODEL: a small image classifier (two
    convolution blocks with batch norm, ReLU and pooling, then a linear head) for 3x32x32 images.
    Every layer has a module formula, so its report is complete."""

    input_shape = EXAMPLE_INPUT_SHAPE

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


class _Failure(Exception):
    """An analysis or comparison failure: exit status 1, message on stderr."""


# ---- commands ----


def _model(parser: argparse.ArgumentParser, options: argparse.Namespace) -> tuple[nn.Module, str]:
    """The model to analyse and its name for messages."""
    try:
        kwargs = merge_kwargs(options.kw)
    except ValueError as error:
        parser.error(str(error))
    if options.model is None:
        try:
            return ExampleNet(**kwargs), "torchscan.cli:ExampleNet"  # type: ignore[arg-type]
        except TypeError as error:
            parser.error(f"argument --kw: the example network takes num_classes only ({error})")
    try:
        return build_model(options.model, kwargs), options.model
    except ValueError as error:
        parser.error(str(error))


def _main_input_is_token_ids(model: nn.Module) -> bool:
    """A transformers model whose main input is token ids (BERT, GPT-2, Llama, ...)."""
    return getattr(model, "main_input_name", None) == "input_ids"


def _input_specs(parser: argparse.ArgumentParser, options: argparse.Namespace, model: nn.Module) -> list[InputSpec]:
    """--input, or --input-shape with --dtype, as one list of specs with dtypes resolved."""
    if options.input and options.input_shape:
        parser.error("give the inputs with --input or with --input-shape, not both")
    if options.input:
        if options.dtype:
            parser.error("argument --dtype: applies to --input-shape; an --input names its own dtype")
        specs: list[InputSpec] = options.input
    else:
        shapes = options.input_shape
        if not shapes and options.model is not None:
            example = (
                "--input input_ids:int64:128"
                if _main_input_is_token_ids(model)
                else "--input-shape 3,224,224 or --input float32:3,224,224"
            )
            parser.error(f"the inputs are required with MODEL {options.model!r} (for example {example})")
        shapes = shapes or [EXAMPLE_INPUT_SHAPE]
        dtypes: list[str] = options.dtype or []
        if len(dtypes) not in (0, 1, len(shapes)):
            parser.error(f"give --dtype once or once per --input-shape ({len(dtypes)} dtypes for {len(shapes)} shapes)")
        if not dtypes:
            first = next(iter(model.parameters()), None)
            default = str(first.dtype if first is not None else torch.float32).removeprefix("torch.")
            dtypes = ["int64" if _main_input_is_token_ids(model) else default]
        if len(dtypes) == 1:
            dtypes = dtypes * len(shapes)
        specs = [InputSpec(None, dtype, shape) for dtype, shape in zip(dtypes, shapes, strict=True)]
    for spec in specs:
        try:
            resolve_dtype(spec.dtype)
        except ValueError as error:
            parser.error(f"argument {'--input' if options.input else '--dtype'}: {error}")
    return specs


def _device(parser: argparse.ArgumentParser, options: argparse.Namespace) -> torch.device | None:
    if options.device is None:
        return None
    try:
        device = torch.device(options.device)
    except RuntimeError as error:
        parser.error(f"argument --device: invalid device {options.device!r}: {error}")
    try:
        check_device(device)
    except ValueError as error:
        parser.error(str(error))
    return device


def _place(model: nn.Module, specs: list[InputSpec], device: torch.device | None) -> None:
    """Moves/casts the model as the inputs and --device ask."""
    # Inputs in one floating dtype mean analysing the model in it (`--dtype bfloat16`): that
    # dtype also casts the model's floating-point parameters and buffers (integer inputs, like
    # token ids, do not).
    floating = {dtype for dtype in map(resolve_dtype, (spec.dtype for spec in specs)) if dtype.is_floating_point}
    if len(floating) == 1:
        model.to(floating.pop())
    if device is not None:
        model.to(device)


def _inputs_device(model: nn.Module, device: torch.device | None) -> torch.device | None:
    if device is not None:
        return device
    first = next(iter(model.parameters()), None)
    return first.device if first is not None else None


def _check_destination(parser: argparse.ArgumentParser, option: str, destination: str | None) -> None:
    """An output path that cannot be written is a usage error found before the analysis runs."""
    if destination is None or destination == STDOUT:
        return
    path = Path(destination)
    folder = path.parent
    if path.is_dir():
        parser.error(f"argument {option}: {destination!r} is a directory; give a file path")
    if not folder.is_dir():
        parser.error(f"argument {option}: the folder {str(folder)!r} of {destination!r} does not exist")
    if not os.access(path if path.exists() else folder, os.W_OK):
        parser.error(f"argument {option}: {destination!r} cannot be written (permission denied)")


def _failure_hint(error: Exception, specs: list[InputSpec], options: argparse.Namespace) -> str:
    """What to change when the forward rejected the generated inputs."""
    floating = any(resolve_dtype(spec.dtype).is_floating_point for spec in specs)
    if looks_like_float_token_ids(error, floating):
        return "; " + TOKEN_IDS.format(fix="--dtype int64 or --input NAME:int64:SHAPE")
    if options.input_shape and looks_like_a_shape_error(error):
        return "; " + batch_hint("SHAPE", f"--batch-size ({options.batch_size})", "3,224,224 rather than 1,3,224,224")
    return ""


def _depth(report: AnalysisReport, max_depth: int | None) -> int | None:
    """--max-depth, where a depth beyond the model's shows every layer (None)."""
    deepest = max((layer["depth"] for layer in report["layers"]), default=0)
    return None if max_depth is None or max_depth >= deepest else max_depth


def _width(options: argparse.Namespace, out: TextIO) -> int | None:
    """--width, else the terminal's width; no limit when the output is a file or a pipe."""
    if options.width is not None:
        return int(options.width)
    isatty = getattr(out, "isatty", None)
    if isatty is not None and isatty():
        return os.get_terminal_size(out.fileno()).columns
    return None


def _analyse(parser: argparse.ArgumentParser, argv: list[str], out: TextIO) -> int:
    options = parser.parse_args(argv)
    if options.flops_by is not None and options.mode == "structure":
        parser.error("argument --flops-by: --mode structure counts no operator FLOPs")
    if options.json == STDOUT and options.csv == STDOUT:
        parser.error("only one of --json and --csv can write to stdout ('-')")
    if options.html == STDOUT:
        parser.error("argument --html: give a file path (the page is not written to stdout)")
    if options.html is not None and options.mode == "structure":
        parser.error("argument --html: --mode structure counts no operator FLOPs to draw")
    for option, destination in (("--json", options.json), ("--csv", options.csv), ("--html", options.html)):
        _check_destination(parser, option, destination)
    device = _device(parser, options)
    model, spec = _model(parser, options)
    specs = _input_specs(parser, options, model)
    _place(model, specs, device)
    try:
        inputs = generate(specs, options.batch_size, model, _inputs_device(model, device))
    except ValueError as error:
        parser.error(f"argument --input: {error}")
    except (RuntimeError, MemoryError) as error:  # a shape too large to allocate
        shapes = ", ".join(str((options.batch_size, *spec.shape)) for spec in specs)
        raise _Failure(f"cannot generate the inputs {shapes}: {type(error).__name__}: {error}") from None
    report, incomplete = _run(model, spec, inputs, specs, options)
    depth = _depth(report, options.max_depth)
    # Every result of the run reaches every output: the measurements first, then the files.
    memory = _measure(forward_memory, spec, "the peak memory of", model, inputs) if options.memory else None
    step: TrainingStep | None = None
    if options.train:
        step = _measure(train_step, spec, "a training step of", model, inputs, options.optimizer, options.memory)
    if memory is not None:
        report["memory"] = dict(memory)
    if step is not None:
        report["training"] = training_report(step)
    if options.json is not None:
        write_json(report, options.json, out)
    if options.csv is not None:
        write_csv(report, options.csv, out)
    if options.html is not None:
        Path(options.html).write_text(format_html(report, spec), encoding="utf-8")
    if STDOUT not in (options.json, options.csv):
        width = _width(options, out)
        out.write(summary_text(report, depth, options.receptive_field, width) + "\n")
        if options.flops_by is not None:
            out.write("\n" + flops_text(report, options.flops_by, depth, width) + "\n")
        if memory is not None:
            out.write(
                "\nPeak memory (MB = 10^6 bytes)\n" + memory_text(memory, f"forward on {memory['device']}") + "\n"
            )
        if step is not None:
            out.write("\n" + training_text(step, width, options.flops_by) + "\n")
    if incomplete:  # --strict: the output is written all the same, then exit 1
        written = [path for path in (options.json, options.csv, options.html) if path not in (None, STDOUT)]
        where = f"; the report was written to {' and '.join(written)}" if written else ""
        raise _Failure(f"--strict: the analysis is incomplete for: {', '.join(incomplete)}{where}")
    return 0


def _measure(measure: Callable[..., Any], spec: str, what: str, model: nn.Module, *args: Any) -> Any:
    """--memory or --train, with a failure named as the analysis's is."""
    try:
        return measure(model, *args)
    except Exception as error:
        hint = ""
        if "Expected more than 1 value per channel when training" in str(error):
            hint = "; batch normalization needs --batch-size 2 or more in training mode"
        raise _Failure(f"{what} {spec} failed: {type(error).__name__}: {error}{hint}") from error


# What --strict judges: the metrics of the table's columns (the module-formula totals, torchscan
# 0.2's method, are judged when named with --strict-metrics); the receptive field with
# --receptive-field, which shows it.
TABLE_METRICS = frozenset(
    {
        "parameters",
        "trainable_parameters",
        "frozen_parameters",
        "parameter_bytes",
        "buffer_elements",
        "buffer_bytes",
        "operator_flops",
        # Diagnostics of operator counting name this metric.
        "flops",
    }
)
RECEPTIVE_FIELD_METRICS = frozenset({"receptive_field", "effective_stride", "effective_padding"})


def _judged(options: argparse.Namespace) -> frozenset[str] | None:
    """The metrics --strict judges (None: every one), or an empty set without --strict."""
    if options.strict_metrics is not None:
        return None if "all" in options.strict_metrics else options.strict_metrics
    if not options.strict:
        return frozenset()
    return TABLE_METRICS | (RECEPTIVE_FIELD_METRICS if options.receptive_field else frozenset())


def _run(
    model: nn.Module, spec: str, inputs: GeneratedInputs, specs: list[InputSpec], options: argparse.Namespace
) -> tuple[AnalysisReport, list[str]]:
    """The analysis, and with --strict the judged metrics that are incomplete: crawl_module's
    judgement (the totals of the metrics the mode measures, and the diagnostics), limited to the
    metrics --strict judges."""
    judged = _judged(options)
    try:
        report = crawl_module(
            model, args=inputs.args, kwargs=inputs.kwargs, mode=options.mode, strict=judged != frozenset()
        )
    except IncompleteAnalysisError as error:
        return error.report, [m for m in error.metrics if judged is None or m in judged]
    except Exception as error:
        hint = _failure_hint(error, specs, options)
        raise _Failure(
            f"analysis of {spec} failed on the inputs {inputs.describe()}: {type(error).__name__}: {error}{hint}"
        ) from error
    return report, []


def _load_report(path: Path) -> Any:
    """A report file's JSON; anything that is not (bytes that are not UTF-8, nesting deeper than
    the parser goes, an integer of more digits than Python converts) is a failure naming the file."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise _Failure(f"cannot read {path}: {error.strerror or error}") from error
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _Failure(f"{path} is not UTF-8 text (byte {error.start}): not a report written by torchscan") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise _Failure(f"{path} is not valid JSON: {error}") from None
    except RecursionError:
        raise _Failure(f"{path} nests its JSON too deeply to be a report") from None
    except ValueError as error:  # an integer beyond Python's digit limit
        raise _Failure(f"{path} holds a value that cannot be read: {error}") from None


def _compare(parser: argparse.ArgumentParser, argv: list[str], out: TextIO) -> int:
    options = parser.parse_args(argv)
    paths = Path(options.before), Path(options.after)
    for path in paths:
        if not path.is_file():
            parser.error(f"report file not found: {path}")
    _check_destination(parser, "--json", options.json)
    before, after = (_load_report(path) for path in paths)
    try:
        diff = compare_reports(before, after)
    except (TypeError, ValueError, RecursionError) as error:
        raise _Failure(f"cannot compare {options.before} with {options.after}: {error}") from None
    if options.json is not None:
        write_json(diff, options.json, out)
    if options.json != STDOUT:
        out.write(diff_text(diff) + "\n")
    return 0


def _merge(parser: argparse.ArgumentParser, argv: list[str], out: TextIO) -> int:
    options = parser.parse_args(argv)
    paths = [Path(p) for p in options.reports]
    timed = [Path(p) for p in options.throughput or []]
    for path in (*paths, *timed):
        if not path.is_file():
            parser.error(f"report file not found: {path}")
    if timed and len(timed) != len(paths):
        parser.error(f"--throughput takes one file per report: got {len(timed)} for {len(paths)} reports")
    _check_destination(parser, "--json", options.json)
    reports = [_load_report(path) for path in paths]
    throughput = [_load_report(path) for path in timed] or None
    try:
        merged = merge_reports(reports, throughput)
    except (TypeError, ValueError, RecursionError) as error:
        raise _Failure(f"cannot merge {', '.join(map(str, paths))}: {error}") from None
    if options.json is not None:
        write_json(merged, options.json, out)
    if options.json != STDOUT:
        out.write(merged_text(merged) + "\n")
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
    commands = {"compare": _compare, "merge": _merge}
    command = commands.get(args[0] if args else "", _analyse)
    parser, args = subcommand_parser(prog, args)
    try:
        return command(parser, args, sys.stdout)
    except _Failure as failure:
        sys.stdout.flush()
        print(f"{parser.prog}: error: {failure}", file=sys.stderr)
        return 1
    except OSError as error:  # writing an output file (checked before the analysis; a full disk)
        print(f"{parser.prog}: error: cannot write the output: {error.strerror or error}", file=sys.stderr)
        return 1
    except SystemExit as exit_:
        return _exit_status(exit_.code)
