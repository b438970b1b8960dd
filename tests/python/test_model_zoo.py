"""Every zoo workload (tests/python/zoo.py) is counted completely, and agrees with PyTorch's
FlopCounterMode operator by operator wherever FlopCounterMode is right.

FlopCounterMode is wrong in three places, each excluded here by name and tested with both
numbers in test_formulas_exact.py:
- `_native_multi_head_attention` (nn.MultiheadAttention's inference fast path) counts 0;
- CPU scaled-dot-product attention (`_scaled_dot_product_flash_attention_for_cpu` and its
  backward) counts 0;
- the weight gradient of a grouped convolution in `convolution_backward` is counted `groups`
  times too large.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchscan
import zoo
from helpers import FCM_CATEGORIES, fcm_counts_and_bias_terms

FCM_BLIND = {
    "aten._native_multi_head_attention",
    "aten._scaled_dot_product_flash_attention_for_cpu",
    "aten._scaled_dot_product_flash_attention_for_cpu_backward",
}


def _has_grouped_conv(module: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.conv._ConvNd) and m.groups > 1 for m in module.modules())


def _params(dtype_name: str, kind: str):
    for model in zoo.MODELS:
        marks = [pytest.mark.slow] if model.slow else []
        if not zoo.available(model.package):
            marks.append(pytest.mark.skip(reason=f"{model.package} is not installed"))
        yield pytest.param(model.name, kind, dtype_name, marks=marks, id=f"{model.name}-{kind}-{dtype_name}")


CASES = [case for dtype in zoo.DTYPES for kind in zoo.WORKLOADS for case in _params(dtype, kind)]


@pytest.mark.parametrize(("name", "kind", "dtype_name"), CASES)
def test_zoo_workload_is_complete_and_agrees_with_flop_counter_mode(name: str, kind: str, dtype_name: str):
    model = zoo.BY_NAME[name]
    dtype = zoo.DTYPES[dtype_name]

    module, batch = zoo.prepare(model, dtype)
    work = zoo.inference(module, batch) if kind == "inference" else zoo.training_step(module, batch, model)
    report = torchscan.measure_flops(work)
    assert report["diagnostics"] == []
    assert report["total"]["status"] == "complete"
    assert report["total"]["value"] > 0
    assert report["total"]["value"] == sum(report["by_operator"].values())

    # The same workload, freshly built (an optimizer step changed the weights, not the shapes).
    fcm_module, fcm_batch = zoo.prepare(model, dtype)
    fcm_work = (
        zoo.inference(fcm_module, fcm_batch) if kind == "inference" else zoo.training_step(fcm_module, fcm_batch, model)
    )
    # FlopCounterMode's counts, and the bias terms it drops (the bias convention), off the same calls.
    theirs, bias = fcm_counts_and_bias_terms(fcm_work)

    excluded = set(FCM_BLIND)
    if kind == "training" and _has_grouped_conv(module):
        excluded.add("aten.convolution_backward")
    ours = report["by_operator"]
    for op, count in theirs.items():
        if op not in excluded:
            expected = count + bias[op]
            assert ours.get(op) == expected, f"{op}: torchscan {ours.get(op)} vs FlopCounterMode {count} + bias"
    # Nothing FlopCounterMode counts is missing, and the categories it covers add up the same
    # (with the bias terms of the operators it prices).
    comparable = sum(report["by_category"].get(c, 0) for c in FCM_CATEGORIES)
    ours_excluded = sum(ours.get(op, 0) for op in excluded)
    theirs_excluded = sum(theirs.get(op, 0) for op in excluded)
    bias_included = sum(term for op, term in bias.items() if op not in excluded)
    assert comparable - ours_excluded == sum(theirs.values()) - theirs_excluded + bias_included


def test_plain_optimizers_without_foreach_are_counted():
    # The single-tensor (for-loop) implementations dispatch the per-parameter operators.
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 2))
    x = torch.rand(4, 8)
    for optimizer in (
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False),
        torch.optim.Adam(model.parameters(), foreach=False),
        torch.optim.AdamW(model.parameters(), foreach=False, amsgrad=True),
    ):

        def step(optimizer=optimizer) -> None:
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()

        step()  # the state (momentum buffers, moments) exists from the second step on
        report = torchscan.measure_flops(step)
        assert report["diagnostics"] == [], type(optimizer).__name__
        assert report["total"]["status"] == "complete"
