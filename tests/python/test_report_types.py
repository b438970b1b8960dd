"""Real reports conform to the TypedDicts in torchscan.report (what the Rust side emits)."""

import types
import typing
from typing import Any, Literal, NotRequired, Union, get_args, get_origin, get_type_hints

import torch
import torchvision
from torch import nn

import torchscan
from torchscan.report import AnalysisReport, FlopReport, ReportDiff


def problems(value, annotation, where="report"):
    """Every place where ``value`` does not fit ``annotation``."""
    if annotation is Any:
        return []
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is NotRequired:
        return problems(value, args[0], where)
    if origin in (Union, types.UnionType):
        options = [problems(value, option, where) for option in args]
        return [] if any(not p for p in options) else min(options, key=len)
    if origin is Literal:
        return [] if value in args else [f"{where}: {value!r} not in {args}"]
    if typing.is_typeddict(annotation):
        if not isinstance(value, dict):
            return [f"{where}: expected a mapping"]
        hints = get_type_hints(annotation, include_extras=True)
        found = []
        for key, hint in hints.items():
            if key not in value:
                if get_origin(hint) is not NotRequired:
                    found.append(f"{where}: missing {key!r}")
                continue
            found += problems(value[key], hint, f"{where}[{key!r}]")
        extra = set(value) - set(hints)
        return found + ([f"{where}: undeclared keys {sorted(extra)}"] if extra else [])
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: expected a dict"]
        return [p for k, v in value.items() for p in problems(v, args[1], f"{where}[{k!r}]")]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: expected a list"]
        return [p for i, v in enumerate(value) for p in problems(v, args[0], f"{where}[{i}]")]
    if annotation is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return [] if ok else [f"{where}: expected a number, got {type(value).__name__}"]
    if annotation is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return [] if ok else [f"{where}: expected an int, got {type(value).__name__}"]
    return [] if isinstance(value, annotation) else [f"{where}: expected {annotation}, got {type(value).__name__}"]


def test_flop_reports_conform():
    model = torchvision.models.resnet18()
    x = torch.randn(2, 3, 32, 32)

    def step():
        model(x).sum().backward()

    assert problems(torchscan.measure_flops(step), FlopReport) == []
    lib = torch.library.Library("torchscan_types", "DEF")
    lib.define("opaque(Tensor x) -> Tensor")
    lib.impl("opaque", lambda t: t.clone(), "CPU")
    partial = torchscan.measure_flops(lambda: torch.ops.torchscan_types.opaque(x))
    assert partial["total"]["status"] == "partial"
    assert problems(partial, FlopReport) == []


def test_analysis_reports_and_diffs_conform():
    full = torchscan.crawl_module(torchvision.models.resnet18(), (3, 32, 32))
    structure = torchscan.crawl_module(nn.Sequential(nn.Linear(2, 2), nn.Tanh()), (2,), mode="structure")
    for report in (full, structure):
        assert problems(report, AnalysisReport) == []
    assert problems(torchscan.compare_reports(structure, structure), ReportDiff) == []
    assert problems(torchscan.compare_reports(full, full), ReportDiff) == []


def test_checker_catches_mismatches():
    report = torchscan.measure_flops(lambda: None)
    broken = {**report, "total": {**report["total"], "status": "done"}}
    assert problems(broken, FlopReport) == [
        "report['total']['status']: 'done' not in ('complete', 'partial', 'unavailable')"
    ]
