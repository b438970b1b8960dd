"""Overhead of torchscan.measure_flops against the bare workload and FlopCounterMode.

Everything runs in one process, side by side: each round runs every variant once, in a shuffled
order, each between two runs of the bare workload (bare, variant, bare), so that machine drift
hits both sides alike. Times are medians over the rounds; the ratios are medians of the paired
ratios (a variant's time over the mean of the bare runs around it), which drift affects least.

    python benches/overhead.py [--rounds 7] [--ops 100000] [--json out.json] [--breakdown]

Workloads:
- tiny ops: a Python loop of N `torch.add` calls on 4-element tensors (the worst case for a
  per-operator cost: the bare op itself costs a few microseconds); the cost per operator is
  printed twice: from the difference of the two medians, and paired (the median of each run's
  time over the mean of the bare runs around it);
- resnet18: torchvision resnet18 forward, batch 1, 224x224, eval + no_grad;
- peak memory: `torchscan.process.measure_peak_memory(device="cpu")` around a resnet18 training
  step (batch 2, 224x224: forward, backward) against the bare step;
- crawl: `torchscan.crawl_module` on resnet50 (batch 1, 224x224) against its bare forward
  (eval, no_grad);
- mobilenet_v3_small (batch 1, 224x224, eval, no_grad): many small modules, where per-module
  cost shows: measure_flops and crawl_module against the bare forward;
- training step: `count_flops` around a tiny step (Linear(64, 64) forward and backward on 8
  rows), the cost a loop pays to count every step: microseconds added per step.

`--breakdown` also splits resnet18's overhead into its parts: a native session alone (operator
observation and the session's fixed cost), no-op global module hooks (PyTorch's hooked
module-call path, which any module hook pays), measure_flops labelling no module (`modules=[]`:
the frames are read, no module is named) and measure_flops labelling by module hooks
(`TORCHSCAN_MODULE_LABELS=hooks`, the way labels were read before labelling by frames; also a
mobilenet_v3_small row).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from collections.abc import Callable

import torch
import torchvision
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import torchscan
from torchscan.process import measure_peak_memory
from variants import labels_by_hooks


def bare(work: Callable[[], object]) -> None:
    work()


def native(work: Callable[[], object]) -> None:
    torchscan.measure_flops(work)


def flop_counter_mode(work: Callable[[], object]) -> None:
    with FlopCounterMode(display=False):
        work()


VARIANTS = {"bare": bare, "measure_flops": native, "FlopCounterMode": flop_counter_mode}


def session_only(work: Callable[[], object]) -> None:
    ops = torch.ops.torchscan
    handle = ops.open_session("")
    work()
    ops.close_session(handle)
    ops.finish_session(handle, "[]")


def noop_hooks(work: Callable[[], object]) -> None:
    pre = nn.modules.module.register_module_forward_pre_hook(lambda module, args: None)
    post = nn.modules.module.register_module_forward_hook(lambda module, args, out: None, always_call=True)
    work()
    pre.remove()
    post.remove()


def hooks_without_labels(work: Callable[[], object]) -> None:
    torchscan.measure_flops(work, modules=[])


def peak_memory(work: Callable[[], object]) -> None:
    measure_peak_memory(work, device="cpu")


MEMORY = {"bare": bare, "measure_peak_memory": peak_memory}

CRAWL_MODEL = torchvision.models.resnet50(weights=None).eval()
CRAWL_INPUT = torch.randn(1, 3, 224, 224)


def crawl(work: Callable[[], object]) -> None:
    torchscan.crawl_module(CRAWL_MODEL, args=(CRAWL_INPUT,))


CRAWL = {"bare": bare, "crawl_module": crawl}

MOBILE_MODEL = torchvision.models.mobilenet_v3_small(weights=None).eval()


def mobile_crawl(work: Callable[[], object]) -> None:
    torchscan.crawl_module(MOBILE_MODEL, args=(CRAWL_INPUT,))


MOBILE = {**VARIANTS, "crawl_module": mobile_crawl, "measure_flops, labels by hooks": labels_by_hooks}


def counted_step(work: Callable[[], object]) -> None:
    with torchscan.count_flops():
        work()


STEPS = 200


def steps_bare(step: Callable[[], object]) -> None:
    for _ in range(STEPS):
        step()


def steps_counted(step: Callable[[], object]) -> None:
    for _ in range(STEPS):
        counted_step(step)


STEP_LOOP = {"bare": steps_bare, "count_flops": steps_counted}

BREAKDOWN = {
    "bare": bare,
    "session only": session_only,
    "no-op module hooks": noop_hooks,
    "measure_flops, no labels": hooks_without_labels,
    "measure_flops, labels by hooks": labels_by_hooks,
    "measure_flops": native,
}


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(
    work: Callable[[], object],
    rounds: int,
    variants: dict[str, Callable[[Callable[[], object]], None]] = VARIANTS,
    added: dict[str, list[float]] | None = None,
) -> tuple[dict[str, float], dict[str, float]]:
    """Median seconds per variant, and the median per-round ratio of each variant to bare.

    Each round runs every other variant once, in a shuffled order, each between two bare runs
    (bare, variant, bare): its ratio is to the mean of those two, so that drift on the scale of
    one workload (the machine's other work, frequency changes) hits both sides alike. `added`,
    if given, receives each round's seconds over that mean, per variant."""
    order = [name for name in variants if name != "bare"]
    samples: dict[str, list[float]] = {name: [] for name in variants}
    ratios: dict[str, list[float]] = {name: [] for name in variants}
    for name in variants:  # warm-up
        variants[name](work)
    shuffle = random.Random(0).shuffle
    run_bare = variants["bare"]
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            before = timed(lambda: run_bare(work))
            seconds = timed(lambda n=name: variants[n](work))
            after = timed(lambda: run_bare(work))
            samples["bare"] += [before, after]
            samples[name].append(seconds)
            ratios[name].append(seconds / ((before + after) / 2))
            if added is not None:
                added.setdefault(name, []).append(seconds - (before + after) / 2)
    ratios["bare"] = [1.0]
    return (
        {name: statistics.median(values) for name, values in samples.items()},
        {name: statistics.median(values) for name, values in ratios.items()},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--breakdown", action="store_true", help="split resnet18's overhead into its parts")
    options = parser.parse_args()

    a, b, out = torch.randn(4), torch.randn(4), torch.empty(4)

    def tiny_ops() -> None:
        for _ in range(options.ops):
            torch.add(a, b, out=out)

    model = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)

    def resnet() -> None:
        with torch.no_grad():
            model(x)

    train_model = torchvision.models.resnet18(weights=None).train()
    train_x = torch.randn(2, 3, 224, 224)

    def training_step() -> None:
        train_model.zero_grad(set_to_none=True)
        train_model(train_x).sum().backward()

    tiny_added: dict[str, list[float]] = {}
    tiny, _ = measure(tiny_ops, options.rounds, added=tiny_added)
    net, net_ratio = measure(resnet, options.rounds)
    memory, memory_ratio = measure(training_step, options.rounds, MEMORY)

    def resnet50_forward() -> None:
        with torch.no_grad():
            CRAWL_MODEL(CRAWL_INPUT)

    crawled, crawl_ratio = measure(resnet50_forward, options.rounds, CRAWL)

    def mobile_forward() -> None:
        with torch.no_grad():
            MOBILE_MODEL(CRAWL_INPUT)

    mobile, mobile_ratio = measure(mobile_forward, options.rounds, MOBILE)
    layer, layer_x = nn.Linear(64, 64), torch.randn(8, 64)

    def tiny_step() -> None:
        layer(layer_x).sum().backward()

    steps, _ = measure(tiny_step, options.rounds, STEP_LOOP)
    step_added_us = (steps["count_flops"] - steps["bare"]) / STEPS * 1e6
    per_op = {name: (t - tiny["bare"]) / options.ops * 1e6 for name, t in tiny.items() if name != "bare"}
    # The same from each run's time over the bare runs around it (median of the rounds): drift
    # between rounds, which the difference of the two medians above takes in, cancels here.
    paired_per_op = {name: statistics.median(v) / options.ops * 1e6 for name, v in tiny_added.items()}
    result = {
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads",
        "torch": torch.__version__,
        "rounds": options.rounds,
        "tiny_ops": {
            "ops": options.ops,
            "seconds": tiny,
            "added_us_per_op": per_op,
            "added_us_per_op_paired": paired_per_op,
            "flop_counter_mode_over_measure_flops": per_op["FlopCounterMode"] / per_op["measure_flops"],
        },
        "resnet18_forward": {
            "seconds": net,
            "measure_flops_over_bare": net_ratio["measure_flops"],
            "flop_counter_mode_over_bare": net_ratio["FlopCounterMode"],
        },
        "crawl_resnet50": {"seconds": crawled, "crawl_module_over_bare": crawl_ratio["crawl_module"]},
        "mobilenet_v3_small_forward": {
            "seconds": mobile,
            "measure_flops_over_bare": mobile_ratio["measure_flops"],
            "flop_counter_mode_over_bare": mobile_ratio["FlopCounterMode"],
            "crawl_module_over_bare": mobile_ratio["crawl_module"],
            "measure_flops_labels_by_hooks_over_bare": mobile_ratio["measure_flops, labels by hooks"],
        },
        "training_step": {"steps": STEPS, "seconds": steps, "count_flops_added_us_per_step": step_added_us},
        "peak_memory_training_step": {
            "seconds": memory,
            "measure_peak_memory_over_bare": memory_ratio["measure_peak_memory"],
        },
    }
    print(f"tiny ops ({options.ops} x torch.add, median of {options.rounds}):")
    for name, t in tiny.items():
        extra = f"  (+{per_op[name]:.3f} us/op; paired +{paired_per_op[name]:.3f})" if name in per_op else ""
        print(f"  {name:16s} {t * 1e3:9.1f} ms{extra}")
    print(f"  FlopCounterMode's added cost is {result['tiny_ops']['flop_counter_mode_over_measure_flops']:.1f}x ours")
    print(f"resnet18 forward (batch 1, 224x224, no_grad, median of {options.rounds}):")
    for name, t in net.items():
        print(f"  {name:16s} {t * 1e3:9.2f} ms  ({net_ratio[name]:.3f}x bare, paired)")
    print(f"resnet18 training step (batch 2, 224x224) under measure_peak_memory, median of {options.rounds}:")
    for name, t in memory.items():
        print(f"  {name:20s} {t * 1e3:9.2f} ms  ({memory_ratio[name]:.3f}x bare, paired)")
    print(f"resnet50 (batch 1, 224x224) under crawl_module, median of {options.rounds}:")
    for name, t in crawled.items():
        print(f"  {name:20s} {t * 1e3:9.2f} ms  ({crawl_ratio[name]:.3f}x bare, paired)")
    print(f"mobilenet_v3_small forward (batch 1, 224x224, no_grad, median of {options.rounds}):")
    for name, t in mobile.items():
        print(f"  {name:30s} {t * 1e3:9.2f} ms  ({mobile_ratio[name]:.3f}x bare, paired)")
    print(f"tiny training step (Linear(64, 64) forward + backward), {STEPS} steps, median of {options.rounds}:")
    bare_step_us = steps["bare"] / STEPS * 1e6
    print(f"  bare {bare_step_us:.1f} us/step; count_flops around each step adds {step_added_us:.1f} us/step")
    if options.breakdown:
        _, parts = measure(resnet, options.rounds, BREAKDOWN)
        result["resnet18_breakdown"] = parts
        print(f"resnet18 overhead breakdown (paired ratios to bare, {options.rounds} rounds):")
        for name, ratio in parts.items():
            print(f"  {name:30s} {ratio:.3f}x")
    if options.json:
        with open(options.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
