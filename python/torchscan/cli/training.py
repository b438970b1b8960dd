"""The `torchscan` command's --train and --memory: one training step counted by phase, and the
peak memory of the analysed forward (and of that step).

The training step is what a training loop runs once per batch: the forward in training mode,
a loss, its backward, and one optimizer step. The loss is the sum of every floating-point
tensor the model returns (its ``loss`` when it returns one, as transformers models do given
labels): a stand-in whose own work (one add per output element) is counted with the forward.
The whole step is counted in one session: its phases (`forward`, `backward`, `optimizer`, the
last marked by torch.optim's step hooks) tell the parts apart, as they do for any training loop
under count_flops.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..flops import count_flops
from ..process import MemoryStats, measure_peak_memory
from ..report import FlopReport
from .inputs import GeneratedInputs

__all__ = ["OPTIMIZERS", "TrainingStep", "forward_memory", "train_step"]

# --optimizer: the optimizers a step can take, built with their defaults.
OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "adamw": torch.optim.AdamW,
    "adam": torch.optim.Adam,
    "sgd": lambda params: torch.optim.SGD(params, lr=0.01),
}


@dataclass
class TrainingStep:
    """The FLOPs of one step (one report: by_phase forward, backward, optimizer) and, with
    --memory, the peak memory of a second, identical step."""

    optimizer_name: str
    flops: FlopReport
    memory: MemoryStats | None = None


def _floating_leaves(value: Any, found: list[torch.Tensor]) -> None:
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            found.append(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            _floating_leaves(item, found)
    elif isinstance(value, list | tuple):
        for item in value:
            _floating_leaves(item, found)


def _loss(output: Any) -> torch.Tensor:
    """The model's `loss` output when it has one, else the sum of its floating outputs."""
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.requires_grad:
        return loss
    leaves: list[torch.Tensor] = []
    _floating_leaves(output, leaves)
    leaves = [leaf for leaf in leaves if leaf.requires_grad]
    if not leaves:
        raise ValueError(
            "the model's outputs hold no floating-point tensor that depends on its parameters, so there is no "
            "loss to train on"
        )
    total = leaves[0].real.float().sum() if leaves[0].is_complex() else leaves[0].float().sum()
    for leaf in leaves[1:]:
        total = total + (leaf.real if leaf.is_complex() else leaf).float().sum()
    return total


def train_step(model: nn.Module, inputs: GeneratedInputs, optimizer_name: str, memory: bool) -> TrainingStep:
    """One training step of `model` on `inputs`, counted; with `memory`, the peak memory of a
    second, identical step (measured apart, so that counting does not weigh on it)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise ValueError("the model has no trainable parameters (requires_grad): there is nothing to train")
    optimizer = OPTIMIZERS[optimizer_name](trainable)
    model.train()

    def forward_backward() -> None:
        _loss(model(*inputs.args, **inputs.kwargs)).backward()  # type: ignore[no-untyped-call]

    with count_flops(modules=model) as counted:
        forward_backward()
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    step = TrainingStep(optimizer_name, counted.report())
    if memory:
        device = _device_of(model)

        def whole_step() -> None:
            forward_backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        step.memory = measure_peak_memory(whole_step, device=device)
    return step


def _device_of(model: nn.Module) -> torch.device:
    first: torch.Tensor | None = next(iter(model.parameters()), None)
    if first is None:
        first = next(iter(model.buffers()), None)
    return first.device if first is not None else torch.device("cpu")


def forward_memory(model: nn.Module, inputs: GeneratedInputs) -> MemoryStats:
    """The peak memory of the analysed forward (eval mode, no autograd), run once more."""
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return measure_peak_memory(lambda: model(*inputs.args, **inputs.kwargs), device=_device_of(model))
    finally:
        model.train(training)
