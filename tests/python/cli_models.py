"""Models the command-line tests import by path (`cli_models:...`, with PYTHONPATH set)."""

import torch
from torch import nn


class Doubler(nn.Module):
    """A leaf without a module formula: module-formula totals become partial."""

    def forward(self, x):
        return x * 2


def unsupported():
    return nn.Sequential(nn.Linear(4, 8), Doubler())


def supported():
    """unsupported() with a supported leaf instead, and one more layer: complete, to compare with."""
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


class Broken(nn.Module):
    def forward(self, x):
        raise ValueError("this model rejects every input")


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.image = nn.Conv2d(3, 4, 3)
        self.side = nn.Linear(5, 4)

    def forward(self, image, side):
        return self.image(image).mean((2, 3)) + self.side(side)


def not_a_module():
    return torch.zeros(3)


instance = nn.Linear(6, 2)
