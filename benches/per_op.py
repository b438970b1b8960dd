"""Per-operator cost of measure_flops, steadier than a wall-clock median on a shared machine.

A Python loop of N `torch.add` calls on 4x4 tensors runs bare and under `measure_flops`,
alternately, for R rounds; the figure is (min measured - min bare) / N in the thread's CPU time
(`time.thread_time`), which other processes on the machine disturb least.

    python benches/per_op.py [--ops 20000] [--rounds 21]

Run it for two builds in turn (each in its own process) to compare them.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

import torchscan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    a = torch.randn(4, 4)

    def work() -> None:
        for _ in range(args.ops):
            torch.add(a, a)

    def cpu_time(f: Callable[[], object]) -> float:
        start = time.thread_time()
        f()
        return time.thread_time() - start

    work()
    bare, measured = [], []
    for _ in range(args.rounds):
        bare.append(cpu_time(work))
        measured.append(cpu_time(lambda: torchscan.measure_flops(work)))
    added = (min(measured) - min(bare)) / args.ops * 1e9
    bare_ns = min(bare) / args.ops * 1e9
    print(f"bare {bare_ns:.0f} ns/op, measure_flops adds {added:.0f} ns/op (thread CPU time, min of {args.rounds})")


if __name__ == "__main__":
    main()
