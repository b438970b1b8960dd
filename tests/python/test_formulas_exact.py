"""Hand-computed FLOPs of single operators, and agreement with FlopCounterMode where it is right."""

import pytest
import torch
import torch.nn.functional as F

import torchscan
from helpers import fcm_total


def flops(workload):
    report = torchscan.measure_flops(workload)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    return report["total"]["value"]


def test_matrix_products():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    assert flops(lambda: a @ b) == 2 * 3 * 4 * 5 == 120
    # The bias convention: the added input costs its add, 1 per output element (3 x 5).
    assert flops(lambda: torch.addmm(torch.randn(5), a, b)) == 120 + 15
    x, y = torch.randn(7, 2, 3), torch.randn(7, 3, 4)
    assert flops(lambda: torch.bmm(x, y)) == 2 * 7 * 2 * 3 * 4 == 336
    assert flops(lambda: torch.baddbmm(torch.randn(7, 2, 4), x, y)) == 336 + 7 * 2 * 4
    # linear: composite -> addmm; weight [6,4] on [3,4]: 2*3*4*6, and the bias into 3 x 6.
    w, bias = torch.randn(6, 4), torch.randn(6)
    assert flops(lambda: F.linear(a, w, bias)) == 144 + 18
    # matmul of batched 4-d tensors reaches bmm through views.
    p, q = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 5, 6)
    assert flops(lambda: p @ q) == 2 * 6 * 4 * 5 * 6 == 1440
    assert flops(lambda: torch.mv(a, torch.randn(4))) == 24
    assert flops(lambda: torch.dot(torch.randn(9), torch.randn(9))) == 18


@pytest.mark.parametrize(
    "name, workload, bias_term",
    [
        ("mm", lambda: torch.mm(torch.randn(3, 4), torch.randn(4, 5)), 0),
        # FlopCounterMode drops the added input; we count its add, 1 per output element.
        ("addmm", lambda: torch.addmm(torch.randn(5), torch.randn(3, 4), torch.randn(4, 5)), 3 * 5),
        ("bmm", lambda: torch.bmm(torch.randn(7, 2, 3), torch.randn(7, 3, 4)), 0),
        (
            "baddbmm",
            lambda: torch.baddbmm(torch.randn(7, 2, 4), torch.randn(7, 2, 3), torch.randn(7, 3, 4)),
            7 * 2 * 4,
        ),
        ("linear", lambda: F.linear(torch.randn(3, 4), torch.randn(6, 4), torch.randn(6)), 3 * 6),
        ("matmul", lambda: torch.randn(2, 3, 4, 5) @ torch.randn(2, 3, 5, 6), 0),
        (
            "linear backward",
            lambda: F.linear(torch.randn(3, 4, requires_grad=True), torch.randn(6, 4)).sum().backward(),
            0,
        ),
    ],
)
def test_matmul_family_agrees_with_flop_counter_mode(name, workload, bias_term):
    """Equal where PyTorch is right (the products); more by exactly the bias term it drops."""
    torch.manual_seed(0)
    ours = torchscan.measure_flops(workload)
    assert ours["total"]["status"] == "complete", ours["diagnostics"]
    assert ours["by_category"]["matmul"] == fcm_total(workload) + bias_term, name


