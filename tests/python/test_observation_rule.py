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
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
    set_checkpoint_early_stop,
)

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
    # Older torch releases build jacrev's basis with a cumsum (make test-torch).
    "aten.cumsum": lambda ins, out: _numel(ins[0]),
    "aten.neg": lambda ins, out: _numel(out),
}
# What the log may show besides: views, metadata, allocation and creation (no arithmetic). Older
# torch releases (make test-torch) show a few more: checkpointing's `empty`, functorch's
# `lift_fresh`.
NO_ARITHMETIC = {
    "aten._efficientzerotensor",
    "aten._has_same_storage_numel",
    "aten._unsafe_view",
    "aten.alias",
    "aten.detach",
    "aten.diagonal",
    "aten.empty",
    "aten.expand",
    "aten.fill_",
    "aten.is_same_size",
    "aten.lift_fresh",
    "aten.new_zeros",
    "aten.ones",
    "aten.ones_like",
    "aten.permute",
    "aten.select",
    "aten.slice",
    "aten.split_with_sizes",
    "aten.squeeze",
    "aten.t",
    "aten.transpose",
    "aten.unbind",
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


# A transformer block: nn.TransformerEncoderLayer in train mode, so that the slow path runs with
# its separate operators (in eval mode under no_grad the fused _transformer_encoder_layer_fwd
# runs instead). On the CPU its attention is _scaled_dot_product_flash_attention_for_cpu.


def _addmm(ins, out):
    (m, k), (_, n) = ins[1], ins[2]  # bias, mat1, mat2: the products and the bias adds
    return 2 * m * k * n + m * n


def _attention(ins, out):
    # q [B, H, s_q, d_q], k [B, H, s_k, d_q], v [B, H, s_k, d_v]: the QK^T and AV products.
    (*bh, s_q, d_q), (*_, s_k, _), (*_, d_v) = ins[0], ins[1], ins[2]
    return 2 * _numel(bh) * s_q * s_k * (d_q + d_v)


def _attention_backward(ins, out):
    # grad_out, q, k, v, ...: four products and the recomputed QK^T.
    (*bh, s_q, d_q), (*_, s_k, _), (*_, d_v) = ins[1], ins[2], ins[3]
    return 2 * _numel(bh) * s_q * s_k * (3 * d_q + 2 * d_v)


def _layer_norm(ins, out):
    assert len(ins) == 3, "the block's norms have weight and bias"  # input, weight, bias
    return 5 * _numel(ins[0])


def _layer_norm_backward(ins, out):
    assert len(ins) == 6, "the block's norms have weight and bias"  # grad, input, mean, rstd, w, b
    return 2 * 5 * _numel(ins[0])


def _pointwise(ins, out):
    return _numel(out)


def _per_input_element(ins, out):
    return _numel(ins[0])


BLOCK_PRICES = {
    **PRICES,
    "aten.addmm": _addmm,
    "aten._scaled_dot_product_flash_attention_for_cpu": _attention,
    "aten._scaled_dot_product_flash_attention_for_cpu_backward": _attention_backward,
    "aten.native_layer_norm": _layer_norm,
    "aten.native_layer_norm_backward": _layer_norm_backward,
    "aten._softmax": lambda ins, out: 5 * _numel(out),
    **{f"aten.{op}": _pointwise for op in ("sub", "div", "exp", "neg", "pow", "eq", "isneginf")},
    **{f"aten.{op}": _per_input_element for op in ("mean", "amax", "all")},
}
BLOCK_NO_ARITHMETIC = NO_ARITHMETIC | {
    "aten._to_copy",
    "aten.clone",
    "aten.copy_",
    "aten.scalar_tensor",
    "aten.select_backward",
    "aten.stack",
    "aten.to",
    "aten.where",
}
# Names under which the same arithmetic reaches the log and the measurement, run apart:
# - in place or not: under a Python dispatch mode (the log) and for torch.func's wrappers,
#   isTensorSubclassLike holds and PyTorch's composite-compliant branches take the out-of-place
#   variant (at::linear adds its bias with `add`, not `add_`; forward-AD formulas multiply with
#   `mul`, not `mul_`), one call for one call, same output;
# - an efficient zero tensor (the zero tangent of a parameter) is added or multiplied through
#   the operator's Python reference, whose arithmetic is the prims call the log sees: torchscan
#   claims the aten call and counts it once (the profiler shows prims::add inside aten::add).
SAME_ARITHMETIC = {
    "aten.add_": "aten.add",
    "aten.mul_": "aten.mul",
    "aten.div_": "aten.div",
    "prims.add": "aten.add",
    "prims.mul": "aten.mul",
}


def _kernels(name, ins, out):
    """The priced kernels behind one logged call: [(operator, FLOPs)]."""
    if name == "aten._safe_softmax":
        # CompositeExplicitAutograd: the mode sees the composite, below it ran softmax, isneginf,
        # all over the row and where (a selection): torchscan counts that decomposition.
        n = _numel(ins[0])
        return [("aten._softmax", 5 * n), ("aten.isneginf", n), ("aten.all", n)]
    name = SAME_ARITHMETIC.get(name, name)
    if name in BLOCK_PRICES:
        return [(name, BLOCK_PRICES[name](ins, out))]
    assert name in BLOCK_NO_ARITHMETIC, f"the log shows {name}, which this test cannot price"
    return []


def block_logged(workload):
    with DispatchLog() as log:
        workload()
    calls, flops = Counter(), Counter()
    for name, ins, out in log.calls:
        for op, cost in _kernels(name, ins, out):
            calls[op] += 1
            flops[op] += cost
    return dict(calls), dict(flops)


def block_measured(workload, **kwargs):
    report = torchscan.measure_flops(workload, **kwargs)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    calls, flops = Counter(), Counter()
    for op, n in report["operator_calls"].items():
        calls[SAME_ARITHMETIC.get(op, op)] += n
    for op, n in report["by_operator"].items():
        flops[SAME_ARITHMETIC.get(op, op)] += n
    assert sum(flops.values()) == report["total"]["value"]
    return dict(calls), dict(flops), report


def assert_block_matches_log(workload):
    calls, flops = block_logged(workload)
    measured_calls, measured_flops, report = block_measured(workload)
    assert measured_calls == calls
    assert measured_flops == flops
    return report


def block():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    return layer.train()


def block_input(requires_grad=False):
    return torch.randn(2, 4, 16, requires_grad=requires_grad)


def test_block_forward_and_training_step():
    net, x = block(), block_input()
    report = assert_block_matches_log(lambda: net(x))
    # in_proj mm 12288 (x [8,16] @ [16,48]); out_proj, linear1, linear2 addmm 4096 + 8192 + 8192
    # and their bias adds 128 + 256 + 128; attention 2048; two norms 2 * 640; relu 256; the in_proj
    # bias 384 and two residual adds 256.
    assert report["total"]["value"] == 36992 + 512
    report = assert_block_matches_log(step_of(net, x))
    calls = report["operator_calls"]
    assert calls["aten.mm"] == 8  # 1 forward, 7 weight and input gradients
    assert calls["aten.native_layer_norm_backward"] == 2
    assert calls["aten._scaled_dot_product_flash_attention_for_cpu_backward"] == 1


def math_attention(workload):
    # The CPU flash kernel has no forward-mode formula: forward AD needs the math attention, whose
    # decomposition (bmm, _safe_softmax, ...) the tangents go through.
    def run():
        with sdpa_kernel(SDPBackend.MATH):
            workload()

    return run


def test_block_jvp():
    net, x = block(), block_input()
    report = assert_block_matches_log(math_attention(lambda: jvp(net, (x,), (torch.ones_like(x),))))
    # The in_proj product (on the [4,2,16] sequence-first input) and the two attention products,
    # each with its two tangent products (the weight's zero tangent is materialized, as for the MLP).
    assert report["operator_calls"]["aten.bmm"] == 9


def block_dual(net, x):
    def dual():
        with fwAD.dual_level():
            assert fwAD.unpack_dual(net(fwAD.make_dual(x, torch.ones_like(x)))).tangent is not None

    return math_attention(dual)


def test_block_forward_ad_dual():
    # The math attention scales q and k^T with mul.Scalar (CompositeExplicitAutograd, with an
    # autograd kernel of its own): its tangent, made by that autograd layer, counts too.
    net, x = block(), block_input()
    assert_block_matches_log(block_dual(net, x))


def test_block_saved_tensors_hooks_land_in_the_block():
    net, x = block(), block_input(requires_grad=True)

    def forward():
        net(x)

    def hooked():
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t * 1.0, lambda t: t):
            net(x)

    plain = block_measured(forward, modules=net)[2]
    assert "aten.mul" not in plain["operator_calls"]  # every mul below is the pack hook's
    report = assert_block_matches_log(hooked)
    hooked_by_module = torchscan.measure_flops(hooked, modules=net)["by_module"]
    extra = {label: hooked_by_module[label] - flops for label, flops in plain["by_module"].items()}
    # One mul per saved element, in the module whose forward saved it: linear1 its input [8,16]
    # and weight [16,32]; linear2 [8,32] and [32,16]; each norm its input, weight, bias, mean and
    # rstd (128 + 16 + 16 + 8 + 8); self_attn the in_proj mm's operands (128 + 768), q, k, v, the
    # attention's output and logsumexp (3 * 128 + 128 + 16), the out_proj's (128 + 256); the
    # block's own relu its result [2,4,32].
    assert extra == {
        "TransformerEncoderLayer": report["by_operator"]["aten.mul"],
        "TransformerEncoderLayer.dropout": 0,
        "TransformerEncoderLayer.dropout1": 0,
        "TransformerEncoderLayer.dropout2": 0,
        "TransformerEncoderLayer.linear1": 128 + 512,
        "TransformerEncoderLayer.linear2": 256 + 512,
        "TransformerEncoderLayer.norm1": 176,
        "TransformerEncoderLayer.norm2": 176,
        "TransformerEncoderLayer.self_attn": 896 + 528 + 384,
    }
    assert report["by_operator"]["aten.mul"] == 640 + 768 + 2 * 176 + 1808 + 256 == 3824


