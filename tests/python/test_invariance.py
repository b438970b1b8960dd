"""The same arithmetic costs the same, whichever kernel computes it (issue 43).

Pairs of equivalent implementations whose totals must be equal (fused or decomposed, foreach or
per tensor, a fused optimizer step, compiled or eager, batched by vmap or by hand), or differ by
exactly the different arithmetic one of them really does, computed here by hand. And a sweep
over every operator with a formula and a CompositeImplicitAutograd kernel: a call is counted
once, by the formula or by its decomposition, never by both (docs/methodology.md, "The same
arithmetic costs the same").
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import vmap
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

import torchscan
from helpers import fcm_total


def report_of(workload):
    report = torchscan.measure_flops(workload)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["diagnostics"] == []
    return report


def total(workload) -> int:
    value = report_of(workload)["total"]["value"]
    assert isinstance(value, int)
    return value


# ---- RMS normalization: the fused operator, F.rms_norm, the hand-written Llama norm ----------

# [4, 64] with a weight: N = 256 elements in R = 4 rows. pow N, mean N, + eps R, rsqrt R,
# x * rstd N, * weight N: 4N + 2R.
RMS_FORWARD = 4 * 256 + 2 * 4  # 1032


def llama_rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def test_rms_norm_counts_its_decomposition_once():
    norm, x = nn.RMSNorm(64), torch.randn(4, 64)
    report = report_of(lambda: norm(x))
    # Was 2056: the fused operator's formula (1024) and its CPU decomposition (1032) both.
    assert report["total"]["value"] == RMS_FORWARD == 1032
    assert "aten._fused_rms_norm" not in report["by_operator"]
    decomposition = {"aten.pow": 256, "aten.mean": 256, "aten.add_": 4, "aten.rsqrt": 4, "aten.mul": 512}
    assert report["by_operator"] == decomposition
    assert total(lambda: F.rms_norm(x, (64,), norm.weight)) == RMS_FORWARD
    assert total(lambda: llama_rms_norm(x, norm.weight, 1e-6)) == RMS_FORWARD
    with torch.inference_mode():  # below autograd: the composite fills the CPU kernel's place
        assert total(lambda: norm(x)) == RMS_FORWARD
    meta = nn.RMSNorm(64, device="meta")
    assert total(lambda: meta(torch.empty(4, 64, device="meta"))) == RMS_FORWARD


def test_rms_norm_training_step_equals_the_hand_written_norm():
    def step(forward):
        torch.manual_seed(0)
        norm, x = nn.RMSNorm(64), torch.randn(4, 64, requires_grad=True)
        eps = torch.finfo(x.dtype).eps
        return total(lambda: forward(norm, x, eps).sum().backward())

    fused = step(lambda norm, x, eps: norm(x))
    hand = step(lambda norm, x, eps: llama_rms_norm(x, norm.weight, eps))
    assert fused == hand == 4116  # forward 1032, sum 256, backward 2828: once, not twice


def test_the_fused_rms_norm_formula_counts_what_its_decomposition_counts():
    # Where _fused_rms_norm has a kernel of its own (CUDA) its formula prices the call:
    # (3 + weight) N + 2R (src/formulas/norm.rs, whose test holds the same shapes' values), what
    # the decomposition counts here on CPU.
    x, weight = torch.randn(3, 5, 8), torch.randn(8)
    decomposition = total(lambda: torch.ops.aten._fused_rms_norm(x, [8], weight, 1e-6))
    # N = 120, R = 15: 4 * 120 + 2 * 15.
    assert decomposition == 510
    no_weight = total(lambda: torch.ops.aten._fused_rms_norm(x, [8], None, 1e-6))
    assert no_weight == 3 * 120 + 2 * 15 == 390


def rms_backward(weighted: bool, input_grad: bool, weight_grad: bool, device: str = "cpu") -> dict:
    torch.manual_seed(0)
    x = torch.randn(4, 64, device=device, requires_grad=input_grad)
    weight = torch.randn(64, device=device, requires_grad=weight_grad) if weighted else None
    y = F.rms_norm(x, (64,), weight, 1e-6)
    grad = torch.randn_like(y)
    return report_of(lambda: y.backward(grad))


def test_the_fused_rms_norm_backward_formula_counts_what_the_decomposition_backward_counts():
    # On CPU, RMSNorm's backward is autograd's through the decomposition; on CUDA it is
    # _fused_rms_norm_backward, whose formula (src/formulas/norm.rs, whose test holds these
    # values) counts the same: N = 256 elements, R = 4 rows. The input's gradient: grad * w N,
    # * rstd N, the row sums of g * x 2N, rsqrt's derivative 3R (rstd^3, * -0.5, * the sum), the
    # mean's divide N, the square's x^1, * 2 and * g 3N, the two paths' add N: 9N + 3R; the
    # weight's: grad * xhat and the sum over rows, 2N. (Was 2 x 4 per element, 2,048.)
    assert rms_backward(True, True, True)["total"]["value"] == 9 * 256 + 3 * 4 + 2 * 256 == 2828
    assert rms_backward(True, True, False)["total"]["value"] == 9 * 256 + 3 * 4 == 2316
    assert rms_backward(True, False, True)["total"]["value"] == 2 * 256 == 512
    assert rms_backward(False, True, False)["total"]["value"] == 8 * 256 + 3 * 4 == 2060


@pytest.mark.skipif(not torch.cuda.is_available(), reason="_fused_rms_norm_backward has a CUDA kernel only")
def test_the_fused_rms_norm_backward_on_cuda_counts_what_cpu_counts():
    for case in [(True, True, True), (True, True, False), (True, False, True), (False, True, False)]:
        cuda = rms_backward(*case, device="cuda")
        assert cuda["total"]["value"] == rms_backward(*case)["total"]["value"], case
        assert cuda["by_operator"]["aten._fused_rms_norm_backward"] == cuda["total"]["value"], case


# ---- Gradient clipping and p-norms ------------------------------------------------------------


def clipping_total(foreach: bool) -> int:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 6), nn.Linear(6, 2))
    model(torch.randn(3, 6)).sum().backward()
    return total(lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=foreach))


def test_clip_grad_norm_counts_the_same_with_and_without_foreach():
    # P = 56 gradient elements in k = 4 tensors: the norms 2P (a square and an accumulate each),
    # the norm of the k norms 2k, total + eps, its reciprocal, x max_norm, the clamp (4), and the
    # scaling P: 3P + 2k + 4.
    expected = 3 * 56 + 2 * 4 + 4
    assert clipping_total(foreach=True) == clipping_total(foreach=False) == expected == 180


def test_p_norms_cost_two_per_element_whichever_kernel():
    x = torch.randn(6, 7)
    for p in (2.0, 1.0, math.inf, 3.0):
        assert total(lambda p=p: torch.linalg.vector_norm(x, p)) == 84, p
        assert total(lambda p=p: torch._foreach_norm([x], p)) == 84, p
    assert total(lambda: torch.norm(x)) == 84
    assert total(lambda: torch.ops.aten.linalg__powsum(x, 2.0)) == 84  # the norm without its root
    assert total(lambda: torch.linalg.norm(x)) == 84  # the Frobenius norm: a vector norm


# ---- Optimizers: for-loop, foreach and fused steps --------------------------------------------

P = 10 * 10 + 10 + 3 * 10 + 3  # 143 parameter elements
K = 4  # in 4 tensors


def optimizer_step(make, **options) -> int:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 10), nn.Linear(10, 3))
    optimizer = make(model.parameters(), **options)
    for _ in range(3):  # past the first step, whose state buffers are copies
        optimizer.zero_grad()
        model(torch.randn(2, 10)).sum().backward()
        value = total(optimizer.step)
    return value


@pytest.mark.parametrize(
    "make, options, expected, kernels",
    [
        # momentum buffer: mul_ + add_ (2P); the parameter update add_ (P).
        (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, 3 * P, ("for", "foreach", "fused")),
        # step += 1 (K); lerp_ 3P, mul_ P + addcmul_ 3P, sqrt P, div_ P, add_ eps P, addcdiv_ 3P.
        (torch.optim.Adam, {}, K + 13 * P, ("for", "foreach", "fused")),
        (torch.optim.AdamW, {}, K + 14 * P, ("for", "foreach", "fused")),  # + the decay's mul_ P
        # step (K); the square average's mul_ P + addcmul_ 3P, sqrt P, + eps P, addcdiv_ 3P.
        (torch.optim.RMSprop, {}, K + 9 * P, ("for", "foreach")),
    ],
)
def test_optimizer_steps_cost_the_same_whichever_kernel(make, options, expected, kernels):
    modes = {"for": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
    counts = {kernel: optimizer_step(make, **options, **modes[kernel]) for kernel in kernels}
    assert set(counts.values()) == {expected}, counts


def test_adagrad_foreach_multiplies_by_the_learning_rate_in_a_kernel_of_its_own():
    # for-loop: step (K), addcmul_ 3P, sqrt P, + eps P, addcdiv_ 3P (its value= carries -clr).
    loop = optimizer_step(torch.optim.Adagrad, foreach=False)
    assert loop == K + 8 * P == 1148
    # foreach (and fused, which counts what foreach does): the same, plus _foreach_mul(grads,
    # -clr), one multiply per parameter element: really different arithmetic, exactly P.
    assert optimizer_step(torch.optim.Adagrad, foreach=True) == loop + P == 1291
    assert optimizer_step(torch.optim.Adagrad, fused=True) == loop + P


# ---- Linear layers: F.linear, matmul + add, vmap ----------------------------------------------


def test_linear_equals_matmul_plus_add():
    x, linear = torch.randn(8, 16), nn.Linear(16, 32)
    # 2 * 8 * 16 * 32 products + 8 * 32 bias adds.
    expected = 2 * 8 * 16 * 32 + 8 * 32
    assert total(lambda: F.linear(x, linear.weight, linear.bias)) == expected
    assert total(lambda: torch.matmul(x, linear.weight.t()) + linear.bias) == expected


def test_vmap_matmul_equals_the_batched_call():
    xb, weight = torch.randn(5, 8, 16), torch.randn(32, 16)
    batched = total(lambda: xb @ weight.t())
    assert total(lambda: vmap(lambda t: t @ weight.t())(xb)) == batched == 2 * 5 * 8 * 16 * 32


def test_vmap_linear_equals_the_batched_call():
    xb, linear = torch.randn(5, 8, 16), nn.Linear(16, 32)
    batched = total(lambda: F.linear(xb, linear.weight, linear.bias))
    # The batched call: 2 * 40 * 16 * 32 products and 40 * 32 bias adds. vmap's rule for addmm
    # scales the bias by beta in a multiply of its own (32) before the mm and the add.
    assert batched == 2 * 40 * 16 * 32 + 40 * 32
    assert total(lambda: vmap(lambda t: F.linear(t, linear.weight, linear.bias))(xb)) == batched + 32


# ---- Attention: the math backend, the fused CPU kernel, an explicit softmax attention ---------


def test_attention_kernels_differ_by_exactly_the_arithmetic_the_fused_convention_leaves_out():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, 16) for _ in range(3))
    products = 2 * (2 * 2 * 4 * 8 * 8 * 16)  # QK^T and AV, 2 per MAC: 32768
    scores = 2 * 4 * 8 * 8  # 512
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        fused = total(lambda: F.scaled_dot_product_attention(q, k, v))
    # The attention convention (PyTorch's): the two products, what FlopCounterMode counts of
    # the math backend (it has no formula for the fused CPU kernel: 0 there, wrong).
    with sdpa_kernel(SDPBackend.MATH):
        assert fused == products == fcm_total(lambda: F.scaled_dot_product_attention(q, k, v))
        math_backend = report_of(lambda: F.scaled_dot_product_attention(q, k, v))
    # The math backend runs the products as bmm, plus arithmetic of its own as operators: q and
    # k each scaled by sqrt(1/sqrt(d)) (2 x 1024), the softmax (5 per score), and its test for
    # fully masked rows (isneginf and all, 1 per score each).
    assert math_backend["by_operator"]["aten.bmm"] == products
    assert math_backend["total"]["value"] == products + 2 * 1024 + 5 * scores + 2 * scores
    # By hand: the products, the division by sqrt(d) (1 per score) and the softmax.
    explicit = total(lambda: torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(16), dim=-1) @ v)
    assert explicit == products + scores + 5 * scores


# ---- Compiled and eager ----------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(16)
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return self.fc(self.norm(x)).relu()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_counts_what_eager_counts(backend):
    torch.manual_seed(0)
    net, x = Block(), torch.randn(4, 16)

    def step(forward):
        net.zero_grad(set_to_none=True)  # no gradient accumulation: every step alike
        return total(lambda: forward(x).sum().backward())

    with torch.no_grad():
        eager_inference = total(lambda: net(x))
    eager_step = step(net)
    # RMSNorm(16) on [4, 16]: 4 * 64 + 2 * 4 = 264; the linear's products 2 * 4 * 16 * 16 = 2048
    # and its bias adds (the bias convention) 4 * 16 = 64; relu 64.
    assert eager_inference == 264 + 2048 + 64 + 64
    # A training step: that forward (2440), the sum (64), the backward eager runs (4352).
    assert eager_step == 2440 + 64 + 4352
    torch._dynamo.reset()
    compiled = torch.compile(net, backend=backend)
    with torch.no_grad():
        assert [total(lambda: compiled(x)) for _ in range(2)] == [eager_inference] * 2
    assert [step(compiled) for _ in range(2)] == [eager_step] * 2


# ---- The sweep: operators with a formula and a CompositeImplicitAutograd kernel ---------------

HAS = torch._C._dispatch_has_kernel_for_dispatch_key
ROUTES = [("cpu", False), ("cpu", True), ("meta", False), ("meta", True)]  # (device, inference_mode)


def composite_runs(overload: str, device: str, inference: bool) -> bool:
    """Whether a call on `device` runs the overload's CompositeImplicitAutograd kernel (the
    dispatcher's rule, as cpp/observer.cpp reads it)."""
    backend = "CPU" if device == "cpu" else "Meta"
    direct = HAS(overload, backend) or HAS(overload, "CompositeExplicitAutograd")
    if inference:  # below autograd
        return not direct and not HAS(overload, "CompositeExplicitAutogradNonFunctional")
    return not direct and not HAS(overload, f"Autograd{backend}")


