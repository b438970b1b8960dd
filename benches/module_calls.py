"""Cost of one module call under torchscan's module labels, and of naming a model's module tree.

    python benches/module_calls.py [--calls 20000] [--rounds 15]

Module calls: a loop of N calls of an `nn.ReLU` on a 1-element tensor (a module call around one
operator), run bare, with two no-op Python global hooks (PyTorch's hooked call path, which any
module hook pays), inside `measure_flops(modules=[])` (no module named: the operator is counted,
its frames are read), inside `measure_flops` (every call labelled, by frames: the default) and
inside `measure_flops` labelling by hooks (`TORCHSCAN_MODULE_LABELS=hooks`). Each round runs the
variants once, in a shuffled order; figures are medians over the rounds, in microseconds added
per call over the bare loop (the operator's own observation included).

Naming: `ModuleLabels.name_root` on resnet18 and mobilenet_v3_small (what each measurement pays
once per root module), median of 200 calls.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import torch
import torchvision
from torch import nn

import torchscan
from torchscan import _labels
from torchscan._native import ops
from variants import labels_by_hooks


def noop_hooks(work: Callable[[], object]) -> None:
    pre = nn.modules.module.register_module_forward_pre_hook(lambda module, args: None)
    post = nn.modules.module.register_module_forward_hook(lambda module, args, out: None, always_call=True)
    try:
        work()
    finally:
        pre.remove()
        post.remove()


VARIANTS: dict[str, Callable[[Callable[[], object]], None]] = {
    "bare": lambda work: work(),
    "no-op hooks": noop_hooks,
    "measure_flops, no labels": lambda work: torchscan.measure_flops(work, modules=[]),
    "measure_flops": lambda work: torchscan.measure_flops(work),
    "measure_flops, labels by hooks": labels_by_hooks,
}


def module_calls(calls: int, rounds: int) -> dict[str, float]:
    module, x = nn.ReLU(), torch.zeros(1)

    def work() -> None:
        for _ in range(calls):
            module(x)

    samples: dict[str, list[float]] = {name: [] for name in VARIANTS}
    order = list(VARIANTS)
    for name in order:  # warm-up
        VARIANTS[name](work)
    for _ in range(rounds):
        random.shuffle(order)
        for name in order:
            start = time.perf_counter()
            VARIANTS[name](work)
            samples[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return {name: (seconds - medians["bare"]) / calls * 1e6 for name, seconds in medians.items()}


def naming_us(model: nn.Module) -> tuple[float, int]:
    handle = ops.open_session('{"modules": "named"}')
    try:
        labels = _labels.ModuleLabels(handle, None)
        times = []
        for _ in range(200):
            start = time.perf_counter()
            labels.name_root(model)
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e6, len(list(model.modules()))
    finally:
        ops.discard_session(handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=15)
    options = parser.parse_args()
    added = module_calls(options.calls, options.rounds)
    print(f"{options.calls} calls of nn.ReLU, median of {options.rounds} rounds, us added per call over bare:")
    for name, us in added.items():
        if name != "bare":
            print(f"  {name:30s} +{us:.2f} us")
    for name in ("resnet18", "mobilenet_v3_small"):
        us, count = naming_us(getattr(torchvision.models, name)(weights=None))
        print(f"naming {name} ({count} modules): {us:.1f} us")


if __name__ == "__main__":
    main()
