"""What Python's cyclic collector costs `crawl_module` calls: the collector's time per call
(from `gc.callbacks`) and the calls' mean and median cost against the bare forward.

A report parsed while the collector runs is promoted to the oldest generation, whose growth
triggers full collections of the whole process: the mean shows them, the median rarely does.

    python benches/crawl_collector.py [--model mobilenet_v3_small] [--calls 12]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any

import torch
import torchvision

import torchscan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenet_v3_small")
    parser.add_argument("--calls", type=int, default=12)
    args = parser.parse_args()
    model = getattr(torchvision.models, args.model)(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    spent = {"seconds": 0.0, "started": 0.0}
    passes = [0, 0, 0]

    def record(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            spent["started"] = time.perf_counter()
        else:
            spent["seconds"] += time.perf_counter() - spent["started"]
            passes[info["generation"]] += 1

    def bare() -> None:
        with torch.no_grad():
            model(x)

    for _ in range(3):
        torchscan.crawl_module(model, args=(x,))
    gc.callbacks.append(record)
    bare_times, crawl_times = [], []
    for _ in range(args.calls):
        start = time.perf_counter()
        bare()
        bare_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        torchscan.crawl_module(model, args=(x,))
        crawl_times.append(time.perf_counter() - start)
    gc.callbacks.remove(record)
    print(
        f"{args.model}, {args.calls} interleaved calls: collector {spent['seconds'] / args.calls * 1e3:.1f} ms per "
        f"crawl_module call (passes by generation {passes}); crawl_module / bare: mean "
        f"{sum(crawl_times) / sum(bare_times):.2f}x, median "
        f"{statistics.median(crawl_times) / statistics.median(bare_times):.2f}x"
    )


if __name__ == "__main__":
    main()