def swept_overloads() -> list[str]:
    registry = set(torch.ops.torchscan.registry_operators())
    return sorted(
        name
        for name in torch._C._dispatch_get_all_op_names()
        if name.split(".")[0] in registry
        and HAS(name, "CompositeImplicitAutograd")
        and torch.ops.torchscan.classify_operator(name.split(".")[0])[0] == "counted"
    )


def aten(overload: str):
    packet, _, name = overload.removeprefix("aten::").partition(".")
    return getattr(getattr(torch.ops.aten, packet), name or "default")


def t(*shape, device="cpu"):
    return torch.rand(*shape, device=device) + 0.5


# One call of each swept overload, on a device.
SAMPLES = {
    "aten::_convolution.deprecated": lambda d: (
        t(1, 2, 5, 5, device=d),
        t(3, 2, 3, 3, device=d),
        None,
        [1, 1],
        [0, 0],
        [1, 1],
        False,
        [0, 0],
        1,
        False,
        False,
        True,
    ),
    "aten::_fused_rms_norm": lambda d: (t(4, 64, device=d), [64], t(64, device=d), 1e-6),
    "aten::_upsample_bicubic2d_aa.vec": lambda d: (t(1, 1, 4, 4, device=d), [8, 8], False, None),
    "aten::_upsample_bilinear2d_aa.vec": lambda d: (t(1, 1, 4, 4, device=d), [8, 8], False, None),
    "aten::_upsample_lanczos2d_aa.vec": lambda d: (t(1, 1, 4, 4, device=d), [8, 8], False, None),
    "aten::adaptive_avg_pool2d": lambda d: (t(1, 2, 6, 6, device=d), [3, 3]),
    "aten::adaptive_avg_pool3d": lambda d: (t(1, 2, 4, 4, 4, device=d), [2, 2, 2]),
    "aten::avg_pool1d": lambda d: (t(1, 2, 8, device=d), [2]),
    "aten::conj_physical": lambda d: (t(3, 4, device=d),),
    "aten::linalg_eigvals": lambda d: (t(3, 3, device=d),),
    "aten::max.other": lambda d: (t(3, 4, device=d), t(3, 4, device=d)),
    "aten::max.out": lambda d: (t(3, 4, device=d), t(3, 4, device=d)),
    "aten::max_pool1d": lambda d: (t(1, 2, 8, device=d), [2]),
    "aten::max_pool2d": lambda d: (t(1, 2, 6, 6, device=d), [2, 2]),
    "aten::max_pool3d": lambda d: (t(1, 2, 4, 4, 4, device=d), [2, 2, 2]),
    "aten::min.out": lambda d: (t(3, 4, device=d), t(3, 4, device=d)),
    "aten::min.other": lambda d: (t(3, 4, device=d), t(3, 4, device=d)),
    "aten::mish_backward": lambda d: (t(3, 4, device=d), t(3, 4, device=d)),
    "aten::silu_backward": lambda d: (t(3, 4, device=d), t(3, 4, device=d)),
    "aten::sspaddmm": None,  # sparse arguments: no dense route runs it
    "aten::std": lambda d: (t(3, 4, device=d),),
    "aten::std.dim": lambda d: (t(3, 4, device=d), [1]),
    "aten::std.out": lambda d: (t(3, 4, device=d), [1]),
    "aten::std_mean": lambda d: (t(3, 4, device=d),),
    "aten::std_mean.dim": lambda d: (t(3, 4, device=d), [1]),
    "aten::upsample_bicubic2d.vec": lambda d: (t(1, 1, 4, 4, device=d), [8, 8], False, None),
    "aten::upsample_bilinear2d.vec": lambda d: (t(1, 1, 4, 4, device=d), [8, 8], False, None),
    "aten::upsample_linear1d.vec": lambda d: (t(1, 1, 4, device=d), [8], False, None),
    "aten::upsample_trilinear3d.vec": lambda d: (t(1, 1, 2, 2, 2, device=d), [4, 4, 4], False, None),
    "aten::var": lambda d: (t(3, 4, device=d),),
    "aten::var.dim": lambda d: (t(3, 4, device=d), [1]),
    "aten::var.out": lambda d: (t(3, 4, device=d), [1]),
    "aten::var_mean": lambda d: (t(3, 4, device=d),),
    "aten::var_mean.dim": lambda d: (t(3, 4, device=d), [1]),
}
OUT = {"aten::max.out", "aten::min.out", "aten::std.out", "aten::var.out"}


