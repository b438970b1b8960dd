"""Quantized models: floating-point quantization work is counted in FLOPs; integer kernels are
priced in integer operations (``integer_ops``: 2 per int8 multiply-accumulate, 1 per quantized
elementwise result), apart from FLOPs, from the packed weights' shapes; a dynamic kernel's
floating-point work around its integer product (quantizing its input, dequantizing its output,
the bias) is FLOPs."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.ao.quantization as tq
from torch import nn

from torchscan import count_flops, measure_flops

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", message=".*torch.ao.quantization.*")
warnings.filterwarnings("ignore", message=".*quantize.*deprecated.*")

pytestmark = pytest.mark.skipif(
    "fbgemm" not in torch.backends.quantized.supported_engines, reason="the fbgemm quantized engine is needed"
)


def net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        tq.QuantStub(), nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 4), tq.DeQuantStub()
    )


def static_int8(model: nn.Module, *example: torch.Tensor) -> nn.Module:
    model.eval()
    model.qconfig = tq.get_default_qconfig("fbgemm")
    prepared = tq.prepare(model)
    prepared(*example)
    return tq.convert(prepared)


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(2, 3, 8, 8)


def test_static_int8_model_prices_its_integer_kernels(x):
    quantized = static_int8(net(), x)
    report = measure_flops(lambda: quantized(x))
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["by_operator"] == {
        "aten.quantize_per_tensor": 4 * 2 * 3 * 8 * 8,  # divide, add the zero point, round, clamp
        "aten.relu": 2 * 4 * 6 * 6,  # on the quantized conv output
        "aten.dequantize": 2 * 2 * 4,  # subtract the zero point, multiply by the scale
    }
    assert report["total"]["value"] == 1536 + 288 + 16
    # conv2d: 2 x 4 x 6 x 6 outputs x 27 MACs x 2; linear: 2 rows x 144 x 4 x 2.
    conv, linear = 2 * (2 * 4 * 6 * 6) * 27, 2 * 2 * 144 * 4
    assert report["integer_ops"] == {
        "status": "complete",
        "value": conv + linear,
        "known_value": conv + linear,
        "unit": "integer_ops",
        "by_operator": {"quantized.conv2d": conv, "quantized.linear": linear},
    }
    assert report["operator_calls"]["quantized.conv2d"] == report["operator_calls"]["quantized.linear"] == 1
    assert "integer" not in report["by_category"]
    assert report["diagnostics"] == []


class Shapes(nn.Module):
    """Grouped, strided, 1-d and transposed convolutions, a ReLU-fused linear and quantized adds
    and multiplies (FloatFunctional, converted to QFunctional)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
        self.grouped = nn.Conv2d(4, 6, 3, padding=1, groups=2)
        self.strided = nn.Conv2d(6, 8, 3, stride=2)
        self.up = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.up.qconfig = tq.default_qconfig  # per-tensor weights: transposed ones cannot be per channel
        self.add, self.mul = torch.ao.nn.quantized.FloatFunctional(), torch.ao.nn.quantized.FloatFunctional()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.quant(x)
        y = self.strided(self.grouped(x))  # [2, 6, 8, 8] -> [2, 8, 3, 3]
        z = self.up(y)  # [2, 4, 6, 6]
        z = self.add.add(z, z)
        z = self.mul.mul_scalar(z, 0.5)
        return self.dequant(z)


def test_grouped_strided_and_transposed_integer_convolutions_and_elementwise_kernels():
    model, x = Shapes(), torch.randn(2, 4, 8, 8)
    quantized = static_int8(model, x)
    report = measure_flops(lambda: quantized(x))
    ops = report["integer_ops"]
    assert ops["status"] == "complete", report["diagnostics"]
    grouped = 2 * (2 * 6 * 8 * 8) * (2 * 9)  # 768 outputs x (4/2 channels x 9 taps)
    strided = 2 * (2 * 8 * 3 * 3) * (6 * 9)  # 144 outputs x 54
    transposed = 2 * (2 * 8 * 3 * 3) * (4 * 9)  # each of 144 input elements meets 4 x 9 weights
    assert ops["by_operator"] == {
        "quantized.conv2d": grouped + strided,
        "quantized.conv_transpose2d": transposed,
        "quantized.add": 2 * 4 * 6 * 6,
        "quantized.mul_scalar": 2 * 4 * 6 * 6,
    }
    assert ops["value"] == grouped + strided + transposed + 2 * 288
    # Counted the same, FLOPs and integer operations alike, by an eager float model's shapes.
    assert grouped // 2 == 2 * 6 * 8 * 8 * 2 * 9


def test_conv1d_runs_as_a_two_dimensional_integer_convolution():
    model = nn.Sequential(tq.QuantStub(), nn.Conv1d(3, 5, 4, stride=2), tq.DeQuantStub())
    x = torch.randn(2, 3, 16)
    quantized = static_int8(model, x)
    report = measure_flops(lambda: quantized(x))
    # Output length (16 - 4) / 2 + 1 = 7: 2 x 5 x 7 outputs x 12 MACs x 2.
    assert report["integer_ops"]["by_operator"] == {"quantized.conv1d": 2 * (2 * 5 * 7) * 12}
    assert report["integer_ops"]["status"] == "complete"


