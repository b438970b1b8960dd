"""Pruning masks (``torch.nn.utils.prune``): how much of each pruned parameter a mask keeps.

Pruning replaces a module's parameter ``weight`` by ``weight_orig`` (the dense parameter, which
the contract's parameter count keeps counting) and a buffer ``weight_mask``; a forward pre-hook
(a ``BasePruningMethod``) recomputes ``weight = weight_orig * weight_mask`` before each call. The
report adds what the masks keep as separate fields (``parameters.effective``, the
``effective_parameters`` and ``effective_macs`` totals, a layer's ``effective_macs``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn.utils import prune

__all__ = ["Mask", "masks"]


class Mask(NamedTuple):
    """One pruned parameter: the dense tensor, the elements its mask keeps (None when they
    cannot be counted: a mask on the meta device), and its size."""

    original: torch.Tensor
    kept: int | None
    numel: int


def masks(module: nn.Module) -> dict[str, Mask]:
    """``{tensor name: Mask}`` of the parameters of ``module`` (not its children) that a pruning
    method masks; empty for an unpruned module. Called before the analysed forward runs, so the
    counting is not among the model's operators."""
    found: dict[str, Mask] = {}
    if not module._forward_pre_hooks:
        return found
    for hook in module._forward_pre_hooks.values():
        # A PruningContainer (several prunings of one tensor) is a BasePruningMethod too, and
        # its mask buffer is the combined one.
        if not isinstance(hook, prune.BasePruningMethod):
            continue
        name = getattr(hook, "_tensor_name", None)
        if not isinstance(name, str):
            continue
        original = module._parameters.get(f"{name}_orig")
        mask = module._buffers.get(f"{name}_mask")
        if original is None or mask is None or mask.shape != original.shape:
            continue
        kept = None if mask.is_meta else int(torch.count_nonzero(mask.detach()))
        found[name] = Mask(original, kept, original.numel())
    return found
