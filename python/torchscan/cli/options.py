"""The `torchscan` command's options: the two argument parsers and the values they parse.

Nothing here imports torch or the rest of torchscan, so that `torchscan --help` answers at once:
the console script's launcher (`python/_torchscan_cli.py`) loads this file on its own for a help
request. Values that need torch to check (a dtype's name, a device) are checked by the command.
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "EXAMPLE_INPUT_SHAPE",
    "InputSpec",
    "analyse_parser",
    "compare_parser",
    "help_requested",
    "merge_kwargs",
    "merge_parser",
    "parse_input",
    "parse_shape",
    "subcommand_parser",
]

Shape = tuple[int, ...]

# The built-in example network's input (torchscan.cli:ExampleNet), for the help text.
EXAMPLE_INPUT_SHAPE: Shape = (3, 32, 32)


def parse_shape(text: str) -> Shape:
    """`3,224,224` -> (3, 224, 224): one input's shape without the batch dimension; an empty
    text is a scalar per batch element (shape `(batch,)` once batched)."""
    if text.strip() == "":
        return ()
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(
            f"invalid shape {text!r}: expected comma-separated non-negative integers without the batch "
            "dimension, like 3,224,224"
        )
    return tuple(int(part) for part in parts)


@dataclass(frozen=True)
class InputSpec:
    """One generated input: passed by keyword when it has a name, else positionally. `low` and
    `high` bound integer values (uniform in [low, high)); None: the command's default range."""

    name: str | None
    dtype: str
    shape: Shape
    low: int | None = None
    high: int | None = None


INPUT_FORMAT = "[NAME:]DTYPE:SHAPE[:LOW..HIGH]"


def _range(text: str, spec: str) -> tuple[int, int]:
    low, separator, high = text.partition("..")
    try:
        bounds = (int(low), int(high)) if separator else None
    except ValueError:
        bounds = None
    if bounds is None or bounds[0] >= bounds[1]:
        raise argparse.ArgumentTypeError(
            f"invalid --input {spec!r}: the range {text!r} must be LOW..HIGH with integers LOW < HIGH "
            "(values are drawn from [LOW, HIGH))"
        )
    return bounds


def parse_input(text: str) -> InputSpec:
    """`input_ids:int64:128`, `float32:3,224,224`, `attention_mask:int64:128:1..2`."""
    parts = text.split(":")
    range_text = parts.pop() if len(parts) >= 3 and ".." in parts[-1] else None
    if len(parts) == 2:
        name, (dtype, shape) = None, parts
    elif len(parts) == 3:
        name, dtype, shape = parts
        if not name.isidentifier():
            raise argparse.ArgumentTypeError(
                f"invalid --input {text!r}: the name {name!r} is not a Python identifier (a keyword argument "
                "of the model's forward)"
            )
    else:
        raise argparse.ArgumentTypeError(
            f"invalid --input {text!r}: expected {INPUT_FORMAT}, like input_ids:int64:128 or float32:3,224,224"
        )
    if not dtype:
        raise argparse.ArgumentTypeError(f"invalid --input {text!r}: the dtype is missing ({INPUT_FORMAT})")
    low, high = _range(range_text, text) if range_text is not None else (None, None)
    return InputSpec(name, dtype.removeprefix("torch."), parse_shape(shape), low, high)


def _keyword(text: str) -> tuple[str, object]:
    """`num_layers=2` -> ("num_layers", 2): the value as a Python literal, else as a string."""
    name, separator, value = text.partition("=")
    name = name.strip()
    if not separator or not name.isidentifier():
        raise argparse.ArgumentTypeError(
            f"invalid keyword argument {text!r}: expected NAME=VALUE, like num_hidden_layers=2 or act='gelu'"
        )
    try:
        parsed: object = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        parsed = value  # a bare word: a string (`activation=gelu`)
    return name, parsed


