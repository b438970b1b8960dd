"""Quantized models: floating-point quantization work is counted; integer kernels are named as
deliberately uncounted (FLOPs are floating point), never invisible."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.ao.quantization as tq
from torch import nn

from torchscan import measure_flops

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", message=".*torch.ao.quantization.*")


def net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        tq.QuantStub(), nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 4), tq.DeQuantStub()
    )


def codes(report: dict) -> dict[str, str]:
    return {d["operator"]: d["code"] for d in report["diagnostics"]}


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(2, 3, 8, 8)


def test_static_int8_model_names_its_integer_kernels(x):
    model = net().eval()
    model.qconfig = tq.get_default_qconfig("fbgemm")
    prepared = tq.prepare(model)
    prepared(x)
    quantized = tq.convert(prepared)
    report = measure_flops(lambda: quantized(x))
    assert report["total"]["status"] == "partial"
    assert report["by_operator"] == {
        "aten.quantize_per_tensor": 4 * 2 * 3 * 8 * 8,  # divide, add the zero point, round, clamp
        "aten.relu": 2 * 4 * 6 * 6,  # on the quantized conv output
        "aten.dequantize": 2 * 2 * 4,  # subtract the zero point, multiply by the scale
    }
    assert report["total"]["known_value"] == 1536 + 288 + 16
    # Only the integer kernels are missing, each named with its reason.
    assert codes(report) == {"quantized.conv2d": "deliberately_uncounted", "quantized.linear": "deliberately_uncounted"}
    assert all("integer multiply-accumulates" in d["message"] for d in report["diagnostics"])


@pytest.mark.parametrize(
    ("dtype", "kernel"), [(torch.qint8, "quantized.linear_dynamic"), (torch.float16, "quantized.linear_dynamic_fp16")]
)
def test_dynamic_models_name_their_kernel(dtype, kernel):
    model = tq.quantize_dynamic(nn.Sequential(nn.Linear(16, 8)), {nn.Linear}, dtype=dtype)
    report = measure_flops(lambda: model(torch.randn(4, 16)))
    assert report["total"]["status"] == "partial"
    assert codes(report) == {kernel: "deliberately_uncounted"}


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
    # The conv and linear products are counted as in a float model: 2 * 288 outputs * 27 MACs.
    assert report["by_operator"]["aten.convolution"] == 2 * 2 * 4 * 6 * 6 * 27


def test_int_mm_is_deliberately_uncounted():
    a = torch.randint(-128, 127, (32, 64), dtype=torch.int8)
    b = torch.randint(-128, 127, (64, 32), dtype=torch.int8)
    report = measure_flops(lambda: torch._int_mm(a, b))
    assert (report["total"]["status"], report["total"]["known_value"]) == ("partial", 0)
    assert codes(report) == {"aten._int_mm": "deliberately_uncounted"}