def block_batched_gradient(net, x):
    def workload():
        torch.autograd.grad(net(x), x, torch.ones(3, 2, 4, 16), is_grads_batched=True)

    return workload


# The legacy vmap has no batch rule for flash attention's and layer norm's backward: its fallback
# runs them once per gradient row, handing RecordFunction its whole stack (the batched arguments
# below the row's); the observer reads the operator's own arguments, so each row's kernel counts.
def test_block_input_gradient_batched_with_is_grads_batched():
    net, x = block(), block_input(requires_grad=True)
    assert_block_matches_log(block_batched_gradient(net, x))


def test_block_checkpoint_stops_after_the_last_layer_norm():
    """The block's last saved tensor is norm2's rstd, an output: the rerun's stop is raised from its
    pack hook after the kernel ran (the log sees it), and rule 1 does not count that layer norm."""
    net, x = block(), block_input()
    step = step_of(net, x, lambda n, t: checkpoint(n, t, use_reentrant=False))
    calls, flops = block_logged(step)
    measured_calls, measured_flops, _ = block_measured(step)
    assert calls["aten.native_layer_norm"] == 4
    calls["aten.native_layer_norm"] -= 1
    flops["aten.native_layer_norm"] -= 5 * 128
    assert measured_calls == calls
    assert measured_flops == flops


