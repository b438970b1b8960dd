import gc

import pytest
import torch
from torch import nn

import torchscan  # noqa: F401  (loads the native library)


@pytest.fixture(autouse=True)
def no_leaked_state():
    """Every test must leave no native session open (nor an unread counter's kept session) and no
    global module hook installed."""
    pre = len(nn.modules.module._global_forward_pre_hooks)
    post = len(nn.modules.module._global_forward_hooks)
    kept = torch.ops.torchscan.kept_sessions()
    yield
    assert torch.ops.torchscan.live_sessions() == 0
    if torch.ops.torchscan.kept_sessions() > kept:
        gc.collect()  # a counter held by a reference cycle (a traceback's frames) is freed here
    assert torch.ops.torchscan.kept_sessions() <= kept, "an unread count_flops counter's session was never freed"
    assert len(nn.modules.module._global_forward_pre_hooks) == pre
    assert len(nn.modules.module._global_forward_hooks) == post


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)
