"""The bias convention: a fused kernel's bias or added input costs what the separate operators would.

An ordinary `add` cannot be told apart from a bias add, so `F.linear` must cost the same whether
PyTorch runs it as one `addmm` (the batched call), as `mm` + `add` (under `torch.func.vmap`) or as
`matmul` + `add_`. `addmm(self, a, b, beta, alpha)` is the product (2 m n k), 1 FLOP per output
element for the add (none when beta = 0), 1 per element of `self` for beta's multiply (beta not
0 or 1) and 1 per output element for alpha's (alpha not 1). A convolution's bias is 1 per output
element, its gradient 1 per element of grad_output. PyTorch's FlopCounterMode drops these terms:
torchscan differs from it by exactly them. Every expected value is computed by hand.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import vmap
from torch.utils.flop_counter import FlopCounterMode

import torchscan

# Linear(128, 64) over 64 rows: the product 2 x 64 x 64 x 128, the bias added to 64 x 64 outputs.
ROWS, IN, OUT = 64, 128, 64
PRODUCT = 2 * ROWS * OUT * IN  # 1,048,576
BIAS = ROWS * OUT  # 4,096
FORWARD = PRODUCT + BIAS  # 1,052,672
# Training step (loss = sum of the output; x needs no gradient): the forward, the sum of the
# [64, 64] output (4,096), the weight gradient grad^T @ x (1,048,576) and the bias gradient, the
# sum of grad over the rows (4,096).
STEP = FORWARD + ROWS * OUT + PRODUCT + ROWS * OUT  # 2,109,440


def counted(workload):
    report = torchscan.measure_flops(workload)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    return report


def fcm(workload) -> int:
    with FlopCounterMode(display=False) as counter:
        workload()
    return counter.get_total_flops()


def parameters():
    torch.manual_seed(0)
    w = torch.randn(OUT, IN, requires_grad=True)
    b = torch.randn(OUT, requires_grad=True)
    return torch.randn(ROWS, IN), w, b


def test_vmap_linear_costs_the_batched_call_forward():
    x, w, b = parameters()
    with torch.no_grad():
        batched = counted(lambda: F.linear(x, w, b))
        mapped = counted(lambda: vmap(lambda row: F.linear(row, w, b))(x))
    assert batched["total"]["value"] == mapped["total"]["value"] == FORWARD == 1_052_672
    # Different kernels, the same arithmetic: addmm on one side, mm and add on the other.
    assert batched["by_operator"] == {"aten.addmm": FORWARD}
    assert mapped["by_operator"] == {"aten.mm": PRODUCT, "aten.add": BIAS}


def test_vmap_linear_costs_the_batched_call_training_step():
    x, w, b = parameters()

    # Gradients reset to None before each step, so that neither accumulates into the other's.
    def batched():
        w.grad = b.grad = None
        F.linear(x, w, b).sum().backward()

    def mapped():
        w.grad = b.grad = None
        vmap(lambda row: F.linear(row, w, b))(x).sum().backward()

    one, other = counted(batched), counted(mapped)
    assert one["total"]["value"] == other["total"]["value"] == STEP == 2_109_440
    assert one["by_phase"]["backward"]["value"] == other["by_phase"]["backward"]["value"] == PRODUCT + BIAS


def test_linear_as_addmm_matmul_add_and_mm_add_agree():
    x, w, b = parameters()
    with torch.no_grad():
        fused = counted(lambda: F.linear(x, w, b))["total"]["value"]
        split = counted(lambda: torch.mm(x, w.t()) + b)["total"]["value"]
        # A 3-D input that is not contiguous: `matmul` + `add_` inside F.linear.
        x3 = x.reshape(8, 8, IN).transpose(0, 1)
        strided = counted(lambda: F.linear(x3, w, b))["total"]["value"]
    assert fused == split == strided == FORWARD


def test_flop_counter_mode_drops_the_bias_add():
    # F.linear([4, 8], [16, 8], [16]): 2 x 4 x 16 x 8 = 1,024 for the product; its bias adds
    # 4 x 16 = 64. FlopCounterMode says 1,024: it drops the 64 adds that `mm` + `add` would cost.
    x, w, b = torch.randn(4, 8), torch.randn(16, 8), torch.randn(16)
    assert fcm(lambda: F.linear(x, w, b)) == 1_024
    assert fcm(lambda: torch.mm(x, w.t())) == 1_024
    assert counted(lambda: F.linear(x, w, b))["total"]["value"] == 1_024 + 64
    assert counted(lambda: torch.mm(x, w.t()) + b)["total"]["value"] == 1_024 + 64


def test_addmm_beta_and_alpha_cost_their_multiplies():
    # [4, 8] @ [8, 16] = 1,024; bias [16] into 64 outputs.
    x, w, b = torch.randn(4, 8), torch.randn(8, 16), torch.randn(16)

    def value(**scales):
        return counted(lambda: torch.addmm(b, x, w, **scales))["total"]["value"]

    assert value() == 1_024 + 64
    assert value(beta=0) == 1_024  # self ignored: no add
    assert value(beta=0.5) == 1_024 + 64 + 16  # beta's multiply over the 16 bias elements
    assert value(alpha=2.0) == 1_024 + 64 + 64  # alpha's multiply over the 64 outputs
    assert value(beta=0.5, alpha=2.0) == 1_024 + 64 + 16 + 64
    # The separate operators cost the same: alpha * (x @ w) + beta * b.
    split = counted(lambda: 2.0 * torch.mm(x, w) + 0.5 * b)["total"]["value"]
    assert split == value(beta=0.5, alpha=2.0)


def test_baddbmm_addbmm_addmv_addr_follow_the_convention():
    a, c = torch.randn(3, 4, 5), torch.randn(3, 5, 6)
    # baddbmm: 2 x 3 x 4 x 5 x 6 = 720, the input added to 3 x 4 x 6 = 72 outputs.
    assert counted(lambda: torch.baddbmm(torch.randn(3, 4, 6), a, c))["total"]["value"] == 720 + 72
    assert counted(lambda: torch.baddbmm(torch.randn(3, 4, 6), a, c, beta=0))["total"]["value"] == 720
    # addbmm: the same products summed into one [4, 6]: 720 + 24.
    assert counted(lambda: torch.addbmm(torch.randn(4, 6), a, c))["total"]["value"] == 720 + 24
    # addmv: 2 x 4 x 5 = 40, + 4.
    assert counted(lambda: torch.addmv(torch.randn(4), a[0], c[0, :, 0]))["total"]["value"] == 44
    # addr: outer product [4] x [6] (24 multiplies) and its add (24); beta = 0: the outer alone,
    # as `torch.outer` (a `mul`, 24).
    u, v = torch.randn(4), torch.randn(6)
    assert counted(lambda: torch.addr(torch.randn(4, 6), u, v))["total"]["value"] == 48
    assert counted(lambda: torch.addr(torch.randn(4, 6), u, v, beta=0))["total"]["value"] == 24
    assert counted(lambda: torch.outer(u, v))["total"]["value"] == 24


def test_conv_bias_and_its_gradient_against_flop_counter_mode():
    # Conv2d(3, 8, 3, padding=1) on [2, 3, 10, 10]: 2 x 2 x 8 x 3 x 9 x 100 = 86,400 for the
    # products; the output [2, 8, 10, 10] has 1,600 elements, which the bias is added to.
    torch.manual_seed(0)
    conv, x = nn.Conv2d(3, 8, 3, padding=1), torch.randn(2, 3, 10, 10)
    with torch.no_grad():
        assert fcm(lambda: conv(x)) == 86_400
        assert counted(lambda: conv(x))["total"]["value"] == 86_400 + 1_600
        # Without a bias, both agree.
        plain = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        assert counted(lambda: plain(x))["total"]["value"] == fcm(lambda: plain(x)) == 86_400

    def step():
        conv.zero_grad()
        conv(x).sum().backward()

    # Backward: the weight gradient (one forward, 86,400; x needs none) and the bias gradient,
    # the sum of grad_output's 1,600 elements. FlopCounterMode: 86,400 + 86,400 (no bias terms).
    assert fcm(step) == 2 * 86_400
    report = counted(step)
    assert report["by_category"]["conv"] == fcm(step) + 1_600 + 1_600
    assert report["by_phase"]["backward"]["value"] == 86_400 + 1_600


def test_transposed_conv_bias_counts_the_upsampled_output():
    # ConvTranspose2d(4, 2, 3, stride=2, output_padding=1) on [1, 4, 5, 5]: 2 x 1 x 4 x 2 x 9 x 25
    # = 3,600 products; the output [1, 2, 12, 12] ((5 - 1) x 2 + 3 + 1 = 12) gets 288 bias adds.
    conv, x = nn.ConvTranspose2d(4, 2, 3, stride=2, output_padding=1), torch.randn(1, 4, 5, 5)
    with torch.no_grad():
        assert tuple(conv(x).shape) == (1, 2, 12, 12)
        assert fcm(lambda: conv(x)) == 3_600
        assert counted(lambda: conv(x))["total"]["value"] == 3_600 + 288
