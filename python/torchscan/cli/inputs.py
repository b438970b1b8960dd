"""The `torchscan` command's generated inputs: --input / --input-shape specs made into tensors.

Values are drawn from a generator seeded with 0 (two runs see the same inputs): floating values
from a standard normal, integers uniform in [low, high), booleans at random. Integer inputs are
token ids or indices far more often than anything else, so the default range keeps them valid
for every embedding table of the model: [0, the smallest nn.Embedding's num_embeddings), or
[0, 2) for a model without one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .options import InputSpec

__all__ = ["GeneratedInputs", "default_integer_high", "generate", "resolve_dtype"]

SEED = 0


def resolve_dtype(name: str) -> torch.dtype:
    """`float16` or `torch.float16` -> torch.float16; ValueError naming the bad dtype."""
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}: expected a torch dtype name like float32, bfloat16 or int64")
    return dtype


def default_integer_high(model: nn.Module) -> int:
    """The end of the default integer range: valid ids for every embedding table of `model`."""
    sizes = [m.num_embeddings for m in model.modules() if isinstance(m, nn.Embedding | nn.EmbeddingBag)]
    sizes = [size for size in sizes if size > 0]
    return min(sizes) if sizes else 2


@dataclass
class GeneratedInputs:
    args: tuple[torch.Tensor, ...]
    kwargs: dict[str, torch.Tensor]

    def describe(self) -> str:
        """`(1, 3, 224, 224) float32, input_ids=(1, 128) int64`, for messages."""

        def one(tensor: torch.Tensor) -> str:
            return f"{tuple(tensor.shape)} {str(tensor.dtype).removeprefix('torch.')}"

        parts = [one(t) for t in self.args] + [f"{name}={one(t)}" for name, t in self.kwargs.items()]
        return ", ".join(parts)


def _tensor(spec: InputSpec, dtype: torch.dtype, batch: int, high: int, generator: torch.Generator) -> torch.Tensor:
    shape = (batch, *spec.shape)
    if spec.low is not None and (dtype == torch.bool or dtype.is_floating_point or dtype.is_complex):
        raise ValueError(f"the range {spec.low}..{spec.high} applies to integer inputs, not to a {dtype} input")
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype.is_floating_point or dtype.is_complex:
        if dtype.itemsize == 1:  # float8 kinds: drawn in float32, then cast (no randn for them)
            return torch.randn(shape, generator=generator).to(dtype)
        return torch.randn(shape, generator=generator, dtype=dtype)
    low = 0 if spec.low is None else spec.low
    end = high if spec.high is None else spec.high
    info = torch.iinfo(dtype)
    if low < info.min or end - 1 > info.max:
        raise ValueError(f"the range {low}..{end} of an input does not fit {dtype} ([{info.min}, {info.max}])")
    return torch.randint(low, end, shape, generator=generator, dtype=dtype)


def generate(specs: Sequence[InputSpec], batch: int, model: nn.Module, device: torch.device | None) -> GeneratedInputs:
    """The tensors for `specs` (resolved dtypes), batched, on `device` (None: the CPU)."""
    generator = torch.Generator().manual_seed(SEED)
    high = default_integer_high(model)
    args: list[torch.Tensor] = []
    kwargs: dict[str, torch.Tensor] = {}
    for spec in specs:
        dtype = resolve_dtype(spec.dtype)
        tensor: Any = _tensor(spec, dtype, batch, high, generator)
        if device is not None:
            tensor = tensor.to(device)
        if spec.name is None:
            args.append(tensor)
        elif spec.name in kwargs:
            raise ValueError(f"the input {spec.name!r} is given twice")
        else:
            kwargs[spec.name] = tensor
    return GeneratedInputs(tuple(args), kwargs)
