"""Reports parsed without the cyclic collector running mid-parse (python/torchscan/_parse.py)."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator

import pytest
import torch
from torch import nn

import torchscan
from torchscan._parse import parse_report


@pytest.fixture
def passes() -> Iterator[list[int]]:
    """The generations of the collector passes that start while the test runs."""
    started: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.collect()
    gc.callbacks.append(record)
    try:
        yield started
    finally:
        gc.callbacks.remove(record)


def _large_report() -> str:
    # About 30,000 dicts and lists: json.loads alone starts dozens of passes.
    layers = [
        {"path": f"layer{i}", "metrics": {"flops": {"status": "complete", "value": i}}, "shape": [1, i]}
        for i in range(10_000)
    ]
    return json.dumps({"layers": layers})


def test_a_large_report_is_parsed_without_collector_passes(passes: list[int]) -> None:
    text = _large_report()
    json.loads(text)
    assert passes, "the reference parse should start collector passes (the test would prove nothing)"
    before = len(passes)
    parsed = parse_report(text)
    # Read before anything else allocates: the collector, on again, runs at the next allocation
    # (with the report young, a pass that is cheap and promotes it one generation only).
    during = len(passes) - before
    assert during == 0
    assert parsed == json.loads(text)
    assert gc.isenabled()


def test_the_collector_is_left_as_found() -> None:
    text = _large_report()
    gc.disable()
    try:
        parse_report(text)
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(json.JSONDecodeError):
        parse_report(text[:-1])
    assert gc.isenabled()


def test_crawl_module_leaves_the_collector_on_and_gives_the_same_report() -> None:
    model = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(120)])
    x = torch.randn(2, 8)
    first = torchscan.crawl_module(model, args=(x,))
    assert gc.isenabled()
    gc.disable()
    try:
        second = torchscan.crawl_module(model, args=(x,))
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert json.dumps(first) == json.dumps(second)
    assert len(json.dumps(first)) > 32 * 1024  # large enough to be parsed with the collector paused