@pytest.mark.parametrize(
    "make, shape, expected, bias_term",
    [
        # Conv2d(3,64,7,s2,p3) on 224: out 112 -> 2*64*3*49*112*112
        (lambda: torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False), (1, 3, 224, 224), 236_027_904, 0),
        # grouped, dilated: w[8,2,3,3], out 6x6 -> 2*2*8*2*9*36; the bias into [2,8,6,6]
        (lambda: torch.nn.Conv2d(8, 8, 3, dilation=2, groups=4), (2, 8, 10, 10), 20_736, 2 * 8 * 36),
        # 1-d, stride 2: out 4 -> 2*1*6*4*3*4; bias into [1,6,4]
        (lambda: torch.nn.Conv1d(4, 6, 3, stride=2), (1, 4, 9), 576, 24),
        # 3-d, padding 1: out 5^3 -> 2*1*3*2*8*125; bias into [1,3,5,5,5]
        (lambda: torch.nn.Conv3d(2, 3, 2, padding=1), (1, 2, 4, 4, 4), 12_000, 375),
        # transposed: each of 25 inputs meets 9 taps for 4*3 channel pairs -> 2*4*3*9*25; the bias
        # into the upsampled [1,3,11,11] ((5-1)*2 + 3 = 11)
        (lambda: torch.nn.ConvTranspose2d(4, 3, 3, stride=2), (1, 4, 5, 5), 5_400, 363),
        # grouped transposed: w[4,1,3,3] with groups 2 (C_out 2): 2*25*9*4*1; bias into [1,2,7,7]
        (lambda: torch.nn.ConvTranspose2d(4, 2, 3, groups=2), (1, 4, 5, 5), 1_800, 98),
    ],
)
def test_convolution_forward(make, shape, expected, bias_term):
    conv = make()
    x = torch.randn(shape)
    with torch.no_grad():
        report = torchscan.measure_flops(lambda: conv(x))
    assert report["by_category"]["conv"] == expected + bias_term
    with torch.no_grad():
        # PyTorch agrees on the products, and drops the bias's adds.
        assert fcm_total(lambda: conv(x)) == expected


def test_grouped_convolution_backward_is_not_multiplied_by_groups():
    """FlopCounterMode multiplies the grouped weight gradient by `groups`; we count the work."""
    conv = torch.nn.Conv2d(8, 16, 3, padding=1, groups=4, bias=False)
    x = torch.randn(2, 8, 10, 10, requires_grad=True)
    forward = 2 * 2 * 16 * 2 * 9 * 100  # 115_200
    report = torchscan.measure_flops(lambda: conv(x).sum().backward())
    assert report["by_category"]["conv"] == forward * 3  # forward + grad input + grad weight
    assert report["by_phase"]["backward"]["status"] == "complete"
    pytorch = fcm_total(lambda: conv(x).sum().backward())
    assert pytorch == forward + forward + forward * 4  # its weight-gradient term x groups
    assert pytorch - report["by_category"]["conv"] == forward * (4 - 1)


def test_ungrouped_convolution_backward_agrees_with_pytorch():
    conv = torch.nn.Conv2d(3, 5, 3, stride=2)
    x = torch.randn(2, 3, 9, 9, requires_grad=True)
    report = torchscan.measure_flops(lambda: conv(x).sum().backward())
    # out [2,5,4,4], 160 elements: the bias's add forward and its gradient's sum backward, which
    # FlopCounterMode drops (2 x 160); the products agree.
    assert report["by_category"]["conv"] == fcm_total(lambda: conv(x).sum().backward()) + 2 * 160
    # forward 2*2*5*3*9*16 = 8640; with both gradients: 3 * 8640.
    assert report["by_category"]["conv"] == 3 * 8640 + 2 * 160


def test_cpu_attention_is_counted_where_flop_counter_mode_sees_nothing():
    q, k, v = torch.randn(2, 4, 8, 16), torch.randn(2, 4, 10, 16), torch.randn(2, 4, 10, 16)
    report = torchscan.measure_flops(lambda: F.scaled_dot_product_attention(q, k, v))
    # scores 2*8*8*10*16 + values 2*8*8*10*16 = 40_960
    assert report["total"] == {
        "status": "complete",
        "value": 40_960,
        "known_value": 40_960,
        "unit": "FLOPs",
        "scope": "workload",
        "method": "torchscan_native_dispatch",
    }
    assert report["by_operator"]["aten._scaled_dot_product_flash_attention_for_cpu"] == 40_960
    assert fcm_total(lambda: F.scaled_dot_product_attention(q, k, v)) == 0


