import pytest
import torch
from torch import nn

import torchscan  # noqa: F401  (loads the native library)


@pytest.fixture(autouse=True)
def no_leaked_state():
    """Every test must leave no native session open and no global module hook installed."""
    pre = len(nn.modules.module._global_forward_pre_hooks)
    post = len(nn.modules.module._global_forward_hooks)
    yield
    assert torch.ops.torchscan.live_sessions() == 0
    assert len(nn.modules.module._global_forward_pre_hooks) == pre
    assert len(nn.modules.module._global_forward_hooks) == post


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)
