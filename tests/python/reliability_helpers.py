"""Helpers of the reliability tests: what "the model and the process left as found" means."""

import torch
from torch import nn

_GLOBAL_HOOK_DICTS = (
    "_global_forward_pre_hooks",
    "_global_forward_hooks",
    "_global_forward_hooks_always_called",
    "_global_forward_hooks_with_kwargs",
    "_global_backward_pre_hooks",
    "_global_backward_hooks",
)
_MODULE_HOOK_DICTS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
)


def process_state():
    """Native sessions alive and the keys of PyTorch's global module-hook registries.

    The flag registries (``_with_kwargs``, ``_always_called``) count only for hooks that are still
    installed: PyTorch's handle of a global hook registered ``with_kwargs=True`` forgets to remove
    its ``_global_forward_hooks_with_kwargs`` flag (a known leak, see ``stale_hook_flags``).
    """
    registry = nn.modules.module
    live = registry._global_forward_hooks
    flags = ("_global_forward_hooks_always_called", "_global_forward_hooks_with_kwargs")
    hooks = {
        name: tuple(key for key in getattr(registry, name, {}) if name not in flags or key in live)
        for name in _GLOBAL_HOOK_DICTS
    }
    return {"live_sessions": torch.ops.torchscan.live_sessions(), "global_hooks": hooks}


def stale_hook_flags():
    """Entries of PyTorch's global ``with_kwargs`` flag registry whose hook is gone."""
    registry = nn.modules.module
    return len([key for key in registry._global_forward_hooks_with_kwargs if key not in registry._global_forward_hooks])


def model_state(model):
    """Every module's training flag and the keys of every per-module hook dict."""
    return {
        path: (module.training, {name: tuple(getattr(module, name, {})) for name in _MODULE_HOOK_DICTS})
        for path, module in model.named_modules()
    }


def assert_left_as_found(model, before_model, before_process):
    after_model, after_process = model_state(model), process_state()
    changed = {
        path: (before_model[path], after_model.get(path))
        for path in before_model
        if before_model[path] != after_model.get(path)
    }
    assert not changed, f"modules changed (path: (before, after)): {changed}"
    assert after_process == before_process, f"process state changed: {before_process} -> {after_process}"
    assert after_process["live_sessions"] == 0, "a native counting session was left open"


def mixed_mode_model():
    """A model whose training flags are not uniform, so that a blanket train()/eval() shows."""
    model = nn.Sequential(
        nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Sequential(nn.Dropout(0.5), nn.Linear(8, 2))
    )
    model.train()
    model[1].eval()
    model[3][0].eval()
    return model