def test_cpu_attention_backward():
    q, k, v = (torch.randn(2, 4, 8, 16, requires_grad=True) for _ in range(3))
    report = torchscan.measure_flops(lambda: F.scaled_dot_product_attention(q, k, v).sum().backward())
    ops = report["by_operator"]
    # backward: 2*B*s_q*s_k*(3*d_q + 2*d_v) = 2*8*8*8*(48+32)
    assert ops["aten._scaled_dot_product_flash_attention_for_cpu_backward"] == 81_920
    assert report["total"]["status"] == "complete"


def test_math_attention_path_with_softmax():
    """Different value width: the math path (bmm, softmax) runs, and is counted in full."""
    q, k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 3)
    report = torchscan.measure_flops(lambda: F.scaled_dot_product_attention(q, k, v))
    assert report["total"]["status"] == "complete", report["diagnostics"]
    # bmm: 2*2*4*6*8 + 2*2*4*6*3 = 768 + 288; softmax 5 per score element: 5*2*4*6 = 240.
    assert report["by_category"]["matmul"] == 1056
    assert report["by_category"]["softmax"] == 240
    assert report["by_category"]["matmul"] == fcm_total(lambda: F.scaled_dot_product_attention(q, k, v))


def test_pointwise_reduction_norm_pool_conventions():
    x = torch.randn(2, 4, 6, 6)
    assert flops(lambda: torch.relu(x)) == 288
    assert flops(lambda: x + torch.randn(4, 1, 1)) == 288  # broadcast output elements
    assert flops(lambda: x.mean()) == 288
    assert flops(lambda: F.max_pool2d(x, 3, 2, 1)) == 2 * 4 * 3 * 3 * 9  # outputs x window
    # 6 -> 4 adaptive windows [0,2) [1,3) [3,5) [4,6): 8 visits per dimension, 64 per channel.
    assert flops(lambda: F.adaptive_avg_pool2d(x, 4)) == 2 * 4 * 64
    bn = torch.nn.BatchNorm2d(4).eval()
    with torch.no_grad():
        assert flops(lambda: bn(x)) == 2 * 288  # eval, affine: 2 per element


def test_multihead_attention_fast_path_is_counted_where_flop_counter_mode_sees_nothing():
    """nn.MultiheadAttention in eval + no_grad runs one fused kernel; FlopCounterMode counts 0
    for it. We price it exactly as its slow path's operators, which FlopCounterMode does count."""
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(3, 5, 8)
    # QKV 2*3*(5+2*5)*8*8 = 5760; QK^T and AV 4*3*5*5*8 = 2400; out 2*3*5*8*8 = 1920.
    expected = 5760 + 2400 + 1920

    def fast() -> None:
        with torch.no_grad():
            mha(x, x, x, need_weights=False)

    # The biases' adds (the bias convention): in-projection 3*(5+2*5)*8 = 360, out-projection
    # 3*5*8 = 120, as the slow path's add_ and addmm count them.
    biases = 360 + 120
    report = torchscan.measure_flops(fast)
    assert report["by_operator"]["aten._native_multi_head_attention"] == expected + biases
    assert report["by_category"]["attention"] == expected + biases
    assert fcm_total(fast) == 0

    def slow() -> None:
        # With autograd on, the module takes the operator-by-operator path; need_weights keeps
        # the attention products as bmm (with SDPA, FlopCounterMode would miss them on CPU too).
        mha(x, x, x, need_weights=True)

    assert fcm_total(slow) == expected
    slow_report = torchscan.measure_flops(slow)
    assert "aten._native_multi_head_attention" not in slow_report["by_operator"]
    # The slow path's output projection is an addmm whose bias adds 3*5*8 = 120 (the bias
    # convention; FlopCounterMode drops them); its input projection's bias is an add_ (pointwise).
    assert sum(slow_report["by_category"].get(c, 0) for c in ("matmul", "attention")) == expected + 120
    assert slow_report["by_operator"]["aten.add_"] >= 360


