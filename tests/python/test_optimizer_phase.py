"""The `optimizer` phase: torch.optim's step is counted apart from the forward wherever phases
are reported (count_flops, measure_flops, merged reports, the command's --train), by hand."""

import torch
from torch import nn
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

import torchscan
from helpers import schema_validator

# Linear(4, 3) on a batch of 2, loss = out.sum(): forward addmm 2*(2*4*3) = 48 with its 6 bias
# adds, and the sum of 6 outputs: 6. Backward (the input needs no gradient): the weight's gradient mm 2*(3*2*4) = 48,
# the bias's sums the batch: 6. SGD (no momentum): p.add_(grad, alpha=-lr), one FLOP per
# parameter element: 12 + 3 = 15.
FORWARD, BACKWARD, SGD = 60, 54, 15


def linear():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    return model, torch.optim.SGD(model.parameters(), lr=0.01), torch.randn(2, 4)


def step(model, optimizer, x):
    model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def phases(report):
    return {name: (metric["status"], metric["value"]) for name, metric in report["by_phase"].items()}


def test_count_flops_reports_the_optimizer_step_apart():
    model, optimizer, x = linear()
    with torchscan.count_flops(modules=model) as counter:
        step(model, optimizer, x)
    report = counter.report()
    assert phases(report) == {
        "forward": ("complete", FORWARD),
        "backward": ("complete", BACKWARD),
        "optimizer": ("complete", SGD),
    }
    assert report["total"]["value"] == FORWARD + BACKWARD + SGD == 129
    schema_validator("flop_report").validate(report)
    # The hooks are installed only while a session counts.
    assert not _global_optimizer_pre_hooks and not _global_optimizer_post_hooks


def test_measure_flops_and_two_steps():
    model, optimizer, x = linear()
    report = torchscan.measure_flops(lambda: [step(model, optimizer, x) for _ in range(2)], modules=model)
    assert phases(report) == {
        "forward": ("complete", 2 * FORWARD),
        "backward": ("complete", 2 * BACKWARD),
        "optimizer": ("complete", 2 * SGD),
    }


def test_adam_by_hand():
    # Adam's first step (foreach off, defaults) on one parameter of 3 elements: the step
    # counter tensor += 1 (1), exp_avg.lerp_ (3 per element: 9), exp_avg_sq.mul_ (3) and
    # addcmul_ (3 per element: 9), denom = sqrt (3) / bias correction (3) + eps (3), then
    # param.addcdiv_ (3 per element: 9): 40, none of it forward.
    parameter = nn.Parameter(torch.ones(3))
    optimizer = torch.optim.Adam([parameter], foreach=False)
    parameter.grad = torch.ones(3)
    with torchscan.count_flops() as counter:
        optimizer.step()
    report = counter.report()
    assert phases(report) == {"forward": ("complete", 0), "optimizer": ("complete", 40)}
    assert report["by_operator"] == {
        "aten.add_": 1 + 3,
        "aten.lerp_": 9,
        "aten.mul_": 3,
        "aten.addcmul_": 9,
        "aten.sqrt": 3,
        "aten.div": 3,
        "aten.addcdiv_": 9,
    }


def test_no_step_no_optimizer_phase():
    model, _, x = linear()
    with torchscan.count_flops(modules=model) as counter:
        model(x).sum().backward()
    assert set(counter.report()["by_phase"]) == {"forward", "backward"}


def test_merged_reports_sum_the_optimizer_phase():
    model, optimizer, x = linear()
    report = torchscan.measure_flops(lambda: step(model, optimizer, x), modules=model)
    merged = torchscan.merge_reports([report, report])
    assert merged["by_phase"]["optimizer"]["value"] == 2 * SGD
    assert merged["by_phase"]["forward"]["value"] == 2 * FORWARD
    schema_validator("merged_report").validate(merged)


def test_a_step_outside_any_session_runs_no_hook():
    model, optimizer, x = linear()
    step(model, optimizer, x)  # no session: nothing is installed, nothing fails
    assert not _global_optimizer_pre_hooks