@pytest.mark.parametrize(
    ("dtype", "kernel", "where"),
    [
        (torch.qint8, "quantized.linear_dynamic", "integer_ops"),
        (torch.float16, "quantized.linear_dynamic_fp16", "flops"),
    ],
)
def test_dynamic_models_price_their_kernel(dtype, kernel, where):
    model = tq.quantize_dynamic(nn.Sequential(nn.Linear(16, 8)), {nn.Linear}, dtype=dtype)
    report = measure_flops(lambda: model(torch.randn(4, 16)))
    assert report["total"]["status"] == "complete", report["diagnostics"]
    expected = 2 * 4 * 16 * 8  # 4 rows x 16 x 8 multiply-accumulates
    if where == "flops":  # fp16 weights, float arithmetic: FLOPs, as a float Linear, with its bias
        bias = 4 * 8  # 1 per output element (the bias convention)
        assert report["by_operator"] == {kernel: expected + bias}
        assert report["by_category"] == {"matmul": expected + bias}
        assert "integer_ops" not in report
    else:
        assert report["integer_ops"]["by_operator"] == {kernel: expected}
        assert report["integer_ops"]["value"] == expected
        # The floating-point work around the integer product, in FLOPs: the input's dynamic
        # quantization 6 x 64 (its minimum and maximum 2, quantize 4), the output's
        # dequantization (the scales' multiply) and the bias, 1 each per output element (4 x 8).
        flops = 6 * 4 * 16 + 2 * 4 * 8
        assert report["total"]["value"] == flops == 448
        assert report["by_operator"] == {kernel: flops}
        assert report["by_category"] == {"pointwise": flops}


def test_dynamic_linear_counts_the_floating_point_work_the_separate_operators_would():
    x = torch.randn(2, 3, 16)

    def measured(model: nn.Module) -> dict:
        report = measure_flops(lambda: model(x))
        assert report["total"]["status"] == "complete", report["diagnostics"]
        return report

    # No bias: 6 x 96 input elements + 1 x 48 output elements (2 x 3 rows x 8).
    plain = tq.quantize_dynamic(nn.Sequential(nn.Linear(16, 8, bias=False)), {nn.Linear}, dtype=torch.qint8)
    report = measured(plain)
    assert report["by_operator"] == {"quantized.linear_dynamic": 6 * 96 + 48}
    assert report["integer_ops"]["by_operator"] == {"quantized.linear_dynamic": 2 * 6 * 16 * 8}
    # Fused with a ReLU (linear_relu_dynamic): the clamp on the floating-point output, 1 more
    # per output element, beside the bias's.
    fused = tq.fuse_modules(nn.Sequential(nn.Linear(16, 8), nn.ReLU()).eval(), [["0", "1"]])
    report = measured(tq.quantize_dynamic(fused, {torch.ao.nn.intrinsic.LinearReLU}, dtype=torch.qint8))
    assert report["by_operator"] == {"quantized.linear_relu_dynamic": 6 * 96 + 3 * 48}
    # The same work as the separate operators: quantize_per_tensor_dynamic is 6 per element
    # (its minimum and maximum, then quantize), as the kernel's quantization of its input.
    quantize = measure_flops(lambda: torch.quantize_per_tensor_dynamic(x, torch.quint8, False))
    assert quantize["by_operator"] == {"aten.quantize_per_tensor_dynamic": 6 * 96}
    # The module the kernel runs in has its FLOPs (by_module is FLOPs, not integer operations).
    assert measured(plain)["by_module"] == {"Sequential": 624, "Sequential.0": 624}


def test_packed_weights_are_read_per_object_not_per_address():
    # Two models of different widths, measured in turn and rebuilt: each call is priced by its
    # own packed weight, never by a stale cache entry.
    for width in (8, 16, 8, 32):
        model = tq.quantize_dynamic(nn.Sequential(nn.Linear(16, width)), {nn.Linear}, dtype=torch.qint8)
        report = measure_flops(lambda m=model: m(torch.randn(3, 16)))
        assert report["integer_ops"]["value"] == 2 * 3 * 16 * width


def test_qat_training_step_is_complete(x):
    model = net().train()
    model.qconfig = tq.get_default_qat_qconfig("fbgemm")
    prepared = tq.prepare_qat(model)
    optimizer = torch.optim.SGD(prepared.parameters(), lr=0.1)

    def step():
        optimizer.zero_grad()
        prepared(x).sum().backward()
        optimizer.step()

    step()
    report = measure_flops(step)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    # Observer + fake quantization, 8 FLOPs per element, on the input [2,3,8,8], the conv weight
    # [4,3,3,3], the ReLU output [2,4,6,6], the linear weight [4,144] and output [2,4].
    observed = 2 * 3 * 8 * 8 + 4 * 3 * 3 * 3 + 2 * 4 * 6 * 6 + 4 * 144 + 2 * 4
    assert report["by_operator"]["aten._fused_moving_avg_obs_fq_helper"] == 8 * observed == 10_912
    # The conv and linear products are counted as in a float model: 2 * 288 outputs * 27 MACs,
    # and the conv's bias added to its 288 outputs (the bias convention).
    assert report["by_operator"]["aten.convolution"] == 2 * 2 * 4 * 6 * 6 * 27 + 2 * 4 * 6 * 6
    assert "integer_ops" not in report


def test_int_mm_counts_integer_operations():
    a = torch.randint(-128, 127, (32, 64), dtype=torch.int8)
    b = torch.randint(-128, 127, (64, 32), dtype=torch.int8)
    report = measure_flops(lambda: torch._int_mm(a, b))
    assert report["total"] == {**report["total"], "status": "complete", "value": 0}
    assert report["integer_ops"]["by_operator"] == {"aten._int_mm": 2 * 32 * 64 * 32}
    with count_flops() as counter:
        torch._int_mm(a, b)
        torch._int_mm(a, b)
    assert counter.report()["integer_ops"]["value"] == 2 * 2 * 32 * 64 * 32
