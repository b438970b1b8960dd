"""Golden reports: the report JSON of a few zoo models, byte for byte, against checked-in files.

The report-model redesign moves every report through new types; these files pin what users read
today, so that a move that changes a report (a key, an order, a value, a status) fails here.
Regenerate them only for an intended change, and say why in the commit:

    TORCHSCAN_BLESS=1 python -m pytest tests/python/test_golden_reports.py

Fields that describe the environment rather than the model (torch, Python and torchscan versions) are
replaced by a placeholder before the comparison.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

import torchscan
import zoo

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
ENVIRONMENT = ("torch_version", "python_version", "torchscan_version")
CASES = [("resnet18", "inference"), ("resnet18", "training"), ("bert_sdpa", "training"), ("gpt2_eager", "inference")]


def normalized(report: dict[str, Any]) -> str:
    report = json.loads(json.dumps(report))
    for key in ENVIRONMENT:
        if key in report.get("context", {}):
            report["context"][key] = "<environment>"
    return json.dumps(report, indent=1, sort_keys=False) + "\n"


def check(name: str, report: dict[str, Any]) -> None:
    path = GOLDEN / f"{name}.json"
    text = normalized(report)
    if os.environ.get("TORCHSCAN_BLESS"):
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with TORCHSCAN_BLESS=1 to write it"
    assert text == path.read_text(), f"{name}: the report differs from {path}"


@pytest.mark.parametrize(("model", "kind"), CASES)
def test_measure_flops_report_is_unchanged(model, kind):
    spec = zoo.BY_NAME[model]
    if not zoo.available(spec.package):
        pytest.skip(f"{spec.package} is not installed")
    check(f"flops_{model}_{kind}", torchscan.measure_flops(zoo.workload(spec, kind, torch.float32)))


@pytest.mark.parametrize("model", ["resnet18", "bert_sdpa"])
def test_crawl_module_report_is_unchanged(model):
    spec = zoo.BY_NAME[model]
    if not zoo.available(spec.package):
        pytest.skip(f"{spec.package} is not installed")
    module, (args, kwargs) = zoo.prepare(spec, torch.float32)
    check(f"crawl_{model}", torchscan.crawl_module(module, args=args, kwargs=kwargs))
