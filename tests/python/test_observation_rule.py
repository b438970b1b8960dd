"""torchscan's per-operator counts against a dispatch log: the kernels that ran.

A TorchDispatchMode sits at the bottom of the dispatcher, below autograd and below torch.func's
transforms: it sees each kernel call once, with the shapes the kernel really ran on (a vmapped
call arrives batched; a forward-mode tangent or a saved-tensor hook arrives as an operator of its
own; a recomputation stopped before its kernel never arrives). The workload runs twice, once
under the log and once measured (never nested), and the two must agree call for call and, priced
from the logged shapes, FLOP for FLOP.
"""

import functools
import math
from collections import Counter

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, hessian, jacfwd, jacrev, jvp, vjp, vmap
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

import torchscan


def _numel(shape):
    return math.prod(shape)


def _mm(ins, out):
    (m, k), (_, n) = ins[0], ins[1]
    return 2 * m * k * n


def _bmm(ins, out):
    (b, m, k), (_, _, n) = ins[0], ins[1]
    return 2 * b * m * k * n


def _convolution(ins, out):
    # weight [C_out, C_in / groups, *kernel]: each output element takes C_in/groups * kernel MACs.
    return 2 * _numel(out) * _numel(ins[1][1:])


# The hand formulas for the arithmetic these workloads run (torchscan's conventions).
PRICES = {
    "aten.mm": _mm,
    "aten.bmm": _bmm,
    "aten.convolution": _convolution,
    "aten.relu": lambda ins, out: _numel(out),
    "aten.threshold_backward": lambda ins, out: _numel(out),
    "aten.add": lambda ins, out: _numel(out),
    "aten.mul": lambda ins, out: _numel(out),
    "aten.sum": lambda ins, out: _numel(ins[0]),
}
# What the log may show besides: views, metadata, allocation and creation (no arithmetic).
NO_ARITHMETIC = {
    "aten._efficientzerotensor",
    "aten._has_same_storage_numel",
    "aten._unsafe_view",
    "aten.alias",
    "aten.detach",
    "aten.diagonal",
    "aten.expand",
    "aten.fill_",
    "aten.is_same_size",
    "aten.new_zeros",
    "aten.ones",
    "aten.ones_like",
    "aten.permute",
    "aten.select",
    "aten.split_with_sizes",
    "aten.squeeze",
    "aten.t",
    "aten.transpose",
    "aten.unsqueeze",
    "aten.view",
    "aten.zeros",
    "aten.zeros_like",
}