def test_transformer_encoder_with_a_padding_mask_counts_the_tokens_it_keeps():
    """nn.TransformerEncoder in eval + no_grad with src_key_padding_mask takes the nested-tensor
    fast path: the padded tokens are dropped. _native_multi_head_attention on the nested query is
    a composite whose dense operators are counted, exactly for the mask given."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[False] * 5, [False, False, False, True, True]])  # 5 + 3 = 8 tokens kept
    with torch.no_grad():
        report = torchscan.measure_flops(lambda: encoder(x, src_key_padding_mask=mask))
    assert report["total"]["status"] == "complete", report["diagnostics"]
    # Per layer, on the 8 kept tokens: Q/K/V projection mm 2*8*16*48 = 12,288; output projection
    # 2*8*16*16 = 4,096 and the second feed-forward linear 2*8*32*16 = 8,192 (addmm), each with
    # its bias adds (the bias convention) 8*16 = 128; the first 2*8*16*32 = 8,192, its bias 8*32 =
    # 256 and its ReLU 8*32 = 256: 8,704 (_addmm_activation). The attention products run
    # on the padded batch (2 sequences x 2 heads, 5 x 5, head width 8): 2 bmm x 2*4*5*5*8 = 3,200.
    # Softmax of each sequence's scores (2 heads x 5 x 5 and 2 x 3 x 3 = 68 elements) x 5 = 340.
    # The q/k/v bias (added here, after the plain mm) and 1/sqrt(d) scale of the 8 x 48 stored
    # elements: 384 + 128 = 512. Two layer norms 2 x 8*16*5 = 1,280; two residual adds 2 x 128 =
    # 256. Twice (2 layers); and the mask's two logical_not (10 each).
    expected = {
        "aten.mm": 2 * 12_288,
        "aten.addmm": 2 * (4_096 + 128 + 8_192 + 128),
        "aten._addmm_activation": 2 * 8_704,
        "aten.bmm": 2 * 3_200,
        "aten._softmax": 2 * 340,
        "aten._transform_bias_rescale_qkv": 2 * 512,
        "aten.native_layer_norm": 2 * 1_280,
        "aten.add_": 2 * 256,
        "aten.logical_not": 20,
    }
    assert report["by_operator"] == expected
    assert report["total"]["value"] == sum(expected.values()) == 78_268


def test_transformer_era_conventions():
    x = torch.randn(2, 3, 4)
    ln = torch.nn.LayerNorm(4)
    with torch.no_grad():
        assert flops(lambda: ln(x)) == 24 * 5  # statistics + affine: 5 per element
        assert flops(lambda: F.layer_norm(x, (4,))) == 24 * 4
        assert flops(lambda: F.gelu(x)) == 24
        assert flops(lambda: F.silu(x) * x) == 48
        assert flops(lambda: torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)) == 24 + 24 + 6 + 6
    # Interpolation: bilinear 4 taps per output element; nearest is a copy.
    img = torch.randn(1, 2, 4, 4)
    assert flops(lambda: F.interpolate(img, size=(8, 8), mode="bilinear")) == 2 * 64 * 4
    assert flops(lambda: F.interpolate(img, scale_factor=2, mode="bilinear")) == 2 * 64 * 4
    report = torchscan.measure_flops(lambda: F.interpolate(img, scale_factor=2, mode="nearest"))
    assert report["total"]["value"] == 0 and report["total"]["status"] == "complete"
    assert "aten.upsample_nearest2d" in report["ignored_operators"]


def test_foreach_optimizer_kernels():
    params = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    for p in params:
        p.grad = torch.ones_like(p)
    sgd = torch.optim.SGD(params, lr=0.1, foreach=True)
    report = torchscan.measure_flops(sgd.step)
    # Plain SGD: one _foreach_add_(params, grads, alpha=-lr), 1 FLOP per element of 17.
    assert report["by_operator"] == {"aten._foreach_add_": 17}
    assert report["total"]["status"] == "complete"