def saved_by_the_policy(name):
    return name in ("aten.mm", "aten.addmm", "aten.bmm") or name.startswith("aten._scaled_dot_product_")


def save_products(ctx, op, *args, **kwargs):
    if saved_by_the_policy(f"{op.namespace}.{op._opname}"):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def selective_checkpoint_prediction(net, x):
    """The rule's prediction for a selective-checkpoint step, from two plain measurements.

    The checkpointed forward runs the same kernels as the plain forward once (the SAC mode stores
    the policy's results as they are computed), and the backward runs the same gradient kernels as
    the plain step's. In between, the backward's first unpack reruns the region: each forward
    operator the policy saves is answered from the cache (no kernel, nothing counted), each other
    one runs its kernel again, on the same shapes. So, when the rerun goes to the end of the region,
    the step counts the plain step plus the forward's recomputed operators, priced by a forward-only
    measurement's by_operator restricted to them: 100608 + add 640 + native_layer_norm 1280 + relu
    256. (Under the SAC mode, a Python mode, the in_proj bias is added out of place: SAME_ARITHMETIC
    folds add_ into add.) Returns that total and the price of one layer norm, which an early stop
    after the last layer norm's kernel takes off.
    """
    step = block_measured(step_of(net, x))[2]["total"]["value"]
    calls, flops, _ = block_measured(lambda: net(x))
    recomputed = {op: f for op, f in flops.items() if not saved_by_the_policy(op)}
    assert set(recomputed) == {"aten.add", "aten.native_layer_norm", "aten.relu"}
    one_layer_norm = flops["aten.native_layer_norm"] // calls["aten.native_layer_norm"]
    return step + sum(recomputed.values()), one_layer_norm


def selective_step(net, x):
    context = functools.partial(create_selective_checkpoint_contexts, save_products)
    return step_of(net, x, lambda n, t: checkpoint(n, t, use_reentrant=False, context_fn=context))


def test_block_selective_checkpoint_without_early_stop():
    """With early stop off the rerun goes to the end of the region, no operator is stopped, and the
    prediction is exact. The SAC mode sits above a log opened outside the step, so that log sees the
    kernels that ran and not the cache hits (a log opened inside the checkpointed function would
    sit above the SAC mode and see every hit as a call): the measurement must also match it."""
    net, x = block(), block_input()
    predicted, _ = selective_checkpoint_prediction(net, x)
    step = selective_step(net, x)

    def workload():
        with set_checkpoint_early_stop(False):
            step()

    report = assert_block_matches_log(workload)
    assert report["operator_calls"]["aten.mm"] == 8  # the forward's mm came from the cache
    assert report["operator_calls"]["aten.native_layer_norm"] == 4
    assert report["total"]["value"] == predicted == 100608 + 640 + 1280 + 256


def test_block_selective_checkpoint():
    """With early stop (the default) the rerun stops in the pack hook of the region's last saved
    tensor, norm2's rstd, after that layer norm's kernel ran: rule 1 does not count it
    (test_block_checkpoint_stops_after_the_last_layer_norm is the same stop without SAC)."""
    net, x = block(), block_input()
    predicted, one_layer_norm = selective_checkpoint_prediction(net, x)
    report = block_measured(selective_step(net, x))[2]
    assert report["operator_calls"]["aten.mm"] == 8  # the forward's mm came from the cache
    assert report["operator_calls"]["aten.native_layer_norm"] == 3
    assert report["total"]["value"] == predicted - one_layer_norm == 102144
