"""resnet18 inference under measure_flops against its bare forward, in pairs: one build per process.

Each of N pairs times a bare forward and then `measure_flops` of the same forward; the figure
is the median of the per-pair ratios. Run it for two builds in turn (each in its own process,
`PYTHONPATH` pointing at each) to compare them on a machine whose speed drifts.

    python benches/resnet_pairs.py [--pairs 15] [--modules all|none]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torchvision

import torchscan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--modules", choices=("all", "none"), default="all")
    args = parser.parse_args()
    model = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 224, 224)

    def forward() -> None:
        with torch.no_grad():
            model(x)

    modules = None if args.modules == "all" else []
    forward()
    ratios = []
    for _ in range(args.pairs):
        start = time.perf_counter()
        forward()
        bare = time.perf_counter() - start
        start = time.perf_counter()
        torchscan.measure_flops(forward, modules=modules)
        ratios.append((time.perf_counter() - start) / bare)
    print(f"{torchscan.__file__}: measure_flops / bare = {statistics.median(ratios):.3f} (median of {args.pairs})")


if __name__ == "__main__":
    main()