class DispatchLog(TorchDispatchMode):
    """Records every ATen call that reaches it: (operator, input shapes, output shape)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
        out_shape = tuple(out.shape) if isinstance(out, torch.Tensor) else None
        self.calls.append((f"{func.namespace}.{func._opname}", shapes, out_shape))
        return out


def logged(workload):
    """The kernels `workload` ran: calls and FLOPs per operator, priced from the logged shapes."""
    with DispatchLog() as log:
        workload()
    calls, flops = Counter(), Counter()
    for name, ins, out in log.calls:
        if name in PRICES:
            calls[name] += 1
            flops[name] += PRICES[name](ins, out)
        else:
            assert name in NO_ARITHMETIC, f"the log shows {name}, which this test cannot price"
    return dict(calls), dict(flops)


def assert_matches_log(workload):
    calls, flops = logged(workload)
    report = torchscan.measure_flops(workload)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["operator_calls"] == calls
    assert report["by_operator"] == flops
    return report


def mlp():
    return nn.Sequential(nn.Linear(8, 16, bias=False), nn.ReLU(), nn.Linear(16, 4, bias=False))


def step_of(net, x, wrap=None):
    def step():
        net.zero_grad()
        (net(x) if wrap is None else wrap(net, x)).sum().backward()

    return step


def test_forward_and_training_step():
    net, x = mlp(), torch.randn(2, 8)
    report = assert_matches_log(lambda: net(x))
    assert report["operator_calls"] == {"aten.mm": 2, "aten.relu": 1}
    report = assert_matches_log(step_of(net, x))
    assert report["operator_calls"] == {"aten.mm": 5, "aten.relu": 1, "aten.sum": 1, "aten.threshold_backward": 1}


def test_input_gradient_batched_with_is_grads_batched():
    net, x = mlp(), torch.randn(2, 8, requires_grad=True)

    def workload():
        out = net(x)
        torch.autograd.grad(out, x, torch.ones(3, 2, 4), is_grads_batched=True)

    report = assert_matches_log(workload)
    assert report["operator_calls"]["aten.mm"] == 4  # 2 forward, 2 batched backward


def test_jvp_and_forward_ad():
    net, x = mlp(), torch.randn(2, 8)
    report = assert_matches_log(lambda: jvp(net, (x,), (torch.ones_like(x),)))
    assert report["operator_calls"]["aten.mm"] == 6  # per mm: primal and two tangent products

    def dual():
        with fwAD.dual_level():
            assert fwAD.unpack_dual(net(fwAD.make_dual(x, torch.ones_like(x)))).tangent is not None

    assert assert_matches_log(dual)["operator_calls"] == report["operator_calls"]


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd", "hessian"])
def test_jacobians(transform):
    net, x = mlp(), torch.randn(2, 8)
    make = {"jacrev": jacrev, "jacfwd": jacfwd, "hessian": hessian}[transform]
    if transform == "hessian":
        assert_matches_log(lambda: make(lambda t: net(t).sum())(x))
    else:
        assert_matches_log(lambda: make(net)(x))


def test_vmap_of_mm():
    a, b = torch.randn(10, 4, 5), torch.randn(5, 3)
    report = assert_matches_log(lambda: vmap(torch.mm, in_dims=(0, None))(a, b))
    assert report["operator_calls"] == {"aten.mm": 1}  # the batched kernel, [40,5] @ [5,3]


def test_vmap_of_conv2d():
    images, weight = torch.randn(5, 3, 10, 10), torch.randn(6, 3, 3, 3)
    report = assert_matches_log(lambda: vmap(F.conv2d, in_dims=(0, None))(images, weight))
    assert report["operator_calls"] == {"aten.convolution": 1}


def test_vmap_of_grad_per_sample_gradients():
    net, x = mlp(), torch.randn(2, 8)
    params = dict(net.named_parameters())

    def loss(p, sample):
        return functional_call(net, p, (sample.unsqueeze(0),)).sum()

    report = assert_matches_log(lambda: vmap(grad(loss), in_dims=(None, 0))(params, x))
    assert report["operator_calls"]["aten.bmm"] == 2  # the per-sample weight gradients


def test_saved_tensors_hooks():
    net, x = mlp(), torch.randn(2, 8)

    def workload():
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t * 2, lambda t: t / 2):
            net(x).sum()

    assert assert_matches_log(workload)["operator_calls"]["aten.mul"] == 4  # one per saved tensor


def test_checkpoint_stopped_before_a_kernel_ran():
    net, x = mlp(), torch.randn(2, 8)
    # The stop is raised while mm2 packs its inputs, before its kernel: the log never sees it.
    report = assert_matches_log(step_of(net, x, lambda n, t: checkpoint(n, t, use_reentrant=False)))
    assert report["operator_calls"]["aten.mm"] == 6


def test_selective_checkpoint_cache_hits():
    net, x = mlp(), torch.randn(2, 8)

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE

    context = functools.partial(create_selective_checkpoint_contexts, policy)
    report = assert_matches_log(step_of(net, x, lambda n, t: checkpoint(n, t, use_reentrant=False, context_fn=context)))
    assert report["operator_calls"]["aten.relu"] == 2  # recomputed; the mm come from the cache


def test_checkpoint_stopped_after_a_kernel_ran_is_the_rules_exception():
    """When the last saved tensor is an output (relu saves its result), the stop is raised from
    the pack hook after the kernel ran: the log sees the kernel, but the operator did not return
    and rule 1 does not count it."""
    net, x = mlp(), torch.randn(2, 8)
    segment = nn.Sequential(net[0], net[1])

    def step():
        net.zero_grad()
        net[2](checkpoint(segment, x, use_reentrant=False)).sum().backward()

    calls, flops = logged(step)
    report = torchscan.measure_flops(step)
    assert report["total"]["status"] == "complete"
    assert calls["aten.relu"] == 2  # forward and the recomputation's kernel
    assert report["operator_calls"]["aten.relu"] == 1
    assert {k: v for k, v in report["operator_calls"].items() if k != "aten.relu"} == {
        k: v for k, v in calls.items() if k != "aten.relu"
    }
    assert report["total"]["value"] == sum(flops.values()) - 2 * 16  # one relu on [2,16]


def test_vjp():
    net, x = mlp(), torch.randn(2, 8)
    assert_matches_log(lambda: vjp(net, x)[1](torch.ones(2, 4)))
