"""Measures a built-in example model (torchvision resnet18, random weights) with torchscan.

    python examples/demo.py

Counts every operator of one inference pass and of one training step, shows where the FLOPs
go, and puts the result next to PyTorch's own FlopCounterMode.
"""

from __future__ import annotations

import torch
import torchvision
from torch.utils.flop_counter import FlopCounterMode

import torchscan


def show(title: str, report: torchscan.FlopReport) -> None:
    total = report["total"]
    number = total["value"] if total["status"] == "complete" else total["known_value"]
    print(f"\n{title}: {total['status']}, {number / 1e9:.3f} GFLOPs")
    for category, flops in sorted(report["by_category"].items(), key=lambda kv: -kv[1]):
        print(f"  {category:14s} {flops / 1e9:9.4f} GFLOPs")
    for phase, metric in report["by_phase"].items():
        known = metric["value"] if metric["status"] == "complete" else metric["known_value"]
        print(f"  phase {phase:8s} {known / 1e9:9.4f} GFLOPs ({metric['status']})")
    for diagnostic in report["diagnostics"]:
        print(f"  ! {diagnostic['code']}: {diagnostic['message']}")


def main() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None)
    x = torch.randn(1, 3, 224, 224)

    model.eval()
    with torch.no_grad():
        inference = torchscan.measure_flops(lambda: model(x))
        with FlopCounterMode(display=False) as pytorch:
            model(x)
    show("resnet18 inference (batch 1, 224x224)", inference)
    print("  largest modules:")
    top = sorted(inference["by_module"].items(), key=lambda kv: -kv[1])[1:6]
    for name, flops in top:
        print(f"    {name:24s} {flops / 1e9:8.4f} GFLOPs ({inference['by_module_status'][name]})")
    comparable = sum(inference["by_category"].get(c, 0) for c in ("matmul", "conv", "attention"))
    print(f"  matmul+conv: {comparable:,} FLOPs; FlopCounterMode: {pytorch.get_total_flops():,}")

    model.train()
    optimizer = torch.optim.AdamW(model.parameters())
    batch, target = torch.randn(2, 3, 224, 224), torch.tensor([1, 2])

    def training_step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(batch), target).backward()
        optimizer.step()

    show("resnet18 training step: forward, loss, backward, AdamW (batch 2)", torchscan.measure_flops(training_step))


if __name__ == "__main__":
    main()