class KernelLog(TorchDispatchMode):
    """The kernels that ran, below autograd (a composite's decomposition, or the kernel itself)."""

    def __init__(self):
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls[func._schema.name.replace("::", ".", 1)] += 1
        return func(*args, **(kwargs or {}))


def test_the_sweep_covers_every_overload_with_a_formula_and_a_composite():
    assert sorted(SAMPLES) == swept_overloads()


@pytest.mark.parametrize("overload", sorted(name for name, sample in SAMPLES.items() if sample is not None))
@pytest.mark.parametrize("device, inference", ROUTES)
def test_nothing_is_counted_twice(overload, device, inference):
    if overload == "aten::linalg_eigvals" and device == "meta":
        pytest.skip("linalg_eigvals has no meta implementation")
    op, packet = aten(overload), overload.split(".")[0].replace("::", ".", 1)

    args = SAMPLES[overload](device)
    kwargs = {"out": torch.empty(0, device=device)} if overload in OUT else {}

    def call():
        op(*args, **kwargs)

    def run(workload):
        if inference:
            with torch.inference_mode():
                return workload()
        return workload()

    # The log is taken with autograd live: a composite then decomposes above the log's mode (in
    # inference mode the mode would see the composite's own call, its decomposition below it).
    log = KernelLog()
    with log:
        call()
    report = run(lambda: report_of(call))
    counted = Counter({name: calls for name, calls in report["operator_calls"].items()})
    if HAS(overload, "CompositeImplicitAutograd") and not any(
        HAS(overload, key) for key in ("CPU", "CUDA", "Meta", "CompositeExplicitAutograd")
    ):
        # A composite everywhere: its formula counts the call and its decomposition is not
        # counted; or its formula descends (adaptive pooling, linalg_eigvals: the kernel they
        # call prices them) and that one kernel counts it. Never both.
        assert sum(counted.values()) == 1, (counted, log.calls)
        assert packet in counted or packet.replace(".", "._", 1) in counted, (counted, log.calls)
    elif composite_runs(overload, device, inference):
        # Kernels of its own elsewhere, the composite here: the decomposition is counted, call
        # for call as it ran, and the formula not too.
        assert packet not in counted
        assert counted == Counter({n: c for n, c in log.calls.items() if n in counted}), (counted, log.calls)
        assert sum(counted.values()) > 0
    else:
        # Its own kernel: the formula, once.
        assert counted == Counter({packet: 1}), (counted, log.calls)
