"""compare_reports on two large reports: time and peak memory.

Two AnalysisReports of N layer calls each (a real crawl_module layer record of a small model,
repeated under distinct paths, with every tenth layer's FLOPs changed in the second report), in
the shape a 100,000-layer model's reports have. The figures are the median wall time of R calls
and the peak resident memory the calls add to the process (``ru_maxrss`` before and after).

    python benches/compare_scale.py [--layers 100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import copy
import resource
import statistics
import time
from typing import Any

from torch import nn

import torchscan


def _reports(layers: int) -> tuple[dict[str, Any], dict[str, Any]]:
    template = torchscan.crawl_module(nn.Sequential(nn.Linear(16, 16), nn.ReLU()), (16,))
    record = template["layers"][1]
    before = {**template, "layers": []}
    for i in range(layers):
        layer = copy.deepcopy(record)
        layer["path"] = layer["name"] = f"blocks.{i}"
        before["layers"].append(layer)
    after = copy.deepcopy(before)
    for layer in after["layers"][::10]:
        flops = layer["metrics"]["module_flops"]
        flops["value"] = flops["known_value"] = flops["value"] + 1
    return before, after


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    before, after = _reports(args.layers)
    peak_before = _peak_mib()
    times = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        diff = torchscan.compare_reports(before, after)
        times.append(time.perf_counter() - start)
    assert len(diff["layers"]["changed"]) == (args.layers + 9) // 10
    print(f"compare_reports, {args.layers:,} layer calls per report, median of {args.rounds}:")
    print(f"  time {statistics.median(times):.2f} s (min {min(times):.2f}, max {max(times):.2f})")
    print(f"  peak memory added {_peak_mib() - peak_before:.0f} MiB (process peak {_peak_mib():.0f} MiB)")


if __name__ == "__main__":
    main()
