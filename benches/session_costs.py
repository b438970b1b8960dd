"""What one `count_flops` block costs besides its operators' events: the fixed cost of opening
and closing it, its first operator, and each distinct operator it meets.

A training loop that counts every step pays these once per step. Each figure comes from R
interleaved rounds of N blocks, thread CPU time per block, against the same operators run bare:

- empty: `with count_flops(): pass` (and nothing else);
- first operator: one `torch.add` (4x4) in the block, less the empty block and a bare add;
- same operator again: each further `torch.add` in the block, less a bare add;
- distinct operator: a block of add, mul, sub, div against a block of four adds (each operator
  a session meets for the first time is described, and gets its own report entries);
- a tiny training step (Linear(64, 64) forward and backward on 8 rows) counted in its own
  block, against the same step bare: what a loop that counts every step pays per step.

Each figure is given as the median and the minimum over the rounds: on a shared machine the
minimum is the steadier estimate of a fixed cost (noise only adds).

    python benches/session_costs.py [--blocks 300] [--rounds 9]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

import torchscan

A = torch.randn(4, 4)


def per_block(work: Callable[[], object], blocks: int) -> float:
    start = time.thread_time()
    for _ in range(blocks):
        work()
    return (time.thread_time() - start) / blocks


def interleaved(variants: dict[str, Callable[[], object]], blocks: int, rounds: int) -> dict[str, list[float]]:
    """Microseconds per block of each variant, one sample per round; each round runs every
    variant once (so that a machine's drift falls on all of them alike)."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, work in variants.items():
            times[name].append(per_block(work, blocks) * 1e6)
    return times


def counted(ops: list[Callable[..., object]]) -> Callable[[], None]:
    def block() -> None:
        with torchscan.count_flops():
            for op in ops:
                op(A, A)

    return block


def bare(ops: list[Callable[..., object]]) -> Callable[[], None]:
    def block() -> None:
        for op in ops:
            op(A, A)

    return block


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(1)
    same = [torch.add] * 4
    distinct = [torch.add, torch.mul, torch.sub, torch.div]
    layer, rows = nn.Linear(64, 64), torch.randn(8, 64)

    def step() -> None:
        layer(rows).sum().backward()

    def counted_step() -> None:
        with torchscan.count_flops():
            step()

    variants = {
        "empty": counted([]),
        "one add": counted([torch.add]),
        "two adds": counted([torch.add] * 2),
        "four adds": counted(same),
        "four distinct": counted(distinct),
        "bare add": bare([torch.add]),
        "bare four distinct": bare(distinct),
        "step": counted_step,
        "bare step": step,
    }
    interleaved(variants, args.blocks, 1)  # warm up
    times = interleaved(variants, args.blocks, args.rounds)
    print(f"count_flops blocks (thread CPU time per block, {args.rounds} rounds x {args.blocks}): median / min")
    rows_out = {
        "empty block (open, close, no report read)": lambda t: t["empty"],
        "its first operator, added": lambda t: t["one add"] - t["empty"] - t["bare add"],
        "the same operator again, added": lambda t: t["two adds"] - t["one add"] - t["bare add"],
        "each distinct operator, added (of 3)": lambda t: (
            ((t["four distinct"] - t["bare four distinct"]) - (t["four adds"] - 4 * t["bare add"])) / 3
        ),
        "tiny training step counted per step, added": lambda t: t["step"] - t["bare step"],
    }
    for label, figure in rows_out.items():
        median = figure({name: statistics.median(v) for name, v in times.items()})
        least = figure({name: min(v) for name, v in times.items()})
        print(f"  {label:<44} {median:6.1f} / {least:6.1f} us")


if __name__ == "__main__":
    main()