def merge_kwargs(pairs: list[tuple[str, object]] | None) -> dict[str, object]:
    """The --kw pairs as a dict; a name given twice is an error (which one was meant?)."""
    merged: dict[str, object] = {}
    for name, value in pairs or []:
        if name in merged:
            raise ValueError(f"argument --kw: {name!r} is given twice")
        merged[name] = value
    return merged


def _metric_names(text: str) -> frozenset[str]:
    """`module_flops,macs` -> {"module_flops", "macs"}; `all` -> {"all"}."""
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    if not names or not all(name.replace("_", "").isalnum() for name in names):
        raise argparse.ArgumentTypeError(
            f"invalid metric names {text!r}: expected comma-separated total names (module_flops,macs) or 'all'"
        )
    return names


def _count(what: str, minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.strip().isdigit() or int(text) < minimum:
            raise argparse.ArgumentTypeError(f"invalid {what} {text!r}: expected an integer >= {minimum}")
        return int(text)

    return parse


def analyse_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Analyse one forward pass of a PyTorch model and print its layer table and totals "
            "(parameters, buffers, operator FLOPs per layer, module-formula FLOPs, MACs, DMAs). Compare two "
            f"saved reports with '{prog} compare BEFORE.json AFTER.json'."
        ),
        epilog=(
            "MODEL is imported from the current directory or the installed packages: an nn.Module class or "
            "factory (called with the --kw arguments), a module instance, or a Hugging Face transformers model "
            "or config class (built from the config with the --kw arguments, random weights, nothing "
            "downloaded: 'transformers:BertConfig --kw num_hidden_layers=2'). Generated inputs: floating "
            "values from a standard normal, integers uniform in [LOW, HIGH) (default HIGH: the smallest "
            "nn.Embedding's num_embeddings, else 2), booleans at random; seeded, so runs agree. Without MODEL, a "
            "small built-in example network (torchscan.cli:ExampleNet) is analysed with input shape "
            f"{','.join(map(str, EXAMPLE_INPUT_SHAPE))}."
        ),
    )
    parser.add_argument(
        "model",
        nargs="?",
        metavar="MODEL",
        help="import path of a model: 'torchvision.models:resnet18', 'mypkg.nets:Net', "
        "'transformers:BertConfig' (default: the built-in example network)",
    )
    parser.add_argument(
        "--input",
        action="append",
        type=parse_input,
        metavar="SPEC",
        help=f"one generated input, {INPUT_FORMAT}, without the batch dimension: 'input_ids:int64:128' (by "
        "keyword), 'float32:3,224,224' (positional), 'attention_mask:int64:128:1..2' (all ones); repeat for "
        "several inputs",
    )
    parser.add_argument(
        "--input-shape",
        action="append",
        type=parse_shape,
        metavar="SHAPE",
        help="shape of one positional input without the batch dimension, e.g. 3,224,224 (dtype from --dtype); "
        "repeat for a model that takes several inputs",
    )
    parser.add_argument(
        "--dtype",
        action="append",
        metavar="DTYPE",
        help="dtype of the --input-shape inputs (float32, bfloat16, int64, ...): once for all, or once per "
        "--input-shape (default: the model's first parameter's dtype; int64 for a transformers model whose "
        "main input is input_ids); a floating dtype also casts the model's floating-point parameters and buffers",
    )
    parser.add_argument(
        "--batch-size",
        type=_count("batch size", 1),
        default=1,
        metavar="N",
        help="the batch dimension prepended to every generated input (default: 1)",
    )
    parser.add_argument(
        "--kw",
        action="append",
        type=_keyword,
        metavar="NAME=VALUE",
        help="a keyword argument for MODEL's constructor or factory (for a transformers class: its config), "
        "as a Python literal or a bare string: --kw num_hidden_layers=2 --kw hidden_act=gelu; repeatable",
    )
    parser.add_argument(
        "--device",
        help="device to run on (cpu, cuda, cuda:1, ...); the model is moved there (default: where it was built)",
    )
    parser.add_argument(
        "--max-depth",
        type=_count("depth", 0),
        metavar="N",
        help="show layers down to depth N (root: 0; a depth beyond the model's shows every layer)",
    )
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
        "--train",
        action="store_true",
        help="also count one training step: the forward in training mode, a loss (the model's own, else the sum "
        "of its floating outputs), the backward and one optimizer step, each phase apart",
    )
    parser.add_argument(
        "--optimizer",
        choices=("adamw", "adam", "sgd"),
        default="adamw",
        help="the optimizer of the --train step, with its default settings (default: adamw)",
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="also measure the peak memory of the analysed forward (and of the --train step) on the model's "
        "device: PyTorch's tensor bytes on the CPU, the allocator's reserved bytes on CUDA and MPS",
    )
    parser.add_argument(
        "--width",
        type=_count("width", 40),
        metavar="COLUMNS",
        help="fit the tables to COLUMNS characters (default: the terminal's width; no limit when the output "
        "is not a terminal)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 1 when a metric of the table's columns is incomplete or has a diagnostic: "
        "parameters, buffers, operator FLOPs (and the receptive field with --receptive-field)",
    )
    parser.add_argument(
        "--strict-metrics",
        type=_metric_names,
        metavar="NAMES",
        help="--strict judging these metrics instead (comma-separated total names, like module_flops,macs; "
        "'all': every metric of the report)",
    )
    parser.add_argument(
        "--json",
        metavar="PATH",
        help="write the AnalysisReport as JSON to PATH; '-' writes only the JSON to stdout (no table)",
    )
    parser.add_argument(
        "--html",
        metavar="PATH",
        help="write a self-contained HTML report to PATH: the module tree as an icicle sized by operator FLOPs "
        "and coloured by status, FLOPs by category, totals and diagnostics (nothing fetched when viewed)",
    )
    parser.add_argument(
        "--csv",
        metavar="PATH",
        help="write the layer table as CSV to PATH (one row per layer call, full names, exact numbers, then one "
        "per module never called that holds parameters, its call_index empty); '-' writes only the CSV to stdout",
    )
    return parser


