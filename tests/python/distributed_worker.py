"""One rank of the multi-process tests (test_distributed.py): ``python distributed_worker.py
SCENARIO RANK WORLD PORT OUTDIR``. Joins a gloo group on 127.0.0.1, runs the scenario, writes
its reports to OUTDIR as JSON (``rank{R}.json``, and what the scenario adds), and exits 0.
Every collective has a timeout: a rank whose peer died fails instead of hanging.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import torchscan

TIMEOUT = datetime.timedelta(seconds=30)
WIDTH, HEADS, HIDDEN, TOKENS = 16, 2, 32, 5


def transformer() -> nn.Module:
    """A small transformer (two encoder layers). Every parameter's first dimension divides by 2
    and 4, so FSDP2 shards it without padding."""
    torch.manual_seed(0)

    def layer() -> nn.Module:
        return nn.TransformerEncoderLayer(WIDTH, HEADS, HIDDEN, dropout=0.0, batch_first=True)

    return nn.Sequential(layer(), layer())


def batch(rank: int) -> torch.Tensor:
    # Each rank its own data, of its own batch size: the FLOPs differ by rank.
    generator = torch.Generator().manual_seed(100 + rank)
    return torch.randn(rank + 1, TOKENS, WIDTH, generator=generator)


def write(out: Path, name: str, document: Any) -> None:
    (out / name).write_text(json.dumps(document))


def single_process_count(rank: int) -> torchscan.FlopReport:
    """The same step of the same model on this rank's batch, without distribution."""
    model = transformer()
    x = batch(rank)

    def step() -> None:
        model(x).sum().backward()

    return torchscan.measure_flops(step)


def training(kind: str, rank: int, out: Path) -> None:
    model = transformer()
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            fully_shard(layer)
        fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = batch(rank)

    def step() -> None:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()

    # DDP rebuilds its buckets on its second step (with broadcasts of their layout): the
    # measured step is the steady one.
    for _ in range(2):
        step()
    report = torchscan.measure_flops(step)
    write(out, f"rank{rank}.json", report)
    timed = torchscan.Throughput(peak_flops=1e12)
    with timed.step():
        step()
    write(out, f"throughput{rank}.json", timed.report())
    write(out, f"single{rank}.json", single_process_count(rank))
    # SGD's update of this rank's parameters (a shard under FSDP2): counted apart by the test.
    write(out, f"parameters{rank}.json", sum(p.numel() for p in model.parameters()))
    merged = torchscan.gather_reports(report, timed.report())
    if rank == 0:
        write(out, "merged.json", merged)


def collectives(rank: int, world: int, out: Path) -> None:
    """A hand-made sequence of collectives, with byte counts the test computes by hand."""
    import torch.distributed._functional_collectives as functional

    def sequence() -> None:
        ten = torch.ones(10)  # 10 float32: uneven ring chunks over 4 ranks
        dist.all_reduce(ten)
        dist.broadcast(torch.ones(3, dtype=torch.float64), src=1 % world)
        gathered = torch.empty(world * 6)
        dist.all_gather_into_tensor(gathered, torch.ones(6))
        dist.reduce_scatter_tensor(torch.empty(6), torch.ones(world * 6))
        rows = [r + 1 for r in range(world)]  # rank r sends r+1 rows to every rank
        sent = torch.ones(rows[rank] * world, 2)
        received = torch.empty(sum(rows), 2)
        dist.all_to_all_single(received, sent, [rows[r] for r in range(world)], [rows[rank]] * world)
        if rank == 0:
            dist.send(torch.ones(7, dtype=torch.int32), dst=world - 1)
        elif rank == world - 1:
            dist.recv(torch.empty(7, dtype=torch.int32), src=0)
        dist.barrier()
        reduced = functional.all_reduce(torch.ones(8, dtype=torch.bfloat16), "sum", dist.group.WORLD)
        (reduced * 2).sum()

    report = torchscan.measure_flops(sequence)
    write(out, f"rank{rank}.json", report)
    merged = torchscan.gather_reports(report)
    if rank == 0:
        write(out, "merged.json", merged)


def compiled(rank: int, world: int, out: Path) -> None:
    """A compiled function whose graph holds a functional collective (what DTensor and
    compiled DDP/FSDP programs run): priced at compile time, counted at each run."""
    import torch.distributed._functional_collectives as functional

    def step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return functional.all_reduce(x @ w, "sum", dist.group.WORLD)

    compiled_step = torch.compile(step)
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    compiled_step(x, w)  # compiles
    write(out, f"rank{rank}.json", torchscan.measure_flops(lambda: compiled_step(x, w)))


def tensor_parallel(rank: int, world: int, out: Path) -> None:
    """A tensor-parallel MLP (DTensor): column-wise then row-wise sharded linears."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = torch.randn(4, 8)
    model(x).sum().backward()
    write(out, f"rank{rank}.json", torchscan.measure_flops(lambda: model(x).sum().backward()))


def raises(rank: int) -> None:
    """Rank 1 fails before its all-reduce: rank 0's must time out, not hang."""
    if rank == 1:
        raise RuntimeError("rank 1 fails on purpose")
    torchscan.measure_flops(lambda: dist.all_reduce(torch.ones(4)))


def main() -> int:
    scenario, rank, world, port, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], Path(sys.argv[5])
    # A failing peer shows within seconds (its sockets close); the timeout bounds the rest.
    timeout = datetime.timedelta(seconds=5) if scenario == "raises" else TIMEOUT
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timeout)
    try:
        if scenario in ("ddp", "fsdp"):
            training(scenario, rank, out)
        elif scenario == "collectives":
            collectives(rank, world, out)
        elif scenario == "compiled":
            compiled(rank, world, out)
        elif scenario == "tensor_parallel":
            tensor_parallel(rank, world, out)
        elif scenario == "raises":
            raises(rank)
        else:
            raise SystemExit(f"unknown scenario {scenario!r}")
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