def compare_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{prog} compare",
        description="Compare two AnalysisReport JSON files (written with --json): totals and per-layer changes.",
        epilog="A change is exact only when both sides are complete; '>= N' marks a partial value (a lower bound).",
    )
    parser.add_argument("before", metavar="BEFORE.json", help="the reference report")
    parser.add_argument("after", metavar="AFTER.json", help="the report to compare with it")
    parser.add_argument(
        "--json", metavar="PATH", help="write the ReportDiff as JSON to PATH; '-' writes only the JSON to stdout"
    )
    return parser


def merge_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{prog} merge",
        description="Merge the FlopReport JSON files of a torch.distributed job's ranks (one per rank, as each "
        "rank wrote it) into one report: totals, per-rank figures, the most loaded and slowest rank, imbalance.",
        epilog="Each report names its rank (context.distributed); reports measured outside torch.distributed are "
        "taken in the order given. See docs/distributed.md.",
    )
    parser.add_argument("reports", metavar="RANK.json", nargs="+", help="one FlopReport per rank")
    parser.add_argument(
        "--throughput",
        metavar="RANK.json",
        nargs="+",
        help="each rank's ThroughputReport, in the order of the reports: the job's FLOP/s, MFU and slowest rank",
    )
    parser.add_argument(
        "--json", metavar="PATH", help="write the MergedReport as JSON to PATH; '-' writes only the JSON to stdout"
    )
    return parser


SUBCOMMANDS = ("compare", "merge")


def subcommand_parser(prog: str, args: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser for ``args`` (a subcommand's, or the analysis's) and the arguments it reads."""
    if args[:1] == ["compare"]:
        return compare_parser(prog), args[1:]
    if args[:1] == ["merge"]:
        return merge_parser(prog), args[1:]
    return analyse_parser(prog), args


def help_requested(args: list[str]) -> bool:
    """Whether `args` ask for help (a -h or --help before any `--`): the launcher then answers
    without importing torch."""
    for arg in args:
        if arg == "--":
            return False
        if arg in ("-h", "--help"):
            return True
    return False
